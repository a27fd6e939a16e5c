"""The streams suite on a CPU: sizes, chunk boundaries, the ideal time and overlap efficiency, the
kernel's math and tolerance, the timeline picture, bad input, SKIP without a GPU, and the three
implementations' own code run on CPU tensors with torch.cuda's streams and events replaced by fakes
(so chunking, buffer reuse, the event-split work and the figures are exercised without a GPU)."""

from __future__ import annotations

import contextlib
import itertools
import time
from pathlib import Path

import pytest
import torch

from kbench import plots as kbench_plots
from kbench.correctness import check
from kbench.errors import UserError
from kbench.loader import BUILTIN_KERNELS, BUILTIN_SUITES, load_helper
from kbench.record import Record
from kbench.registry import Unsupported
from kbench.report import figure_lines
from kbench.suite import Axis, ByteSize, Case, format_size, parse_size

pipeline = load_helper(BUILTIN_SUITES / "streams" / "pipeline.py")
plots = load_helper(BUILTIN_SUITES / "streams" / "timeline.py")  # the timeline drawing

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def case(nbytes=1000, chunks=16, streams=4, work=5):
    return Case({"bytes": nbytes, "chunks": chunks, "streams": streams, "work": work})


@pytest.fixture(scope="module")
def streams(registry):
    return registry.suite("streams")


# --- sizes -----------------------------------------------------------------------------------

@pytest.mark.parametrize("text,value", [
    ("1000", 1000), ("1GiB", 2**30), ("256MiB", 256 * 2**20), ("64KiB", 65536), ("1gib", 2**30),
    ("4 KiB", 4096), ("1GB", 10**9), ("1.5GiB", 3 * 2**29), ("0.5KiB", 512), ("2TiB", 2 * 2**40),
    ("1.25kb", 1250), (".5MiB", 2**19), ("7B", 7), (" 12 ", 12),
])
def test_parse_size(text, value):
    assert parse_size(text, "--bytes") == value


@pytest.mark.parametrize("text", ["", "abc", "GiB", "1GiBs", "-1", "1e9", "1,5GiB", "1 G", "0x10", "1.2.3MiB"])
def test_parse_size_refuses_what_is_not_a_size(text):
    with pytest.raises(UserError, match="--bytes: .* is not a size") as info:
        parse_size(text, "--bytes")
    assert "\n" not in str(info.value)


def test_parse_size_refuses_fractions_of_a_byte():
    with pytest.raises(UserError, match="not a whole number of bytes"):
        parse_size("1.3B", "--bytes")
    with pytest.raises(UserError, match="not a whole number of bytes"):
        parse_size("0.0001KiB", "--bytes")


def test_format_size_reads_back():
    for value in (1, 1000, 1024, 3 * 2**29, 2**30, 5 * 2**40, 123456789):
        assert parse_size(format_size(value), "x") == value
    assert format_size(2**28) == "256MiB" and format_size(1000) == "1000" and format_size(2**30) == "1GiB"


def test_byte_size_axis_parses_sweeps_and_shows_defaults():
    axis = Axis("bytes", ByteSize, (2**30,), "")
    assert axis.parse("1GiB,256MiB,1000") == [2**30, 2**28, 1000]
    assert all(type(v) is int for v in axis.parse("1GiB,7"))  # plain ints: JSON and case keys as usual
    assert axis.format(2**30) == "1GiB"
    assert Axis("n", int, (1,), "").format(2**30) == str(2**30)
    with pytest.raises(UserError, match="--bytes: 'big' is not a size"):
        axis.parse("1GiB,big")


# --- chunks ----------------------------------------------------------------------------------

def test_chunk_ranges_when_the_count_does_not_divide():
    ranges = pipeline.chunk_ranges(250, 16)  # 1000 bytes of fp32 in 16 chunks
    sizes = [stop - start for start, stop in ranges]
    assert sizes == [16] * 10 + [15] * 6
    assert ranges[0] == (0, 16) and ranges[-1] == (235, 250)


@pytest.mark.parametrize("n,chunks", list(itertools.product([1, 2, 7, 250, 1000, 4099], [1, 2, 3, 16, 64])))
def test_chunk_ranges_cover_everything_once(n, chunks):
    if chunks > n:
        with pytest.raises(ValueError, match="non-empty"):
            pipeline.chunk_ranges(n, chunks)
        return
    ranges = pipeline.chunk_ranges(n, chunks)
    assert len(ranges) == chunks
    assert ranges[0][0] == 0 and ranges[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # contiguous, no gap, no overlap
    sizes = [stop - start for start, stop in ranges]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1 and sum(sizes) == n


def test_chunk_ranges_refuses_no_chunks():
    with pytest.raises(ValueError, match="at least 1"):
        pipeline.chunk_ranges(10, 0)


# --- the ideal time, efficiency, speedup --------------------------------------------------------

def test_ideal_is_the_slowest_stage_plus_one_chunk_of_the_others():
    # 16 chunks; H2D 20, kernel 18, D2H 19 ms: 20 + (18 + 19) / 16
    assert pipeline.ideal_ms(20, 18, 19, 16) == pytest.approx(20 + 37 / 16)
    assert pipeline.ideal_ms(20, 18, 19, 1) == pytest.approx(57)  # one chunk: nothing overlaps
    assert pipeline.ideal_ms(5, 40, 5, 4) == pytest.approx(40 + 10 / 4)  # compute-bound
    assert pipeline.ideal_ms(20, 18, 19, 10**6) == pytest.approx(20, rel=1e-5)  # the limit: the slowest stage


def test_ideal_with_copies_that_cannot_go_both_ways_at_full_speed():
    # A half-duplex link: both copies at once take as long as one after the other, the real bottleneck.
    assert pipeline.ideal_ms(20, 18, 19, 16, both_ms=39) == pytest.approx(39 * 15 / 16 + 57 / 16)
    # A full-duplex link: both at once take as long as the slower; the plain formula.
    assert pipeline.ideal_ms(20, 18, 19, 16, both_ms=20) == pytest.approx(pipeline.ideal_ms(20, 18, 19, 16))


@pytest.mark.parametrize("h,k,d", [(20, 18, 19), (1, 10, 1), (10, 1, 3), (3, 3, 3), (0.5, 2, 7)])
@pytest.mark.parametrize("chunks", [1, 2, 5, 16, 64])
def test_ideal_matches_a_simulated_schedule(h, k, d, chunks):
    """An independent derivation: event by event, three engines and enough streams."""
    marks = pipeline.simulate(h, k, d, chunks, streams=4)
    assert marks[-1][3] == pytest.approx(pipeline.ideal_ms(h, k, d, chunks))
    serial = pipeline.simulate(h, k, d, chunks, streams=1)  # one stream runs its chunks in order
    assert serial[-1][3] == pytest.approx(h + k + d)
    two = pipeline.simulate(h, k, d, chunks, streams=2)
    assert pipeline.ideal_ms(h, k, d, chunks) - 1e-9 <= two[-1][3] <= h + k + d + 1e-9


def test_efficiency_speedup_and_balance():
    assert pipeline.overlap_efficiency(22.0, 25.0) == pytest.approx(0.88)
    assert pipeline.speedup(57.0, 22.8) == pytest.approx(2.5)
    assert pipeline.balanced_work(1024, 10.0, 20.0) == 2048
    assert pipeline.balanced_work(0, 1.0, 20.0) is None
    for bad in (0.0, -1.0, float("nan"), float("inf"), None):
        with pytest.raises(ValueError, match="positive time"):
            pipeline.overlap_efficiency(22.0, bad)
        with pytest.raises(ValueError, match="positive time"):
            pipeline.ideal_ms(bad, 1.0, 1.0, 4)
    with pytest.raises(ValueError, match="chunks"):
        pipeline.ideal_ms(1, 1, 1, 0)


# --- the kernel's math -------------------------------------------------------------------------

def emulate_fp32(x: torch.Tensor, work: int, a: float, b: float) -> torch.Tensor:
    """The kernel's fp32 FMA chain: a*y + b in float64 (exact for these operands) rounded to fp32 each step."""
    y = x.to(torch.float32)
    for _ in range(work):
        y = (y.double() * a + b).float()
    return y


@pytest.mark.parametrize("work", [0, 1, 2, 3, 7, 100, 1000, 2048, 2049])
def test_relax_constants_are_exact_and_keep_the_answer_tied_to_x(work):
    a, b = pipeline.relax_constants(work)
    assert float(torch.tensor(a, dtype=torch.float32)) == a and float(torch.tensor(b, dtype=torch.float32)) == b
    assert a + b == 1.0  # the fixed point is exactly 1
    if work:
        assert 0.5 <= pipeline.relax_reference_coefficient(work) <= 0.78


def test_relax_limits():
    assert pipeline.relax_constants(pipeline.MAX_WORK)[0] < 1.0
    for bad in (-1, pipeline.MAX_WORK + 1):
        with pytest.raises(ValueError, match="work must be in"):
            pipeline.relax_constants(bad)


@pytest.mark.parametrize("work", [0, 1, 5, 64, 1000])
def test_fp32_chain_is_within_tolerance_and_wrong_chains_are_not(streams, work):
    c = case(4 * 4096, 4, 2, work)
    x = streams.make_inputs(c, seed=3, device="cpu")["x"]
    assert x.abs().max() <= 1 and x.abs().sum() > 0
    ref = streams.reference(c, {"x": x})
    atol, rtol = streams.tolerance(c)
    a, b = pipeline.relax_constants(work)

    def outside(y):
        return int(((y.double() - ref).abs() > atol + rtol * ref.abs()).sum())

    assert outside(emulate_fp32(x, work, a, b)) == 0
    assert outside(emulate_fp32(x.roll(1), work, a, b)) > 4000  # elements mixed up (a wrong chunk offset)
    if work >= 2:
        assert outside(emulate_fp32(x, work // 2, a, b)) > 3000  # half the work skipped


# --- timelines ------------------------------------------------------------------------------

def test_timeline_bars_one_lane_per_stream():
    marks = pipeline.simulate(8, 4, 8, 6, streams=3)
    bars = pipeline.timeline_bars(marks, 3)
    assert len(bars) == 18
    assert {bar[0] for bar in bars} == {0, 1, 2}
    assert [bar[1] for bar in bars[:3]] == ["H2D", "kernel", "D2H"]
    assert bars[3 * 4][0] == 1 and bars[3 * 4][4] == "4"  # chunk 4 on stream 1
    with pytest.raises(ValueError, match="backwards"):
        pipeline.timeline_bars([(0.0, 2.0, 1.0, 3.0)], 1)
    with pytest.raises(ValueError, match="4 event times"):
        pipeline.timeline_bars([(0.0, 1.0)], 1)


def test_timeline_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    marks = pipeline.simulate(20, 18, 19, 16, streams=4)
    bars = pipeline.timeline_bars(marks, 4)
    written = plots.timeline_plot([f"stream {i}" for i in range(4)], bars, tmp_path / "t.png", "synthetic",
                                  lines={"ideal": pipeline.ideal_ms(20, 18, 19, 16)})
    assert [p.suffix for p in written] == [".png", ".svg"]
    assert (tmp_path / "t.png").read_bytes()[:8] == PNG_MAGIC
    assert (tmp_path / "t.png").stat().st_size > 10_000
    with pytest.raises(UserError, match="at least one bar"):
        plots.timeline_plot(["s"], [], tmp_path / "empty.png")


def test_timeline_path_stays_under_results(tmp_path):
    folder = tmp_path / "results" / "timelines"
    for name in ("../../../etc/passwd", "/abs/x", "a b:c*?", "streams-pipelined-1GiB-16chunks"):
        path = plots.timeline_path(name, folder)
        assert path.parent == folder and path.suffix == ".png"
        assert ".." not in path.name and "/" not in path.name
    assert plots.timeline_path("x").parts[:2] == ("results", "timelines")


# --- the suite ---------------------------------------------------------------------------------

def test_cost_model_and_inputs(streams):
    c = case(1000, 16, 4, 5)
    assert streams.flops(c) == 2 * 5 * 250 and streams.min_bytes(c) == 2000
    x = streams.make_inputs(c, seed=1, device="cpu")["x"]
    assert x.dtype == torch.float32 and x.shape == (250,)
    assert x.equal(streams.make_inputs(c, seed=1, device="cpu")["x"])
    assert not x.equal(streams.make_inputs(c, seed=2, device="cpu")["x"])
    out = streams.make_output(c, {"x": x})
    assert out.shape == x.shape and out.dtype == torch.float32
    assert streams.reference(case(1000, 16, 4, 0), {"x": x}).equal(x.double())  # no work: a copy
    assert streams.baseline == "serial"


@pytest.mark.parametrize("values,fragment", [
    ({"bytes": 1001}, "--bytes must be a positive multiple of 4"),
    ({"bytes": 0}, "--bytes must be a positive multiple of 4"),
    ({"chunks": 0}, "--chunks and --streams must be at least 1"),
    ({"streams": 0}, "--chunks and --streams must be at least 1"),
    ({"bytes": 16, "chunks": 5}, "a chunk would be empty"),
    ({"work": -1}, "--work must be in 0.."),
    ({"work": pipeline.MAX_WORK + 1}, "--work must be in 0.."),
    ({"bytes": 2**41}, "at most 1TiB"),
])
def test_validate(streams, values, fragment):
    c = case(**{"nbytes": values.pop("bytes", 1000), **values})
    with pytest.raises(UserError, match=fragment.replace(".", r"\.")):
        streams.validate(c)


def test_validate_accepts_more_streams_than_chunks(streams):
    streams.validate(case(4096, 1, 4))  # a sweep --chunks 1,4,16 --streams 4 must not stop at chunks=1


@pytest.mark.parametrize("args,fragment", [
    (["--bytes", "1GB2"], "--bytes: '1GB2' is not a size"),
    (["--bytes", "1001"], "--bytes must be a positive multiple of 4"),
    (["--bytes", "16", "--chunks", "5"], "a chunk would be empty"),
    (["--chunks", "1,0"], "--chunks and --streams must be at least 1"),
    (["--work", "x"], "--work: 'x' is not an integer"),
])
def test_bad_streams_input_is_one_line_and_exit_2(cli, args, fragment, tmp_path, flat_text):
    result = cli("run", "streams", *args, "--out", tmp_path / "x.jsonl")
    assert result.exit_code == 2
    assert fragment in flat_text(result.output) and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "x.jsonl").exists()


def test_every_implementation_skips_on_the_cpu(cli, tmp_path, jsonl):
    out = tmp_path / "s.jsonl"
    result = cli("run", "streams", "--bytes", "1000", "--chunks", "1,16", "--streams", "4", "--out", out)
    assert result.exit_code == 0, result.output
    records = jsonl(out)
    assert sorted({r["impl"] for r in records}) == ["events", "pipelined", "serial"]
    assert len(records) == 6
    for r in records:
        assert r["status"] == "SKIP" and r["reason"] == "needs a CUDA device"
        assert r["case"]["bytes"] == 1000
    assert {r["case"]["chunks"] for r in records} == {1, 16}


def test_host_buffers_refuse_pageable_memory():
    helper = load_helper(BUILTIN_KERNELS / "streams" / "_streams.py")
    x = torch.zeros(8)
    with pytest.raises(Unsupported, match="pinned"):
        helper.host_buffers({"x": x}, torch.zeros(8))
    with pytest.raises(Unsupported, match="contiguous 1-D fp32"):
        helper.host_buffers({"x": x.double()}, torch.zeros(8))


# --- the implementations' own code on CPU tensors, CUDA replaced by fakes ------------------------

class FakeEvent:
    def __init__(self, enable_timing=False, **_):
        self.at = None

    def record(self, stream=None):
        self.at = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return (other.at - self.at) * 1e3


class FakeStream:
    handles = itertools.count(1)

    def __init__(self, *_, **__):
        self.cuda_stream = next(self.handles)

    def wait_stream(self, other):
        pass

    def wait_event(self, event):
        pass


class FakeRelax:
    """The kernel, emulated in fp32 on CPU tensors (launches run at once: a CPU has no queue)."""

    launches: list = []

    def __init__(self, work):
        self.work = work
        self.a, self.b = pipeline.relax_constants(work)

    def launch(self, stream, src, dst, count, work=None):
        FakeRelax.launches.append((stream.cuda_stream, count, self.work if work is None else work))
        dst[:count] = emulate_fp32(src[:count], self.work if work is None else work, self.a, self.b)

    def config(self, count):
        return {"kernel": "emulated", "work": self.work}


@pytest.fixture
def fake_cuda(monkeypatch, tmp_path):
    """torch.cuda's streams and events, the kernel, device buffers and the pinned check replaced: the
    implementations run their real schedules on CPU tensors, one operation after the other."""
    helper = load_helper(BUILTIN_KERNELS / "streams" / "_streams.py")
    current = FakeStream()
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a, **k: current)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(helper, "Relax", FakeRelax)
    # Device buffers start as NaN: a chunk that reads what no copy wrote shows up in the output.
    monkeypatch.setattr(helper, "device_buffer", lambda count: torch.full((count,), float("nan")))
    monkeypatch.setattr(helper, "host_buffers", lambda inputs, out: (inputs["x"], out))
    monkeypatch.setattr(FakeRelax, "launches", [])
    monkeypatch.chdir(tmp_path)
    return helper


@pytest.mark.parametrize("impl", ["serial", "pipelined", "events"])
@pytest.mark.parametrize("nbytes,chunks,nstreams", [(1000, 16, 4), (4 * 1001, 7, 3), (4 * 5, 5, 8), (4096, 1, 4),
                                                     (4 * 4099, 64, 2)])
def test_implementations_are_right_for_any_chunking(registry, streams, fake_cuda, impl, nbytes, chunks, nstreams):
    verdict = check(streams, registry.implementations("streams")[impl], case(nbytes, chunks, nstreams, 7), "cpu",
                    seed=4, trials=2)
    assert verdict.ok, verdict.reason


def test_pipelined_goes_round_the_streams_chunk_by_chunk(registry, streams, fake_cuda):
    c = case(1000, 16, 3, 3)
    inputs = streams.make_inputs(c, seed=0, device="cpu")
    fn = registry.implementations("streams")["pipelined"].make(c, inputs, streams.make_output(c, inputs))
    FakeRelax.launches.clear()
    fn()
    assert [count for _, count, _ in FakeRelax.launches] == [16] * 10 + [15] * 6
    handles = [handle for handle, _, _ in FakeRelax.launches]
    assert handles[:3] == handles[3:6] and len(set(handles[:3])) == 3  # chunk i on stream i % 3
    assert fn.config["chunks"] == 16 and fn.config["streams"] == 3 and fn.config["chunk_bytes"] == [60, 64]


def test_events_splits_the_work_over_its_two_streams(registry, streams, fake_cuda):
    c = case(1000, 16, 4, 7)
    inputs = streams.make_inputs(c, seed=0, device="cpu")
    fn = registry.implementations("streams")["events"].make(c, inputs, streams.make_output(c, inputs))
    FakeRelax.launches.clear()
    fn()
    (first, count1, work1), (second, count2, work2) = FakeRelax.launches
    assert first != second and count1 == count2 == 250 and (work1, work2) == (3, 4)


def test_the_classic_chunking_would_fail(registry, streams, fake_cuda, monkeypatch):
    """The classic example's loop runs totalSize / chunkSize chunks: the remainder is never copied.
    The check catches it."""
    def drops_the_remainder(n, chunks):
        size = n // chunks
        return [(i * size, (i + 1) * size) for i in range(chunks)]

    monkeypatch.setattr(pipeline, "chunk_ranges", drops_the_remainder)
    verdict = check(streams, registry.implementations("streams")["pipelined"], case(1000, 16, 4, 3), "cpu",
                    seed=0, trials=1)
    assert not verdict.ok and "NaN/Inf" in verdict.reason


def test_pipelined_figures_and_timeline(registry, streams, fake_cuda):
    pytest.importorskip("matplotlib")
    c = case(4 * 1001, 8, 3, 5)
    inputs = streams.make_inputs(c, seed=0, device="cpu")
    out = streams.make_output(c, inputs)
    fn = registry.implementations("streams")["pipelined"].make(c, inputs, out)
    fn()
    fig = fn.figures({"stats": {"median": 2.0}})
    for key in ("h2d_ms", "kernel_ms", "d2h_ms", "both_ms", "serial_ms", "ideal_ms"):
        assert fig[key] > 0, key
    assert fig["pipelined_ms"] == 2.0
    assert fig["ideal_ms"] == pytest.approx(pipeline.ideal_ms(fig["h2d_ms"], fig["kernel_ms"], fig["d2h_ms"], 8,
                                                              fig["both_ms"]))
    assert fig["overlap_efficiency"] == pytest.approx(fig["ideal_ms"] / 2.0)
    assert fig["speedup_vs_serial"] == pytest.approx(fig["serial_ms"] / 2.0)
    assert fig["h2d_gbps"] == pytest.approx(4004 / fig["h2d_ms"] / 1e6)
    timeline = fig["timeline"]
    assert timeline["lanes"] == ["stream 0", "stream 1", "stream 2"] and len(timeline["bars"]) == 24
    png = Path(fig["timeline_png"])
    assert png.parts[:2] == ("results", "timelines") and png.read_bytes()[:8] == PNG_MAGIC
    assert "1001" not in png.name or "4004" in png.name  # named by the size, chunks, streams and work
    assert "8chunks-3streams-work5" in png.name
    text = " ".join(fig["summary"])
    for fragment in ("H2D", "kernel", "D2H", "H2D+D2H at once", "serial", "pipelined", "ideal",
                     "overlap efficiency", "x serial", "timeline: results/timelines/"):
        assert fragment in text, fragment


def test_figures_without_matplotlib_still_report(registry, streams, fake_cuda, monkeypatch):
    def no_matplotlib():
        raise UserError("plots need matplotlib: pip install 'kbench[plot]' (or matplotlib)")

    monkeypatch.setattr(kbench_plots, "pyplot", no_matplotlib)
    c = case(1000, 4, 2, 1)
    inputs = streams.make_inputs(c, seed=0, device="cpu")
    fn = registry.implementations("streams")["pipelined"].make(c, inputs, streams.make_output(c, inputs))
    fig = fn.figures({"stats": {"median": 1.0}})
    assert fig["timeline_png"] is None and "matplotlib" in fig["timeline_note"]
    assert any("timeline: plots need matplotlib" in line for line in fig["summary"])


# --- the engine's figures hook: worker -> record -> report ---------------------------------------

def test_closure_figures_reach_the_record_and_the_output(cli, tmp_path, write_kernels, jsonl, flat_text,
                                                         wide_console):
    folder = write_kernels({"figured.py": """
        @implementation("attention", "figured", backend="torch")
        def figured(case, inputs, out):
            run = _correct(case, inputs, out)
            calls = []
            run.figures = lambda timing: calls.append(1) or {
                "median_seen": timing["stats"]["median"], "calls": len(calls),
                "summary": ["measured by the implementation itself"]}
            return run
    """})
    out = tmp_path / "f.jsonl"
    result = cli("run", "attention", "--n", "16", "--d", "16", "--max-time", "0.2", "--kernels", folder,
                 "--impl", "figured", "--baseline", "figured", "--out", out)
    assert result.exit_code == 0, result.output
    (record,) = jsonl(out)
    assert record["status"] == "OK"
    assert record["figures"]["calls"] == 1  # once, after timing
    assert record["figures"]["median_seen"] == record["timing"]["stats"]["median"]
    assert "figured: measured by the implementation itself" in flat_text(result.stdout)


def test_figure_lines_only_for_ok_records():
    ok = {"schema": 1, "suite": "streams", "impl": "pipelined", "label": "pipelined", "case_key": "c",
          "status": "OK", "timing": {"stats": {"median": 1.0}}, "figures": {"summary": ["a", "b"]}}
    failed = {**ok, "status": "FAIL"}
    plain = {**ok, "impl": "serial", "label": "serial", "figures": {}}
    assert figure_lines([Record.from_json(r) for r in (ok, failed, plain)]) == ["pipelined: a", "pipelined: b"]


def test_figures_when_the_serial_schedule_does_not_fit(registry, streams, fake_cuda, monkeypatch):
    """The pipeline needs only chunk-sized device buffers; the serial schedule, the whole buffer twice."""
    n = 1000 // 4

    def device_buffer(count):
        if count == n:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        return torch.full((count,), float("nan"))

    monkeypatch.setattr(fake_cuda, "device_buffer", device_buffer)
    monkeypatch.setattr(kbench_plots, "pyplot", lambda: (_ for _ in ()).throw(UserError("no plots here")))
    c = case(1000, 4, 2, 1)
    inputs = streams.make_inputs(c, seed=0, device="cpu")
    fn = registry.implementations("streams")["pipelined"].make(c, inputs, streams.make_output(c, inputs))
    fig = fn.figures({"stats": {"median": 1.0}})
    assert fig["serial_ms"] is None and fig["speedup_vs_serial"] is None and fig["ideal_ms"] > 0
    assert "serial does not fit in device memory" in " ".join(fig["summary"])
    assert "x serial" not in " ".join(fig["summary"])
