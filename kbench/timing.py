"""Timing one zero-argument closure: CUDA events on a GPU, the wall clock on a CPU.

GPU method (after triton.testing.do_bench and nvbench): warm-up outside the
numbers; per sample, an L2 flush (a read of a buffer twice the L2 size, allocated once:
:meth:`TorchCuda.l2_flush` says why a read) *before* the start event so it is never timed; events recorded in
batches and read after one synchronise; sampling stops by :class:`StopRule`.
With ``cuda_graph`` the closure is captured once and each sample replays it,
which removes the CPU launch gaps between the kernels of a launch-bound closure.

With ``auto_graph`` (kbench run's default) a closure whose eager median is under LAUNCH_BOUND_MS is
timed a second time, right after, as graph replays (:func:`with_graph_replay`): the same guard,
flush, stop rule and clock monitoring. Under that size the events time mostly the launch path
(the gaps between the kernels a Python closure queues), so the replays' time is the kernel's and
becomes the headline; the eager result is kept beside it (``eager``). A closure that cannot be
captured, or whose replays give a wrong answer, keeps its eager time, with a warning saying why.

The stream is held before each start event (nvbench's blocking kernel): a GPU-side sleep, longer
than the host takes to queue one call, runs ahead of the start event, so by the time the GPU
reaches it the whole call is queued behind it. The events then time the GPU's work, not the host's
pace: a library whose Python side takes longer than its kernel (a DSL's launch path) would
otherwise be timed at its host speed. What the host takes to queue a call is recorded beside it
(``host_enqueue_ms``), with a warning where it exceeds the GPU time.

A call that waits on the GPU inside (reads a result back, synchronises a stream of its own) cannot
be queued ahead: it would wait for the hold. Before sampling, one call is made with every SM held
(:func:`waits_on_gpu`); one that returns only after the hold is timed from an idle GPU instead, a
device-wide synchronise before each start event, so its events span all it does: its host time and
every stream it waits for (``host_synchronous`` in the result says how it was seen to wait).

Each timed call (and each timed graph replay) runs inside an NVTX range named by
``Settings.nvtx_range`` (:mod:`kbench.nvtx`): pushed before the start event is
recorded and popped after the end event, so the range adds no GPU time and a
profiler filtering on it sees exactly the measured kernels. Warm-up, the L2 flush
and the synchronised calls of the side-stream check run outside it.

Every timed call is checked like the correctness trials (``guard``, a
:class:`kbench.correctness.TimedCalls`): its output is poisoned before the call,
outside the timed region, and randomly chosen calls (and the last of each batch)
are judged against the reference right after their end event. A call judged wrong
ends the measurement (``wrong_call`` in the result). A graph's replays all read the
inputs it was captured with, so a graph-timed result also hands back the replaying
callable (``REPLAY_CALL``): after timing, the worker replays it on new inputs.

The events only see work queued on the current stream. After sampling, a few
calls are timed on the wall clock with a device-wide synchronise after each:
a call that takes far longer than the events say did its work where they
cannot see it (a side stream), and is reported as such (``uncovered``). A
host-bound call (a library whose Python side takes longer than its kernel) is
long on that clock too, but the GPU is done soon after the call returns and the
call does not wait on the GPU: it is not flagged (the host-bound warning says
what it is).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable

from kbench.clocks import THROTTLE_FRACTION, ClockMonitor
from kbench.nvtx import Ranges
from kbench.stats import summarize
from kbench.stopping import StopRule

HIGH_NOISE = 0.02  # warn when the median is known to worse than 2 %
# A synchronised call may exceed the events' time by the synchronise's latency
# (~10-20 us) and a little jitter; far more means work the events did not cover.
UNCOVERED_FACTOR = 2.0
UNCOVERED_SLACK_MS = 0.05
# How a record's timing method names the flush. A record whose method ends "+l2-flush" was timed after
# a flush that zeroed its buffer: its memory-bound samples carry the write-back of the buffer's dirty
# lines, and kbench compare does not pair it with a record timed after this flush.
L2_FLUSH = "+l2-flush-read"
ZEROING_FLUSH = "+l2-flush"
# A Python launch costs ~3-6 us: under this a closure's time is mostly launch overhead.
LAUNCH_BOUND_MS = 0.020
# The key of a graph-timed result holding the replaying callable (CudaSampler.result), for the worker only.
REPLAY_CALL = "replay_call"
LAUNCH_BOUND_NOTE = "launch-bound (< 20 us a call)"  # how the warning starts; dropped once graph replay timed it
# On a CPU the timed calls are judged in batches of this many (the last of each, and others at random).
CPU_CHECK_BATCH = 8
# The hold before each start event: this many times the host's median time to queue a call, plus the
# slack (the clock stamp's and the events' own launches), at most HOLD_MAX_S (a call that waits on the
# GPU inside, e.g. reading a result, takes as long to queue as to run; holding longer gains nothing).
HOLD_FACTOR = 2.0
HOLD_SLACK_S = 50e-6
HOLD_MAX_S = 0.02
HOLD_TRIES = 3  # device holds a waits_on_gpu verdict may take before it trusts none of them
SLEEP_CYCLES_PER_S = 2.0e9  # torch.cuda._sleep counts SM cycles; 2 GHz is above any datacenter GPU's SM clock
# The device hold's two 1,024-thread programs an SM take all of its 2,048 thread slots only if both fit in
# its 65,536 registers: 32 a thread.
SPIN_MAX_REGISTERS = 32


@dataclass
class Settings:
    stop: StopRule = field(default_factory=StopRule)
    warmup_time: float = 0.05  # seconds of untimed calls (at least warmup_calls)
    warmup_calls: int = 3
    flush_l2: bool = True
    cuda_graph: bool = False
    # Also time a launch-bound closure as graph replays and make that the headline (with_graph_replay).
    # Off here, so a direct measure_cuda (kbench calibrate) times only what it asks for; kbench run sets it.
    auto_graph: bool = False
    # The NVTX range each timed call runs in (kbench/<suite>/<label>/<case>); None: no ranges.
    nvtx_range: str | None = None
    # Also open a torch.profiler.record_function scope of the same name (kbench profile --torch-profiler).
    record_function: bool = False

    def ranges(self) -> Ranges:
        return Ranges(self.nvtx_range, self.record_function)


MAX_BATCH = 200  # samples per synchronise at most


def _batch_size(per_call: float, target: float = 0.02, room: int = MAX_BATCH) -> int:
    """Samples per synchronise: about ``target`` seconds of work, 1..MAX_BATCH, and never more than
    ``room`` (the samples the stop rule's ``max_samples`` still allows)."""
    return int(min(MAX_BATCH, max(1, room), max(1, target / max(per_call, 1e-7))))


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


def host_enqueue_s(call, sync, calls: int = 5) -> float:
    """The median host time to queue one call (no synchronise inside the timing; one after each)."""
    times = []
    for _ in range(calls):
        sync()
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    sync()
    return _median(times)


def hold_seconds(enqueue_s: float) -> float:
    return min(HOLD_MAX_S, HOLD_FACTOR * enqueue_s + HOLD_SLACK_S)


def _finish(samples_s: list[float], stop_reason: str, method: str, settings: Settings, extra_warnings=()) -> dict:
    stats = summarize([s * 1e3 for s in samples_s])  # milliseconds
    warnings = list(extra_warnings)
    if stats["n"] < settings.stop.min_samples:
        warnings.append(f"only {stats['n']} samples ({stop_reason})")
    if method.startswith("cuda-events") and stats["median"] < LAUNCH_BOUND_MS:
        warnings.append(f"{LAUNCH_BOUND_NOTE}: --cuda-graph times it without launch gaps")
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


class _Unguarded:
    """The guard of a closure timed without checks (kbench calibrate, tests of the timing loop)."""

    def plan_batch(self, size: int) -> None:
        pass

    def before(self) -> None:
        pass

    def chosen(self, index_in_batch: int) -> bool:
        return False

    def judge(self, returned) -> str:
        return ""

    def after(self, returned) -> None:
        pass


class _Sampler:
    """What both samplers share: the guard of the timed calls, the samples, the stop rule's clock
    (seconds spent sampling, over every burst) and a timed call judged wrong."""

    def __init__(self, settings: Settings, guard):
        self.settings, self.guard = settings, guard
        self.checks = guard or _Unguarded()
        self.samples: list[float] = []
        self.sampling_s = 0.0
        self.stop_reason: str | None = None
        self.wrong = ""

    def _checked(self, result: dict) -> dict:
        """The result with the timed calls' checks: how many were judged, and the wrong one if any."""
        if self.wrong:
            result["wrong_call"] = self.wrong
        if self.guard is not None and hasattr(self.guard, "summary"):
            result["checked_calls"] = self.guard.summary()
        return result


class CpuSampler(_Sampler):
    """Wall-clock samples of a CPU closure, taken in bursts (:meth:`burst`) until the stop rule says
    stop; :func:`measure_cpu` takes them in one go, ``kbench run --interleave`` a burst at a time."""

    method = "cpu-wall-clock"

    def __init__(self, fn, settings: Settings, guard=None):
        super().__init__(settings, guard)
        self.fn = fn
        _warm_up(fn, lambda: None, settings)
        self.ranges = settings.ranges()

    def burst(self, seconds: float | None = None) -> str | None:
        """Sample until the stop rule says stop (returns why) or, given ``seconds``, until that much
        sampling time has passed in this burst (returns None: more to come)."""
        start = time.perf_counter()
        base = self.sampling_s
        while self.stop_reason is None:
            index = len(self.samples) % CPU_CHECK_BATCH  # the calls are judged in batches, as on a GPU
            if index == 0:
                self.checks.plan_batch(CPU_CHECK_BATCH)
            self.checks.before()
            self.ranges.push()
            t0 = time.perf_counter()
            returned = self.fn()
            self.samples.append(time.perf_counter() - t0)
            self.ranges.pop()
            self.sampling_s = base + time.perf_counter() - start
            self.stop_reason = self.settings.stop.reason_to_stop(self.samples, self.sampling_s)
            # The last call of the measurement is judged too: a run that stops inside its first
            # batch still has a timed call checked.
            wrong = self.checks.judge(returned) if self.checks.chosen(index) or self.stop_reason else ""
            self.checks.after(returned)
            if wrong:
                self.wrong, self.stop_reason = wrong, "a timed call was wrong"
                break
            if seconds is not None and self.sampling_s - base >= seconds:
                break
        return self.stop_reason

    def result(self) -> dict:
        return self._checked(_finish(self.samples, self.stop_reason or "stopped", self.method, self.settings))


def measure_cpu(fn, settings: Settings, guard=None) -> dict:
    """Wall-clock timing of a CPU closure. Not GPU performance, and labelled so."""
    sampler = CpuSampler(fn, settings, guard)
    sampler.burst()
    return sampler.result()


def uncovered_work(event_ms: float, wall_ms: float, after_return_ms: float | None = None,
                   waits_on_gpu: Callable[[], str] | None = None) -> str:
    """Why the events missed part of a call's work, or "": the synchronised wall-clock time of a
    call (``wall_ms``, device-wide synchronise) against the events' median (``event_ms``).

    A long ``wall_ms`` is the host's own time, not hidden GPU work, when both hold: the GPU finished
    within the events' time once the call had returned (``after_return_ms``: no work left running on a
    side stream), and the call does not wait on the GPU inside (``waits_on_gpu()``, "" when it does not,
    else how it was seen to: work on a side stream that the call synchronises before returning would be
    inside its host time). The reason says what was measured, so a row failed here can be looked into."""
    limit = UNCOVERED_FACTOR * event_ms + UNCOVERED_SLACK_MS
    if wall_ms <= limit:
        return ""
    waits = ""
    if after_return_ms is not None and after_return_ms <= limit:
        waits = "no device hold to tell host work from waiting" if waits_on_gpu is None else waits_on_gpu()
        if not waits:
            return ""  # host-bound: the host's own work
    seen = ""
    if after_return_ms is not None:
        seen = f"; {after_return_ms:.4g} ms of it after the call returned"
        seen += f"; the call waits on the GPU ({waits})" if waits else ""
    return (f"timing: the CUDA events saw {event_ms:.4g} ms a call, but a call with a device-wide "
            f"synchronise takes {wall_ms:.4g} ms{seen}: work outside the timed stream "
            "(a side stream the events do not cover?)")


@dataclass
class SyncedCalls:
    """Calls each followed by a device-wide synchronise: medians of the whole (``wall_ms``) and of the
    part after the call returned (``after_return_ms``: GPU work still running then)."""

    wall_ms: float
    after_return_ms: float


def synced_calls(call, sync, per_call_s: float, budget_s: float = 0.2) -> SyncedCalls:
    """Wall-clock milliseconds of 3 to 50 calls, each followed by a device-wide synchronise."""
    calls = int(min(50, max(3, budget_s / max(per_call_s, 1e-7))))
    walls, afters = [], []
    for _ in range(calls):
        t0 = time.perf_counter()
        call()
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        walls.append(t2 - t0)
        afters.append(t2 - t1)
    return SyncedCalls(_median(walls) * 1e3, _median(afters) * 1e3)


def waits_on_gpu(call, cuda, enqueue_s: float, tries: int = HOLD_TRIES) -> str:
    """Whether a call blocks on the GPU before returning: "" when it does not, else how that was seen.
    With every SM held by spinning programs for far longer than the call's host time (``hold_device``),
    a call that waits for any GPU work, its own stream's or a side stream's it synchronises, returns only
    after the hold. It counts as waiting, too, wherever this cannot be told: the seam has no device
    hold, or in each of ``tries`` holds a kernel queued on another stream ran during it (the GPU was
    not full: one such hold may be a fluke of scheduling, every one means the hold does not work here)."""
    hold_device = getattr(cuda, "hold_device", None)
    if hold_device is None:
        return "no device hold to tell host work from waiting"
    held_s = min(HOLD_MAX_S, max(1e-3, 10 * enqueue_s))
    for _ in range(tries):
        cuda.synchronize()
        still_held = hold_device(held_s)
        t0 = time.perf_counter()
        call()
        host_s = time.perf_counter() - t0
        held_throughout = still_held()  # checked before the synchronise: is the other stream's probe still waiting?
        cuda.synchronize()
        if host_s > enqueue_s + 0.5 * held_s:
            return (f"with every SM held for {held_s * 1e3:.3g} ms it returned after {host_s * 1e3:.3g} ms, "
                    f"against {enqueue_s * 1e3:.3g} ms to queue a call")
        if held_throughout:
            return ""
    note = getattr(cuda, "hold_note", "")
    return (f"a kernel on another stream ran while every SM was held for {held_s * 1e3:.3g} ms, in each of "
            f"{tries} holds" + (f": {note}" if note else ""))


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


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

    def l2_bytes(self) -> int:
        """The current device's L2 cache size."""
        torch = self.torch
        return torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size

    def l2_flush(self):
        """A closure that evicts the L2 before each sample: one sum over a buffer twice the L2's size
        (at least 1 MiB), zeroed once. Reading it, not writing it: a flush that writes (zeroing the
        buffer, as cudaMemset or Tensor.zero_ would) leaves the L2 full of dirty lines, and their
        write-back then lands inside the next timed call, a fixed cost on every memory-bound sample
        (on an H200, 60 MiB of L2: SDPA reading a 128 MiB KV cache took 49.8 us after a zeroing flush
        and 41.6 us after this one; docs/performance.md, "The L2 flush")."""
        torch = self.torch
        buffer = torch.zeros(max(2 * self.l2_bytes(), 1 << 20) // 4, dtype=torch.float32, device="cuda")
        total = torch.empty((), dtype=torch.float32, device="cuda")
        return lambda: torch.sum(buffer, dim=0, out=total)

    def hold(self, seconds: float) -> None:
        """Queue a GPU-side sleep of about ``seconds`` (longer where the SM clock runs under
        SLEEP_CYCLES_PER_S, which only lengthens a hold: harmless)."""
        self.torch.cuda._sleep(int(seconds * SLEEP_CYCLES_PER_S))

    def hold_device(self, seconds: float):
        """Hold every SM for about ``seconds`` (kbench.sm_kernels' spin, two 1,024-thread programs an SM,
        on the current stream), with a probe kernel queued on a stream of its own behind nothing.
        Returns a function that says whether the probe is still waiting: the hold keeps other streams off.

        Two programs fit on an SM, taking its 2,048 thread slots, only at 32 registers a thread or
        fewer: ``hold_note`` says where the spin was built with more (then other kernels find room
        beside the hold, and every call counts as waiting)."""
        from kbench.sm_kernels import kernels

        torch = self.torch
        sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
        module = kernels()
        if getattr(self, "_probe_stream", None) is None:
            # Once, before the first hold: the probe's stream, and a first launch of the spin and the probe
            # each, synchronised. A kernel's first launch in a process loads it onto the GPU (CUDA's lazy
            # loading), and the probe could start while the spin's programs are still being loaded.
            self._probe_stream = torch.cuda.Stream()
            module.spin(2 * sms, 0, torch.cuda.current_stream().cuda_stream)
            with torch.cuda.stream(self._probe_stream):
                torch.cuda._sleep(1)
            torch.cuda.synchronize()
            registers = module.registers(module.spin_fn)
            self.hold_note = ("" if registers <= SPIN_MAX_REGISTERS else
                              f"the hold's programs use {registers} registers a thread, over the "
                              f"{SPIN_MAX_REGISTERS} at which two fill an SM")
        module.spin(2 * sms, int(seconds * 1e9), torch.cuda.current_stream().cuda_stream)
        probe = torch.cuda.Event()
        with torch.cuda.stream(self._probe_stream):
            torch.cuda._sleep(1)
            probe.record(self._probe_stream)
        return lambda: not probe.query()

    def sample_clocks(self, capacity: int):
        """Per-sample SM clock stamps (kbench.clocks.SampleClocks), or None where the driver cannot load their kernel."""
        from kbench.clocks import SampleClocks

        return SampleClocks.create(capacity)

    def capture(self, fn):
        """Capture one call of ``fn`` into a CUDA graph; returns a callable that replays it and returns
        what the captured call returned (a tensor in the graph's memory, or None)."""
        graph, returned = _capture(fn)

        def replay():
            graph.replay()
            return returned

        return replay


class CudaSampler(_Sampler):
    """CUDA-event samples of a closure, taken in bursts like :class:`CpuSampler`'s.

    Per sample, outside the timed region: the guard poisons the output, the L2 flush runs, the
    stream is held (where the seam can: ``hold``) while the host queues the rest, and, where the
    driver loads its kernel, a stamp of SM 0's cycle counter and the global timer is written just before the
    start event and just after the end event (:class:`kbench.clocks.SampleClocks`), which gives each
    sample's own mean SM clock. Inside: the start event, the call, the end event.
    """

    def __init__(self, fn, settings: Settings, device_uuid: str | None = None, cuda=None, guard=None):
        super().__init__(settings, guard)
        self.cuda = cuda or TorchCuda()
        self.call = fn
        self.method = "cuda-events"
        if settings.cuda_graph:
            self.call = self.cuda.capture(fn)
            self.method = "cuda-graph-replay"
        self.per_call = _warm_up(self.call, self.cuda.synchronize, settings)
        self.hold = getattr(self.cuda, "hold", None)
        self.enqueue_s = host_enqueue_s(self.call, self.cuda.synchronize)
        # A call that waits on the GPU inside cannot be queued ahead behind a hold: it would wait for the
        # hold itself. It is timed from an idle GPU instead (a device-wide synchronise before each start
        # event), so the events span everything it does, its host time and any stream it waits for.
        self.wait = ""
        if self.hold is not None and not settings.cuda_graph and hasattr(self.cuda, "hold_device"):
            self.wait = waits_on_gpu(self.call, self.cuda, self.enqueue_s)
        self.flush = None
        if settings.flush_l2:
            self.flush = self.cuda.l2_flush()
            self.method += L2_FLUSH
        self.ranges = settings.ranges()
        self.clocks = ClockMonitor(device_uuid)
        stamps = getattr(self.cuda, "sample_clocks", None)
        self.stamps = stamps(MAX_BATCH) if stamps else None
        self.sample_mhz: list[float] = []

    def burst(self, seconds: float | None = None, settle: bool = False) -> str | None:
        """Sample in batches until the stop rule says stop (returns why) or, given ``seconds``, until
        that much sampling time has passed in this burst (returns None: more to come). ``settle``: the
        worker gave its cached memory back since the last burst: one call first, outside the samples
        and guarded like them, takes back any allocation the call makes, so no sample pays for it."""
        cuda, checks, stamps = self.cuda, self.checks, self.stamps
        if settle:
            checks.before()
            checks.after(self.call())
            cuda.synchronize()
        start = time.perf_counter()
        base = self.sampling_s
        while self.stop_reason is None:
            batch = _batch_size(self.per_call, room=self.settings.stop.max_samples - len(self.samples))
            events = [(cuda.event(), cuda.event()) for _ in range(batch)]
            checks.plan_batch(batch)
            for index, (begin, end) in enumerate(events):
                checks.before()  # poison the output: untimed, like the flush after it
                self._ready_for_start()
                if stamps is not None:
                    stamps.stamp(2 * index)
                self.ranges.push()  # host-side, before the start event: the range adds no GPU time
                begin.record()
                returned = self.call()
                end.record()
                self.ranges.pop()
                if stamps is not None:
                    stamps.stamp(2 * index + 1)
                wrong = checks.judge(returned) if checks.chosen(index) else ""  # synchronises: after the end event
                checks.after(returned)
                if wrong:
                    cuda.synchronize()
                    self.samples.extend(b.elapsed_time(e) / 1e3 for b, e in events[: index + 1])
                    self.wrong, self.stop_reason = wrong, "a timed call was wrong"
                    return self.stop_reason
            cuda.synchronize()
            self.clocks.sample()
            self.samples.extend(begin.elapsed_time(end) / 1e3 for begin, end in events)
            if stamps is not None:
                self.sample_mhz.extend(stamps.mhz(batch))
            self.sampling_s = base + time.perf_counter() - start
            self.stop_reason = self.settings.stop.reason_to_stop(self.samples, self.sampling_s)
            if seconds is not None and self.sampling_s - base >= seconds:
                break
        return self.stop_reason

    def result(self) -> dict:
        if self.wrong:  # no clock or side-stream check for a row that fails anyway
            return self._checked(_finish(self.samples, self.stop_reason, self.method, self.settings))
        warnings = [w for w in (self.clocks.warning(),) if w]
        clock = self.clocks.summary(self.sample_mhz)
        if clock and clock.get("throttled"):
            warnings.append(f"{clock['throttled']} of {len(self.samples)} samples ran under "
                            f"{THROTTLE_FRACTION:.0%} of the {clock['sm_mhz_max_rated']} MHz maximum SM clock")
        result = _finish(self.samples, self.stop_reason or "stopped", self.method, self.settings, warnings)
        result["host_enqueue_ms"] = round(self.enqueue_s * 1e3, 6)
        if self.enqueue_s * 1e3 > result["stats"]["median"]:
            result["warnings"].append(
                f"host-bound: queuing a call takes {self.enqueue_s * 1e3:.3g} ms of host time, more than its "
                f"{result['stats']['median']:.3g} ms on the GPU (timed with the stream held; a loop of calls "
                "without a CUDA graph runs at the host's pace)")
        if self.wait:
            result["host_synchronous"] = self.wait
            result["warnings"].append(
                f"waits on the GPU inside a call ({self.wait}): timed from an idle GPU, its host time "
                "included, as a loop of such calls runs")
        result["clock"] = clock
        if self.sample_mhz:
            result["sample_sm_mhz"] = [round(mhz) if mhz == mhz else None for mhz in self.sample_mhz]
        synced = synced_calls(self.call, self.cuda.synchronize, self.per_call)
        result["synced_wall_ms"] = synced.wall_ms
        # A synchronous call's events span its host time: a synchronised call is no longer, and gets no
        # host-bound excuse.
        excuse = None if self.wait else lambda: waits_on_gpu(self.call, self.cuda, self.enqueue_s)
        uncovered = uncovered_work(result["stats"]["median"], synced.wall_ms,
                                   None if self.wait else synced.after_return_ms, excuse)
        if uncovered:
            result["uncovered"] = uncovered
        if self.settings.cuda_graph:
            # Not a figure: the graph the samples replayed, which the worker replays once more on new inputs
            # (correctness.recheck) and takes out before the record is written.
            result[REPLAY_CALL] = self.call
        return self._checked(result)

    def _ready_for_start(self) -> None:
        """What comes before every start event, untimed: the L2 flush, then either an idle GPU (a call that
        waits on the GPU: nothing of it before the start) or the hold (the GPU sleeps while the host queues
        the stamp and the call)."""
        if self.flush is not None:
            self.flush()
        if self.wait:
            self.cuda.synchronize()
        elif self.hold is not None:
            self.hold(hold_seconds(self.enqueue_s))

    def time_once(self, call) -> tuple[float, object]:
        """One call of ``call`` (the closure, or the graph its samples replayed) timed as a sample is, after
        :meth:`_ready_for_start`, without the range, the stamps or the guard (the caller poisons and
        judges): its seconds on the events and what it returned."""
        cuda = self.cuda
        begin, end = cuda.event(), cuda.event()
        self._ready_for_start()
        begin.record()
        returned = call()
        end.record()
        cuda.synchronize()
        return begin.elapsed_time(end) / 1e3, returned


def measure_cuda(fn, settings: Settings, device_uuid: str | None = None, cuda=None, guard=None) -> dict:
    sampler = CudaSampler(fn, settings, device_uuid, cuda, guard)
    sampler.burst()
    return with_graph_replay(sampler.result(), fn, settings, device_uuid, cuda, guard)


def launch_bound(result: dict) -> bool:
    """Whether an eager CUDA-event result is mostly launch overhead (median under LAUNCH_BOUND_MS), and
    nothing in it already fails the row (a wrong timed call, work the events missed): worth graph replay."""
    median = result["stats"]["median"]
    return (result["method"].startswith("cuda-events") and median is not None and median < LAUNCH_BOUND_MS
            and not result.get("wrong_call") and not result.get("uncovered"))


def with_graph_replay(eager: dict, fn, settings: Settings, device_uuid: str | None = None, cuda=None,
                      guard=None) -> dict:
    """The timing result a row reports: ``eager`` itself unless ``settings.auto_graph`` is on and it is
    launch-bound; then the closure is captured and timed again as graph replays (same guard, flush,
    stop rule, clock monitoring) and that result is the headline, with ``eager`` kept inside it. Where
    the capture raises or a replay is judged wrong, the eager result stays the headline and says why."""
    if not settings.auto_graph or settings.cuda_graph or not launch_bound(eager):
        return eager
    graph_settings = replace(settings, cuda_graph=True, auto_graph=False)
    try:
        replay = measure_cuda(fn, graph_settings, device_uuid, cuda, guard)
    except Exception as exc:  # noqa: BLE001 - a closure that cannot be captured keeps its eager time
        return _eager_shown(eager, _one_line(exc))
    if replay.get("wrong_call"):  # e.g. Python work each call needs, which one captured call does not replay
        return _eager_shown(eager, f"a replay's result was wrong ({replay['wrong_call']})")
    if replay.get("uncovered"):
        return _eager_shown(eager, f"replays ran work the events missed ({replay['uncovered']})")
    kept = dict(eager, warnings=[w for w in eager["warnings"] if not w.startswith(LAUNCH_BOUND_NOTE)])
    if "checked_calls" in replay and "checked_calls" in eager:  # the guard counts from the eager calls on
        replay["checked_calls"] = {key: value - eager["checked_calls"].get(key, 0)
                                   for key, value in replay["checked_calls"].items()}
    replay["eager"] = kept
    return replay


def _eager_shown(eager: dict, reason: str) -> dict:
    """The eager result as the headline of a launch-bound closure graph replay could not time."""
    warnings = [w for w in eager["warnings"] if not w.startswith(LAUNCH_BOUND_NOTE)]
    warnings.append(f"{LAUNCH_BOUND_NOTE}: graph capture failed: {reason}; eager time shown")
    return dict(eager, warnings=warnings, graph_error=reason)


def _one_line(exc: BaseException, limit: int = 200) -> str:
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
        returned = fn()
    torch.cuda.synchronize()
    return graph, returned
