"""Launch-bound cases timed as graph replays by default: a case whose eager CUDA-event median is under
LAUNCH_BOUND_MS is timed again, right after, as CUDA-graph replays, which become its headline, the eager
timing kept beside it; a closure that cannot be captured (or whose replays are wrong) keeps its eager
time and says why; --no-auto-graph turns it off. The CUDA path runs on a fake of TorchCuda's seam (as in
test_profile_nvtx.py); the records, tables, ratios and compare on records built by hand."""

from __future__ import annotations

import pytest

import kbench.timing
from kbench import compare, report, runner
from kbench.record import Record, Timing, comparable
from kbench.stopping import StopRule
from kbench.timing import LAUNCH_BOUND_MS, REPLAY_CALL, Settings, measure_cuda

EAGER_MS, REPLAY_MS = 0.010, 0.004  # a launch-bound call, and what its kernels take without the launch gaps
REPLAYED = object()  # what the fake graph's replay returns (the captured call's output)


class FakeEvent:
    def __init__(self, cuda):
        self.cuda = cuda

    def record(self):
        pass

    def elapsed_time(self, other):
        return self.cuda.elapsed_ms


class FakeCuda:
    """TorchCuda's seam: events that read ``elapsed_ms`` (the replays' time once a graph is captured)."""

    def __init__(self, eager_ms: float = EAGER_MS, replay_ms: float = REPLAY_MS, capture_error: Exception | None = None):
        self.elapsed_ms, self.replay_ms, self.capture_error = eager_ms, replay_ms, capture_error
        self.captures = 0

    def synchronize(self):
        pass

    def event(self):
        return FakeEvent(self)

    def l2_flush(self):
        return lambda: None

    def hold(self, seconds):
        pass

    def capture(self, fn):
        self.captures += 1
        if self.capture_error is not None:
            raise self.capture_error
        fn()
        self.elapsed_ms = self.replay_ms  # the eager samples are all read by now
        return lambda: REPLAYED


class Guard:
    """A stand-in for kbench.correctness.TimedCalls: judges every call; a replay is wrong if ``wrong_replay``."""

    def __init__(self, wrong_replay: bool = False):
        self.wrong_replay = wrong_replay
        self.calls = self.checked = 0

    def plan_batch(self, size):
        pass

    def before(self):
        pass

    def chosen(self, index):
        return True

    def judge(self, returned):
        self.checked += 1
        return "differs from the checked calls" if returned is REPLAYED and self.wrong_replay else ""

    def after(self, returned):
        self.calls += 1

    def summary(self):
        return {"calls": self.calls, "checked": self.checked}


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch):
    monkeypatch.setattr(kbench.timing.time, "perf_counter", lambda: 0.0)  # calls look free: the sample limit stops


def _measure(cuda: FakeCuda, guard=None, **settings) -> dict:
    rule = StopRule(target_noise=0.5, min_samples=5, min_time=0.0, max_time=100.0, max_samples=5)
    return measure_cuda(lambda: None, Settings(stop=rule, warmup_time=0.0, warmup_calls=1, **settings),
                        cuda=cuda, guard=guard)


def test_a_launch_bound_case_is_timed_again_as_graph_replays_which_become_its_median():
    cuda, guard = FakeCuda(), Guard()
    result = _measure(cuda, guard, auto_graph=True)
    assert cuda.captures == 1
    assert result["method"] == "cuda-graph-replay+l2-flush-read" and result["stats"]["median"] == REPLAY_MS
    eager = result["eager"]
    assert eager["method"] == "cuda-events+l2-flush-read" and eager["stats"]["median"] == EAGER_MS
    assert len(eager["samples"]) == len(result["samples"]) == 5
    # the launch-bound hint (use --cuda-graph) is answered: neither part carries it
    assert not any(w.startswith("launch-bound") for w in result["warnings"] + eager["warnings"])
    # the same guard checked both: each part counts its own calls
    assert eager["checked_calls"] == {"calls": 5, "checked": 5}
    assert result["checked_calls"] == {"calls": 5, "checked": 5} and guard.calls == 10
    assert "graph_error" not in result
    # the graph the replays ran, for the worker to replay once more on new inputs (not part of the record)
    assert result[REPLAY_CALL]() is REPLAYED and REPLAY_CALL not in eager


def test_a_case_above_the_threshold_stays_eager():
    cuda = FakeCuda(eager_ms=2 * LAUNCH_BOUND_MS)
    result = _measure(cuda, auto_graph=True)
    assert cuda.captures == 0
    assert result["method"] == "cuda-events+l2-flush-read" and "eager" not in result
    assert result["stats"]["median"] == 2 * LAUNCH_BOUND_MS and REPLAY_CALL not in result


def test_a_closure_that_cannot_be_captured_keeps_its_eager_time_and_says_why():
    cuda = FakeCuda(capture_error=RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore"))
    result = _measure(cuda, auto_graph=True)
    assert cuda.captures == 1
    assert result["method"] == "cuda-events+l2-flush-read" and result["stats"]["median"] == EAGER_MS
    assert "eager" not in result
    reason = "RuntimeError: CUDA error: operation not permitted when stream is capturing"
    assert result["graph_error"] == reason
    assert f"graph capture failed: {reason}; eager time shown" in result["warnings"][-1]
    assert not any("--cuda-graph times it" in w for w in result["warnings"])


def test_wrong_replays_keep_the_eager_time():
    result = _measure(FakeCuda(), Guard(wrong_replay=True), auto_graph=True)
    assert result["method"] == "cuda-events+l2-flush-read" and "eager" not in result and "wrong_call" not in result
    assert "a replay's result was wrong (differs from the checked calls)" in result["graph_error"]
    assert REPLAY_CALL not in result  # the eager time stands: no graph to recheck
    assert any("graph capture failed: a replay's result was wrong" in w for w in result["warnings"])


def test_switched_off_only_warns():
    cuda = FakeCuda()
    result = _measure(cuda, auto_graph=False)
    assert cuda.captures == 0 and "eager" not in result
    assert any(w.startswith("launch-bound (< 20 us a call): --cuda-graph") for w in result["warnings"])


def test_cuda_graph_times_graph_replays_only():
    cuda = FakeCuda()
    result = _measure(cuda, cuda_graph=True, auto_graph=True)
    assert cuda.captures == 1 and result["method"].startswith("cuda-graph-replay") and "eager" not in result
    assert result[REPLAY_CALL]() is REPLAYED


def test_a_cpu_timing_is_left_as_it_is():
    cpu = {"method": "cpu-wall-clock", "stats": {"median": 0.001}, "warnings": []}
    assert kbench.timing.with_graph_replay(cpu, lambda: None, Settings(auto_graph=True)) is cpu


# --- the switch: kbench run's option, the request, the job, the worker --------------------------

def test_auto_graph_is_on_by_default_and_no_auto_graph_turns_it_off(registry):
    from kbench.cli import run_cmd

    suite = registry.suite("attention")
    on = run_cmd.prepare_args(suite, ["--impl", "naive", "--device", "cpu"], load=lambda kernels: registry)
    off = run_cmd.prepare_args(suite, ["--impl", "naive", "--device", "cpu", "--no-auto-graph"],
                               load=lambda kernels: registry)
    assert on.request.auto_graph is True and off.request.auto_graph is False
    jobs = runner._VariantWorker(on.request.variants[0].impl, off.request, "cpu", starter=None)
    assert jobs._job(on.request.variants[0], on.cases[0])["auto_graph"] is False


def test_run_help_shows_the_switch_and_its_default(cli, flat_text):
    text = flat_text(cli("run", "attention", "--help", env={"COLUMNS": "250"}).stdout)
    assert "--auto-graph --no-auto-graph" in text and "[default: auto-graph]" in text
    assert "under 20 us" in text


def _naive_cpu_job(auto_graph: bool) -> dict:
    """A worker's job: the naive attention on a tiny fp32 case, three samples."""
    return {"suite": "attention", "impl": "naive", "label": "naive", "params": {},
            "case": {"n": 8, "d": 8, "batch": 1, "heads": 1, "dtype": "fp32", "causal": False},
            "seed": 0, "trials": 1, "flush_l2": True, "cuda_graph": False, "auto_graph": auto_graph,
            "stop": {"min_samples": 3, "max_samples": 3, "min_time": 0.0, "max_time": 100.0}}


def test_the_worker_takes_no_graph_on_a_cpu(registry):
    """On CPU tensors the wall clock times the closure: the automatic graph path does nothing there."""
    from kbench.worker import Measurement, execute

    job = _naive_cpu_job(auto_graph=True)
    measurement = Measurement(registry, job, "cpu", {})
    assert measurement.prepare() is None and measurement.settings.auto_graph is False
    record = execute(registry, job, "cpu", {})
    assert record["status"] == "OK", record
    assert record["timing"]["method"] == "cpu-wall-clock" and "eager" not in record["timing"]


@pytest.mark.parametrize("graph_right", [True, False])
def test_the_worker_replays_the_timed_graph_on_new_inputs_and_records_no_callable(registry, monkeypatch, graph_right):
    """The graph a row's replays ran (timing's REPLAY_CALL) goes to the check on new inputs, not into the
    record: a graph that computes from its inputs passes, one that writes what it was captured with fails.
    (On a CPU no graph is timed: the sampler's result is given one here.)"""
    import json

    from kbench.worker import Measurement

    job = _naive_cpu_job(auto_graph=False)
    measurement = Measurement(registry, job, "cpu", {})
    assert measurement.prepare() is None
    measurement.burst(None)
    fn, out = measurement.verdict.last[0], measurement.verdict.last[2]
    fn()
    captured = out.clone()  # the answer on the timed inputs, as a graph that does not read them would keep
    replay = fn if graph_right else (lambda: out.copy_(captured))
    eager = measurement.sampler.result()
    monkeypatch.setattr(measurement, "_result", lambda: dict(eager, **{REPLAY_CALL: replay}))
    record = measurement.finish()
    assert REPLAY_CALL not in record["timing"]
    json.dumps(record["timing"])  # nothing in it that a record file cannot hold
    if graph_right:
        assert record["status"] == "OK", record.get("reason")
    else:
        assert record["status"] == "FAIL"
        assert "the CUDA graph it was timed as, replayed: " in record["reason"], record["reason"]


# --- records: the eager timing kept, old records without it ---------------------------------------

def _timing(method: str, median: float, n: int = 20) -> dict:
    samples = [median] * n
    return {"method": method, "unit": "ms", "samples": samples, "warnings": [],
            "stats": {"n": n, "median": median, "p20": median, "p80": median}}


def _record(impl: str, median: float, eager: float | None = None, baseline: str = "naive") -> Record:
    timing = _timing("cuda-events+l2-flush-read", median)
    if eager is not None:  # graph-timed: the replays are the headline, the events beside them
        timing = {**_timing("cuda-graph-replay+l2-flush-read", median), "eager": _timing("cuda-events+l2-flush-read", eager)}
    return Record.from_json({"schema": 1, "suite": "attention", "impl": impl, "label": impl, "case": {"n": 256},
                             "case_key": "n=256", "status": "OK", "baseline": baseline,
                             "env": {"device": "cuda", "gpu": {"name": "NVIDIA H200"}}, "timing": timing})


def test_a_graph_timed_record_keeps_its_eager_timing_and_an_old_one_loads_without():
    new, old = _record("sdpa", 0.004, eager=0.010), _record("naive", 0.010)
    assert isinstance(new.timing.eager, Timing) and new.timing.eager.stats.median == 0.010
    assert new.median == 0.004
    assert Record.from_json(new.to_json()).to_json() == new.to_json()
    assert old.timing.eager is None and "eager" not in old.to_json()["timing"]


def test_old_and_new_records_load_show_and_frame(tmp_path, cli, wide_console, flat_text):
    import kbench
    from kbench import results

    path = tmp_path / "run.jsonl"
    path.write_text(results.dumps(_record("naive", 0.030).to_json()) + "\n"
                    + results.dumps(_record("sdpa", 0.004, eager=0.010).to_json()) + "\n")
    frame = kbench.load(path).to_pandas()
    assert list(frame["eager_median_ms"].isna()) == [True, False]
    assert frame["eager_median_ms"].iloc[1] == 0.010 and frame["median_ms"].iloc[1] == 0.004
    shown = cli("show", path)
    assert shown.exit_code == 0, shown.output
    text = flat_text(shown.output)
    assert "median: graph replay for sdpa (launch-bound under 20 us eager); eager: CUDA events, launches" in text
    assert "10.0 us" in text  # the eager time, beside the 4.0 us median
    csv_rows = report.to_csv(list(kbench.load(path))).splitlines()
    assert csv_rows[0].endswith(",eager_median_ms") and csv_rows[2].endswith(",0.01")


def test_the_table_shows_the_eager_time_beside_the_median_and_says_which_rows_are_graph_timed():
    naive, sdpa = _record("naive", 0.030), _record("sdpa", 0.004, eager=0.010)
    runner._set_speedup(naive, naive.timing, naive.timing)
    runner._set_speedup(sdpa, naive.timing, sdpa.timing)
    case = report.case_rows([naive, sdpa])
    assert case.headers[:4] == ["implementation", "status", "median", "eager"]
    assert [row[2:4] for row in case.rows] == [["30.0 us", "-"], ["4.0 us", "10.0 us"]]
    assert case.footnotes == [
        "median: graph replay for sdpa (launch-bound under 20 us eager); eager: CUDA events, launches from Python",
        "median: CUDA events for naive (20 us or more: not launch-bound)",
        "vs naive: eager time against eager time for sdpa (one of the two was graph-timed, the other not)",
    ]
    plain = report.case_rows([_record("naive", 0.030), _record("sdpa", 0.025)])
    assert "eager" not in plain.headers and plain.footnotes == []


def test_a_capture_failure_is_the_rows_footnote():
    record = _record("allreduce", 0.010)
    record.timing.warnings.append("launch-bound (< 20 us a call): graph capture failed: Unsupported: no; "
                                  "eager time shown")
    record.timing.graph_error = "Unsupported: no"
    case = report.case_rows([record])
    assert case.footnotes == ["allreduce: launch-bound (< 20 us a call): graph capture failed: Unsupported: no; "
                              "eager time shown"]


# --- ratios like with like -------------------------------------------------------------------------

def test_ratios_take_graph_against_graph_and_else_eager_against_eager():
    naive, graphed, other = _record("naive", 0.030), _record("sdpa", 0.004, eager=0.010), _record("x", 0.002, 0.008)
    assert comparable(graphed.timing, other.timing) == (graphed.timing, other.timing, "")  # both graph replays
    assert comparable(naive.timing, graphed.timing) == (naive.timing, graphed.timing.eager, "eager")
    runner._set_speedup(graphed, naive.timing, graphed.timing)
    assert graphed.speedup == pytest.approx(3.0) and graphed.speedup_basis == "eager"
    runner._set_speedup(other, graphed.timing, other.timing)
    assert other.speedup == pytest.approx(2.0) and other.speedup_basis is None
    assert "speedup_basis" not in other.to_json()


def test_bench_peer_ratios_are_like_with_like():
    from kbench import peers

    rows = peers.peer_ratios([_record("naive", 0.030), _record("sdpa", 0.004, eager=0.010)])
    assert [(r.label, r.median, r.ratio, r.basis) for r in rows] == [("sdpa", 0.004, pytest.approx(3.0), "eager")]


def test_compare_takes_eager_times_against_a_baseline_from_before_graph_timing():
    from kbench.compare import Located

    base, current = _record("sdpa", 0.010), _record("sdpa", 0.004, eager=0.010)
    assert compare.env_differences(base, current) == []  # eager against eager: the same method
    pairs = compare.judge([compare.Pair(base.key, Located(base, "a:1"), Located(current, "b:1"))],
                          lambda suite: 0.05, 0.01)
    pair = pairs[0]
    assert pair.basis == "eager" and pair.ratio == pytest.approx(1.0) and pair.decision == "same"
    assert pair.median("current") == 0.010 and "eager times compared" in pair.note
    both = compare.judge([compare.Pair(current.key, Located(current, "a:1"), Located(current, "b:1"))],
                         lambda suite: 0.05, 0.01)[0]
    assert both.basis == "" and both.median("current") == 0.004


def test_a_settling_burst_calls_once_outside_the_samples_guarded_like_them():
    """After the worker gave its cached memory back, a burst first calls the closure once untimed (so no
    sample pays for an allocation the call makes), with the output poisoned and the returned tensor
    spoiled as for a timed call."""
    calls = []
    rule = StopRule(target_noise=0.5, min_samples=5, min_time=0.0, max_time=100.0, max_samples=5)
    guard = Guard()
    sampler = kbench.timing.CudaSampler(lambda: calls.append(1), Settings(stop=rule, warmup_time=0.0, warmup_calls=1),
                                        cuda=FakeCuda(), guard=guard)
    before = len(calls)
    sampler.burst(settle=True)
    assert len(sampler.samples) == 5 and len(calls) - before == 6
    assert guard.calls == 6 and guard.checked == 5  # the settling call went through before/after, unjudged
