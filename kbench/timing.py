"""Timing one zero-argument closure: CUDA events on a GPU, the wall clock on a CPU.

GPU method (after triton.testing.do_bench and nvbench): warm-up outside the
numbers; per sample, an L2 flush (a buffer twice the L2 size, allocated once,
zeroed) *before* the start event so it is never timed; events recorded in
batches and read after one synchronise; sampling stops by :class:`StopRule`.
With ``cuda_graph`` the closure is captured once and each sample replays it,
which removes the CPU launch gaps between the kernels of a launch-bound closure.

Each timed call (and each timed graph replay) runs inside an NVTX range named by
``Settings.nvtx_range`` (:mod:`kbench.nvtx`): pushed before the start event is
recorded and popped after the end event, so the range adds no GPU time and a
profiler filtering on it sees exactly the measured kernels. Warm-up, the L2 flush
and the synchronised calls of the side-stream check run outside it.

The events only see work queued on the current stream. After sampling, a few
calls are timed on the wall clock with a device-wide synchronise after each:
a call that takes far longer than the events say did its work where they
cannot see it (a side stream), and is reported as such (``uncovered``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from kbench.clocks import ClockMonitor
from kbench.nvtx import Ranges
from kbench.stats import summarize
from kbench.stopping import StopRule

HIGH_NOISE = 0.02  # warn when the median is known to worse than 2 %
# A synchronised call may exceed the events' time by the synchronise's latency
# (~10-20 us) and a little jitter; far more means work the events did not cover.
UNCOVERED_FACTOR = 2.0
UNCOVERED_SLACK_MS = 0.05
# A Python launch costs ~3-6 us: under this a closure's time is mostly launch overhead.
LAUNCH_BOUND_MS = 0.020


@dataclass
class Settings:
    stop: StopRule = field(default_factory=StopRule)
    warmup_time: float = 0.05  # seconds of untimed calls (at least warmup_calls)
    warmup_calls: int = 3
    flush_l2: bool = True
    cuda_graph: bool = False
    # The NVTX range each timed call runs in (kbench/<suite>/<label>/<case>); None: no ranges.
    nvtx_range: str | None = None
    # Also open a torch.profiler.record_function scope of the same name (kbench profile --torch-profiler).
    record_function: bool = False

    def ranges(self) -> Ranges:
        return Ranges(self.nvtx_range, self.record_function)


def _batch_size(per_call: float, target: float = 0.02, room: int = 200) -> int:
    """Samples per synchronise: about ``target`` seconds of work, 1..200, and never more than
    ``room`` (the samples the stop rule's ``max_samples`` still allows)."""
    return int(min(200, max(1, room), max(1, target / max(per_call, 1e-7))))


def _warm_up(call, sync, settings: Settings) -> float:
    """Run untimed calls (JIT, autotune, module load); returns the seconds per call seen."""
    calls, start = 0, time.perf_counter()
    while calls < settings.warmup_calls or time.perf_counter() - start < settings.warmup_time:
        call()
        sync()
        calls += 1
        if calls >= 10_000:
            break
    return (time.perf_counter() - start) / calls


def _finish(samples_s: list[float], stop_reason: str, method: str, settings: Settings, extra_warnings=()) -> dict:
    stats = summarize([s * 1e3 for s in samples_s])  # milliseconds
    warnings = list(extra_warnings)
    if stats["n"] < settings.stop.min_samples:
        warnings.append(f"only {stats['n']} samples ({stop_reason})")
    if method.startswith("cuda-events") and stats["median"] < LAUNCH_BOUND_MS:
        warnings.append("launch-bound (< 20 us a call): --cuda-graph times it without launch gaps")
    if stats["median_noise"] is not None and stats["median_noise"] > max(HIGH_NOISE, settings.stop.target_noise):
        warnings.append(f"noisy: median known to ±{stats['median_noise']:.1%}")
    return {
        "method": method,
        "unit": "ms",
        "samples": [round(s * 1e3, 6) for s in samples_s],
        "stats": stats,
        "stop_reason": stop_reason,
        "warnings": warnings,
    }


def measure_cpu(fn, settings: Settings) -> dict:
    """Wall-clock timing of a CPU closure. Not GPU performance, and labelled so."""
    _warm_up(fn, lambda: None, settings)
    ranges = settings.ranges()
    samples: list[float] = []
    start = time.perf_counter()
    while True:
        ranges.push()
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
        ranges.pop()
        reason = settings.stop.reason_to_stop(samples, time.perf_counter() - start)
        if reason:
            return _finish(samples, reason, "cpu-wall-clock", settings)


def uncovered_work(event_ms: float, wall_ms: float) -> str:
    """Why the events missed part of a call's work, or "": the synchronised wall-clock time of a
    call (``wall_ms``, device-wide synchronise) against the events' median (``event_ms``)."""
    if wall_ms <= UNCOVERED_FACTOR * event_ms + UNCOVERED_SLACK_MS:
        return ""
    return (f"timing: the CUDA events saw {event_ms:.4g} ms a call, but a call with a device-wide "
            f"synchronise takes {wall_ms:.4g} ms: work outside the timed stream "
            "(a side stream the events do not cover?)")


def synced_wall_ms(call, sync, per_call_s: float, budget_s: float = 0.2) -> float:
    """Median wall-clock milliseconds of a call followed by a device-wide synchronise (3 to 50 calls)."""
    calls = int(min(50, max(3, budget_s / max(per_call_s, 1e-7))))
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter()
        call()
        sync()
        samples.append(time.perf_counter() - t0)
    samples.sort()
    return samples[len(samples) // 2] * 1e3


class TorchCuda:
    """The few torch.cuda calls measure_cuda makes. A seam: tests pass a fake that records the order
    of events, flushes, range pushes and calls, which a CPU-only machine could not otherwise check."""

    def __init__(self):
        import torch

        self.torch = torch

    def synchronize(self) -> None:
        self.torch.cuda.synchronize()

    def event(self):
        return self.torch.cuda.Event(enable_timing=True)

    def flush_buffer(self):
        """A buffer twice the L2 size (at least 1 MiB), zeroed before each sample to evict L2."""
        torch = self.torch
        l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
        return torch.empty(max(2 * l2, 1 << 20) // 4, dtype=torch.int32, device="cuda")

    def capture(self, fn):
        """Capture one call of ``fn`` into a CUDA graph; returns the replay callable."""
        return _capture(fn).replay


def measure_cuda(fn, settings: Settings, device_uuid: str | None = None, cuda=None) -> dict:
    cuda = cuda or TorchCuda()
    sync = cuda.synchronize
    call = fn
    method = "cuda-events"
    if settings.cuda_graph:
        call = cuda.capture(fn)
        method = "cuda-graph-replay"

    per_call = _warm_up(call, sync, settings)
    flush = None
    if settings.flush_l2:
        flush = cuda.flush_buffer()
        method += "+l2-flush"

    ranges = settings.ranges()
    clocks = ClockMonitor(device_uuid)
    samples: list[float] = []
    start = time.perf_counter()
    while True:
        batch = _batch_size(per_call, room=settings.stop.max_samples - len(samples))
        events = [(cuda.event(), cuda.event()) for _ in range(batch)]
        for begin, end in events:
            if flush is not None:
                flush.zero_()
            ranges.push()  # host-side, before the start event: the range adds no GPU time
            begin.record()
            call()
            end.record()
            ranges.pop()
        sync()
        clocks.sample()
        samples.extend(begin.elapsed_time(end) / 1e3 for begin, end in events)
        reason = settings.stop.reason_to_stop(samples, time.perf_counter() - start)
        if reason:
            warnings = [w for w in (clocks.warning(),) if w]
            result = _finish(samples, reason, method, settings, warnings)
            result["clock"] = clocks.summary()
            result["synced_wall_ms"] = synced_wall_ms(call, sync, per_call)
            uncovered = uncovered_work(result["stats"]["median"], result["synced_wall_ms"])
            if uncovered:
                result["uncovered"] = uncovered
            return result


def _capture(fn):
    """Capture one call of ``fn`` into a CUDA graph (warmed up on a side stream first, as torch requires)."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph
