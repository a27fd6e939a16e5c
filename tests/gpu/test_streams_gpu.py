"""The streams suite on a GPU, in this process: every implementation right at byte counts its chunking
does not divide; the classic cudaStreamWaitEvent example's event order (recorded before stream 1's
work) shown to order nothing; and the pipelined schedule overlapping its copies with its kernel, at
the work that balances the two, within 1.15x of the ideal time and 1.8x or more faster than serial."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kbench import correctness, timing
from kbench.loader import BUILTIN_KERNELS, load_helper
from kbench.stopping import StopRule
from kbench.suite import Case

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_cuda", "needs_cupy")]

MiB = 1 << 20
IDEAL_RATIO_GOAL = 1.15  # pipelined / ideal at most: fill and drain are one chunk of each other stage
SPEEDUP_GOAL = 1.8  # serial / pipelined at least: balanced, three stages overlap (16 chunks: ~2.7x at best)


def case(nbytes: int, chunks: int, streams: int, work: int) -> Case:
    return Case({"bytes": nbytes, "chunks": chunks, "streams": streams, "work": work})


# (bytes, chunks, streams, work): 250 elements in 16 chunks; a prime count of elements in 7 chunks
# over 3 streams; 100,003 elements in 64 chunks over 8 streams with work 0 (the kernel a plain copy);
# 2^22 + 3 elements at the suite's default work.
CASES = [(1000, 16, 4, 5), (4 * 1_000_003, 7, 3, 100), (4 * 100_003, 64, 8, 0), (4 * (2**22 + 3), 16, 4, 2048)]


@pytest.mark.parametrize("name", ["serial", "pipelined", "events"])
@pytest.mark.parametrize("nbytes,chunks,streams,work", CASES,
                         ids=[f"{b}B-{c}chunks-{s}streams-work{w}" for b, c, s, w in CASES])
def test_implementation_is_right_for_any_chunking(registry, name, nbytes, chunks, streams, work):
    """kbench.correctness.check: fresh pinned inputs, the output poisoned, the float64 reference."""
    suite, impl = registry.suite("streams"), registry.implementations("streams")[name]
    verdict = correctness.check(suite, impl, case(nbytes, chunks, streams, work), "cuda", seed=1, trials=2)
    assert verdict.ok, f"{name}: {verdict.reason}"


def test_an_event_recorded_before_stream_1s_work_orders_nothing(registry):
    """The classic example records its event on stream 1 *before* stream 1's copy and kernel, and has
    stream 2 wait on it: the wait is satisfied at once, and kernel 2 reads the intermediate buffer
    (NaN here) while stream 1 is still copying in. `events` records it after kernel 1 instead; this is
    why. The copy of 64 MiB takes about a millisecond, kernel 2 starts within microseconds: unordered,
    the race shows on every run (asserted: on one of five at least)."""
    import torch

    helper = load_helper(BUILTIN_KERNELS / "streams" / "_streams.py")
    suite = registry.suite("streams")
    c = case(64 * MiB, 1, 2, 4096)
    inputs = suite.make_inputs(c, seed=5, device="cuda")
    out = suite.make_output(c, inputs)
    x, y = helper.host_buffers(inputs, out)
    n = x.numel()
    relax = helper.Relax(c.work)
    d_in, d_mid, d_out = (helper.device_buffer(n) for _ in range(3))
    first, second = torch.cuda.Stream(), torch.cuda.Stream()
    start_event = torch.cuda.Event()
    ref = suite.reference(c, {"x": x.clone()})
    atol, rtol = suite.tolerance(c)
    wrong = []
    for _ in range(5):
        d_mid.fill_(float("nan"))
        out.fill_(float("nan"))
        torch.cuda.synchronize()
        with torch.cuda.stream(first):
            start_event.record(first)  # the classic example's place: before stream 1's work on the data
            d_in.copy_(x, non_blocking=True)
            relax.launch(first, d_in, d_mid, n, work=c.work // 2)
        second.wait_event(start_event)
        with torch.cuda.stream(second):
            relax.launch(second, d_mid, d_out, n, work=c.work - c.work // 2)
            y.copy_(d_out, non_blocking=True)
        torch.cuda.synchronize()
        reason, _, _ = correctness.compare(out, out, ref, atol, rtol)
        wrong.append(bool(reason))
    assert any(wrong), "stream 2 never read kernel 1's output early in 5 runs: something ordered the two streams"


def _measured(fn) -> dict:
    """kbench's own timing of a closure: CUDA events, L2 flushed, adaptive stop, the side-stream check."""
    return timing.measure_cuda(fn, timing.Settings(stop=StopRule(max_time=0.5)))


def _pipelined_figures(suite, impl, c: Case) -> dict:
    inputs = suite.make_inputs(c, seed=0, device="cuda")
    fn = impl.make(c, inputs, suite.make_output(c, inputs))
    measured = _measured(fn)
    assert not measured.get("uncovered"), f"the pipelined closure's work escaped kbench's events: {measured['uncovered']}"
    return fn.figures(measured)


def test_pipelined_overlaps_copies_and_kernel(registry, tmp_path, monkeypatch):
    """256 MiB in 16 chunks over 4 streams, at the work that makes the kernel as long as the slower
    copy (measured first at work 1024): the pipeline's own stage times give its ideal, and kbench's
    timing of serial and pipelined the speedup. Also: kbench's events cover all the pipeline's streams."""
    monkeypatch.chdir(tmp_path)  # the timeline picture goes under results/timelines/ of the working folder
    suite, impls = registry.suite("streams"), registry.implementations("streams")
    nbytes, chunks, streams = 256 * MiB, 16, 4
    probe = _pipelined_figures(suite, impls["pipelined"], case(nbytes, chunks, streams, 1024))
    work = probe["balanced_work"]
    assert work, f"no balanced work from the stage times: {probe['summary']}"

    serial_case = case(nbytes, 1, 1, work)
    inputs = suite.make_inputs(serial_case, seed=0, device="cuda")
    serial = _measured(impls["serial"].make(serial_case, inputs, suite.make_output(serial_case, inputs)))
    fig = _pipelined_figures(suite, impls["pipelined"], case(nbytes, chunks, streams, work))
    ratio = fig["pipelined_ms"] / fig["ideal_ms"]
    speedup = serial["stats"]["median"] / fig["pipelined_ms"]
    figures = "\n".join(fig["summary"])
    assert ratio <= IDEAL_RATIO_GOAL, f"pipelined {ratio:.3f}x the ideal time at work {work}:\n{figures}"
    assert speedup >= SPEEDUP_GOAL, (f"pipelined only {speedup:.2f}x faster than serial "
                                     f"({serial['stats']['median']:.3f} ms) at work {work}:\n{figures}")
    if importlib.util.find_spec("matplotlib") is not None:
        assert fig["timeline_png"] and Path(fig["timeline_png"]).is_file(), fig.get("timeline_note")
