"""NVTX ranges wrap exactly the timed calls: a fake `nvtx` module records pushes, pops and calls.

The CUDA path runs on a fake of the few torch.cuda calls measure_cuda makes (TorchCuda's seam),
which records the order of flushes, events, range pushes and calls, and, with a logging guard, where
the timed calls' output is poisoned and judged.
"""

from __future__ import annotations

import sys
import types

import pytest

import kbench.nvtx
import kbench.timing
from kbench.stopping import StopRule
from kbench.timing import Settings, measure_cpu, measure_cuda

NAME = "kbench/attention/naive/n=8,d=8,batch=1,heads=1,dtype=fp32,causal=False"


class Trace:
    """One ordered log of everything: range pushes and pops, calls (with the range depth), events, flushes."""

    def __init__(self):
        self.items: list[tuple] = []
        self.depth = 0

    def push(self, message=None, **kwargs):
        self.items.append(("push", message))
        self.depth += 1

    def pop(self, **kwargs):
        self.items.append(("pop",))
        self.depth -= 1

    def kinds(self):
        return [item[0] for item in self.items]


@pytest.fixture
def trace(monkeypatch):
    """A fake `nvtx` package in sys.modules, so kbench.nvtx picks it first."""
    log = Trace()
    fake = types.ModuleType("nvtx")
    fake.push_range = log.push
    fake.pop_range = log.pop
    fake.enabled = lambda: True
    monkeypatch.setitem(sys.modules, "nvtx", fake)
    kbench.nvtx.reset()
    yield log
    kbench.nvtx.reset()


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        self.now += 1 / 64
        return self.now


def counting(trace: Trace, phase: dict):
    def fn():
        trace.items.append(("call", phase["name"], trace.depth))

    return fn


def test_backend_prefers_the_nvtx_package(trace):
    assert kbench.nvtx.backend_name() == "nvtx"


def test_no_backend_is_a_no_op(monkeypatch):
    monkeypatch.setitem(sys.modules, "nvtx", None)  # `import nvtx` raises ImportError
    kbench.nvtx.reset()
    try:
        import torch

        if hasattr(torch._C, "_nvtx"):
            pytest.skip("a CUDA build of torch provides torch.cuda.nvtx")
        ranges = kbench.nvtx.Ranges(NAME)
        assert not ranges.active and kbench.nvtx.backend_name() is None
        ranges.push()
        ranges.pop()
    finally:
        kbench.nvtx.reset()


def test_range_name():
    assert kbench.nvtx.range_name("matmul", "triton[block_m=64]", "m=1,n=2") == "kbench/matmul/triton[block_m=64]/m=1,n=2"


def test_cpu_ranges_wrap_exactly_the_timed_calls(trace, monkeypatch):
    monkeypatch.setattr(kbench.timing.time, "perf_counter", Clock())
    phase = {"name": "timed"}
    fn = counting(trace, phase)
    rule = StopRule(target_noise=0.5, min_samples=7, min_time=0.0, max_time=100.0, max_samples=7)
    result = measure_cpu(fn, Settings(stop=rule, warmup_time=0.0, warmup_calls=4, nvtx_range=NAME))
    calls = [item for item in trace.items if item[0] == "call"]
    assert len(calls) == 4 + 7
    assert all(depth == 0 for _, _, depth in calls[:4])  # warm-up: outside any range
    assert all(depth == 1 for _, _, depth in calls[4:])  # every timed call: inside one
    assert trace.kinds().count("push") == trace.kinds().count("pop") == result["stats"]["n"] == 7
    assert {item[1] for item in trace.items if item[0] == "push"} == {NAME}
    assert trace.kinds()[4:] == ["push", "call", "pop"] * 7


def test_no_range_name_no_ranges(trace, monkeypatch):
    monkeypatch.setattr(kbench.timing.time, "perf_counter", Clock())
    rule = StopRule(target_noise=0.5, min_samples=3, min_time=0.0, max_time=100.0, max_samples=3)
    measure_cpu(counting(trace, {"name": "t"}), Settings(stop=rule, warmup_time=0.0, warmup_calls=1))
    assert "push" not in trace.kinds()


class FakeEvent:
    def __init__(self, trace):
        self.trace = trace

    def record(self):
        self.trace.items.append(("record", self.trace.depth))

    def elapsed_time(self, other):
        return 1.0  # ms


class FakeCuda:
    """measure_cuda's torch.cuda seam (kbench.timing.TorchCuda), logging to the trace."""

    def __init__(self, trace):
        self.trace = trace
        self.captures = 0
        self.holds: list[float] = []

    def hold(self, seconds):
        self.holds.append(seconds)
        self.trace.items.append(("hold", self.trace.depth))

    def synchronize(self):
        self.trace.items.append(("sync", self.trace.depth))

    def event(self):
        return FakeEvent(self.trace)

    def l2_flush(self):
        return lambda: self.trace.items.append(("flush", self.trace.depth))

    def capture(self, fn):
        self.captures += 1
        fn()  # the captured call, outside any range

        def replay():
            self.trace.items.append(("call", "replay", self.trace.depth))

        return replay


@pytest.mark.parametrize("graph", [False, True])
def test_cuda_ranges_wrap_exactly_the_timed_calls(trace, monkeypatch, graph):
    monkeypatch.setattr(kbench.timing.time, "perf_counter", Clock())
    fake = FakeCuda(trace)
    rule = StopRule(target_noise=0.5, min_samples=5, min_time=0.0, max_time=100.0, max_samples=5)
    result = measure_cuda(counting(trace, {"name": "fn"}), Settings(stop=rule, warmup_time=0.0, warmup_calls=3,
                                                                    cuda_graph=graph, nvtx_range=NAME), cuda=fake)
    assert result["stats"]["n"] == 5
    kinds = trace.kinds()
    first, last = kinds.index("push"), len(kinds) - 1 - kinds[::-1].index("pop")
    sampling = [kind for kind in kinds[first - 2:last + 1] if kind != "sync"]  # a sync ends each batch
    # per sample: flush and hold (outside), push, start event, the call, end event, pop
    assert sampling == ["flush", "hold", "push", "record", "call", "record", "pop"] * 5
    assert [item[1] for item in trace.items if item[0] == "record"] == [1] * 10  # events recorded inside
    calls = [item for item in trace.items if item[0] == "call"]
    assert sum(1 for c in calls if c[2] == 1) == 5  # the timed calls, and only they, in a range
    before, after = trace.items[:first - 1], trace.items[last + 1:]
    assert any(item[0] == "call" for item in before)  # warm-up (and the graph capture) ran outside
    assert any(item[0] == "call" for item in after)  # the side-stream check's synchronised calls too
    assert all(item[0] != "push" for item in before + after)
    assert fake.captures == (1 if graph else 0)
    if graph:
        assert {c[1] for c in calls if c[2] == 1} == {"replay"}
        assert result["method"].startswith("cuda-graph-replay")


def test_the_hold_outlasts_the_hosts_time_to_queue_a_call(trace, monkeypatch):
    """Each sample's hold (a GPU-side sleep queued before the start event) lasts longer than the host
    takes to queue a call, so the events time the GPU's work rather than the host's pace; a call whose
    host side is slower than its GPU time is reported as host-bound."""
    clock = Clock()
    monkeypatch.setattr(kbench.timing.time, "perf_counter", clock)

    def slow_to_queue():  # 40 ticks of the fake clock (0.625 s) on the host for each call
        clock.now += 40 / 64
        trace.items.append(("call", "fn", trace.depth))

    fake = FakeCuda(trace)
    rule = StopRule(target_noise=0.5, min_samples=3, min_time=0.0, max_time=1e9, max_samples=3)
    result = measure_cuda(slow_to_queue, Settings(stop=rule, warmup_time=0.0, warmup_calls=1,
                                                  nvtx_range=NAME), cuda=fake)
    assert len(fake.holds) == 3
    queue_s = result["host_enqueue_ms"] / 1e3
    assert queue_s >= 40 / 64
    assert all(hold == min(kbench.timing.HOLD_MAX_S, 2 * queue_s + kbench.timing.HOLD_SLACK_S)
               for hold in fake.holds)
    assert any(w.startswith("host-bound: queuing a call takes") for w in result["warnings"])  # 1 ms events


def test_a_quick_host_side_is_not_host_bound(trace, monkeypatch):
    monkeypatch.setattr(kbench.timing.time, "perf_counter", lambda: 0.0)
    fake = FakeCuda(trace)
    rule = StopRule(target_noise=0.5, min_samples=3, min_time=0.0, max_time=100.0, max_samples=3)
    result = measure_cuda(counting(trace, {"name": "fn"}), Settings(stop=rule, warmup_time=0.0, warmup_calls=1),
                          cuda=fake)
    assert result["host_enqueue_ms"] == 0.0
    assert fake.holds == [kbench.timing.HOLD_SLACK_S] * 3
    assert not any(w.startswith("host-bound") for w in result["warnings"])


def test_a_call_timed_once_is_flushed_and_held_as_a_sample_is_outside_any_range(trace, monkeypatch):
    """The calls on new inputs after timing (correctness.recheck's timer) are timed as the samples were:
    the flush and the hold before the start event, the call between the events, then a synchronise; no
    range (a profiler filtering on it sees only the samples)."""
    monkeypatch.setattr(kbench.timing.time, "perf_counter", lambda: 0.0)
    rule = StopRule(target_noise=0.5, min_samples=3, min_time=0.0, max_time=100.0, max_samples=3)
    sampler = kbench.timing.CudaSampler(counting(trace, {"name": "fn"}), Settings(stop=rule, warmup_time=0.0,
                                        warmup_calls=1, nvtx_range=NAME), cuda=FakeCuda(trace))
    trace.items.clear()
    seconds, returned = sampler.time_once(counting(trace, {"name": "new inputs"}))
    assert seconds == pytest.approx(1e-3) and returned is None  # the fake events' 1 ms
    assert trace.items == [("flush", 0), ("hold", 0), ("record", 0), ("call", "new inputs", 0), ("record", 0),
                           ("sync", 0)]


def test_cuda_batches_stop_at_max_samples(trace, monkeypatch):
    """A fast call asks for 200-sample batches; the loop must still stop at exactly max_samples (--calls)."""
    monkeypatch.setattr(kbench.timing.time, "perf_counter", lambda: 0.0)  # calls look free: big batches
    rule = StopRule(target_noise=0.5, min_samples=3, min_time=0.0, max_time=100.0, max_samples=3)
    result = measure_cuda(counting(trace, {"name": "fn"}), Settings(stop=rule, warmup_time=0.0, warmup_calls=1,
                                                                    flush_l2=False, nvtx_range=NAME),
                          cuda=FakeCuda(trace))
    assert result["stats"]["n"] == 3 and trace.kinds().count("push") == 3


def test_worker_names_the_range_and_leaves_correctness_outside(trace, registry):
    """execute() on the CPU: the range is kbench/<suite>/<label>/<case key>; the correctness trials and the
    recheck (which call the closure too) run outside it, so pushes == timed samples."""
    from kbench.worker import execute

    job = {"suite": "attention", "impl": "naive", "label": "naive", "params": {},
           "case": {"n": 8, "d": 8, "batch": 1, "heads": 1, "dtype": "fp32", "causal": False},
           "seed": 0, "trials": 2, "flush_l2": True, "cuda_graph": False,
           "stop": {"min_samples": 4, "max_samples": 4, "min_time": 0.0, "max_time": 100.0}}
    record = execute(registry, job, "cpu", {})
    assert record["status"] == "OK", record
    pushes = [item[1] for item in trace.items if item[0] == "push"]
    assert pushes == [NAME] * record["timing"]["stats"]["n"] == [NAME] * 4
    assert record["nvtx"] == "nvtx"


class LoggingGuard:
    """A stand-in for kbench.correctness.TimedCalls that logs its poisoning and judging to the trace;
    it judges the last call of each batch and the second one, and finds call ``wrong_at`` wrong."""

    def __init__(self, trace: Trace, wrong_at: int | None = None):
        self.trace, self.wrong_at = trace, wrong_at
        self.batch: set[int] = set()
        self.calls = 0
        self.judged: list[int] = []

    def plan_batch(self, size: int) -> None:
        self.batch = {size - 1, min(1, size - 1)}

    def before(self) -> None:
        self.trace.items.append(("poison", self.trace.depth))

    def chosen(self, index_in_batch: int) -> bool:
        return index_in_batch in self.batch

    def judge(self, returned) -> str:
        self.trace.items.append(("judge", self.trace.depth))
        self.judged.append(self.calls + 1)
        return "wrong" if self.calls + 1 == self.wrong_at else ""

    def after(self, returned) -> None:
        self.calls += 1

    def summary(self) -> dict:
        return {"calls": self.calls, "checked": len(self.judged)}


def test_cuda_timed_calls_are_poisoned_and_judged_outside_the_timed_region(trace, monkeypatch):
    """Per sample: the output poisoned before the flush and the start event, the call judged after the end
    event (and after the range's pop): neither is in the measured time nor in the profiler's range."""
    monkeypatch.setattr(kbench.timing.time, "perf_counter", Clock())  # slow calls: batches of one
    guard = LoggingGuard(trace)
    rule = StopRule(target_noise=0.5, min_samples=5, min_time=0.0, max_time=100.0, max_samples=5)
    result = measure_cuda(counting(trace, {"name": "fn"}), Settings(stop=rule, warmup_time=0.0, warmup_calls=3,
                                                                    nvtx_range=NAME),
                          cuda=FakeCuda(trace), guard=guard)
    assert result["stats"]["n"] == 5 and "wrong_call" not in result
    kinds = trace.kinds()
    first, last = kinds.index("poison"), len(kinds) - 1 - kinds[::-1].index("judge")
    sampling = [kind for kind in kinds[first:last + 1] if kind != "sync"]
    assert sampling == ["poison", "flush", "hold", "push", "record", "call", "record", "pop", "judge"] * 5
    assert {item[1] for item in trace.items if item[0] in ("poison", "judge")} == {0}  # outside the range
    assert "poison" not in kinds[:first] and all(item[0] != "judge" for item in trace.items[:first])
    assert result["checked_calls"] == {"calls": 5, "checked": 5}


def test_cuda_wrong_timed_call_ends_the_measurement(trace, monkeypatch):
    monkeypatch.setattr(kbench.timing.time, "perf_counter", lambda: 0.0)  # fast calls: one batch of ten
    guard = LoggingGuard(trace, wrong_at=2)
    rule = StopRule(target_noise=0.5, min_samples=10, min_time=0.0, max_time=100.0, max_samples=10)
    result = measure_cuda(counting(trace, {"name": "fn"}), Settings(stop=rule, warmup_time=0.0, warmup_calls=1,
                                                                    flush_l2=False, nvtx_range=NAME),
                          cuda=FakeCuda(trace), guard=guard)
    assert result["wrong_call"] == "wrong" and result["stop_reason"] == "a timed call was wrong"
    assert result["stats"]["n"] == 2  # the samples up to the wrong call, none after
    assert guard.judged == [2] and result["checked_calls"] == {"calls": 2, "checked": 1}
    assert "synced_wall_ms" not in result  # its time is not the checked kernel's: nothing more is measured
