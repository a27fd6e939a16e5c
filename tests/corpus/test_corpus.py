"""The corpus of wrong kernels (tests/corpus/kernels/): each must be reported FAIL, CRASH or TIMEOUT with the
right reason, never as a fast success. Plus the speed-of-light and side-stream checks, fed with
synthetic timings (a CPU has no roofline and no streams)."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import pytest

from kbench import metrics, results, runner, timing, worker
from kbench.devices import peaks_for
from kbench.isolation import WorkerProcess
from kbench.registry import Variant
from kbench.suite import Case

CORPUS = Path(__file__).resolve().parent / "kernels"
FOUND_LOG = Path(tempfile.gettempdir()) / f"kbench-corpus-found-{os.getpid()}.log"
CASE = {"n": 32, "d": 16, "batch": 1, "heads": 2, "dtype": "fp16", "causal": False}
SHAPE = "(1, 2, 32, 16)"
NUMEL = 1 * 2 * 32 * 16

# name -> (status, fragments the reason must contain). The suite's five input distributions make
# five trials whatever --trials asks for (1 or 3 here).
BOUND = "is over what a correct fp16 kernel makes (2 x the plain fp16 computation's"
TIMED = "(checked at random, outside the timed region) differs from the checked calls:"
EXPECTED = {
    "cheat-unwritten": ("FAIL", ["trial 1 (seed 0, normal inputs)", f"{NUMEL} of {NUMEL} outputs are NaN/Inf (unwritten"]),
    "cheat-nan": ("FAIL", [f"{2 * 16} of {NUMEL} outputs are NaN/Inf"]),
    "cheat-wrong-shape": ("FAIL", [f"wrong shape (1, 2, 31, 16), expected {SHAPE}"]),
    "cheat-wrong-dtype": ("FAIL", ["wrong dtype torch.float32, expected torch.float16"]),
    "cheat-mutates-inputs": ("FAIL", ["modified its input(s) q, k, v", BOUND]),
    # The second trial's new inputs get the first one's answer.
    "cheat-cached-result": ("FAIL", ["trial 2 (seed 1, large-scores inputs)", BOUND]),
    # Right on each trial's first call; its timed calls return the first answer, which the poisoning
    # before every timed call turns into NaN.
    "cheat-replays-first-call": ("FAIL", ["timed call", TIMED, "outputs are NaN/Inf"]),
    "cheat-returns-reference": ("FAIL", ["trial 1 (seed 0, normal inputs)", "(a tensor of the harness, not its own result)"]),
    # Do less when timed: caught by the checks of the timed calls themselves.
    "cheat-skips-timed-calls": ("FAIL", ["timed call", TIMED, f"{NUMEL} of {NUMEL} outputs are NaN/Inf"]),
    "cheat-half-work-timed": ("FAIL", ["timed call", TIMED]),
    # Numerics: right on N(0, 1) inputs only.
    "cheat-unstable-softmax": ("FAIL", ["trial 2 (seed 1, large-scores inputs)", "outputs are NaN/Inf"]),
    # Precision: within any fixed tolerance loose enough for bf16, several times a correct fp16 kernel's error.
    "cheat-bf16-for-fp16": ("FAIL", ["trial 1 (seed 0, normal inputs)", BOUND]),
}
MATMUL_FP32 = {"m": 64, "n": 64, "k": 256, "dtype": "fp32", "tf32": False}
# Cheats that are right whatever they find, and so pass: they show instead whether kbench left an answer
# within their reach (they write a line to $KBENCH_CORPUS_FOUND each time they find one).
FINDERS = ["cheat-copies-reference"]


@pytest.fixture(scope="module")
def corpus_worker():
    """One real worker process (python -m kbench.worker) with the corpus loaded, as --kernels loads it."""
    w = WorkerProcess([CORPUS], device="cpu")
    yield w
    w.close()


def _job(impl: str, trials: int, suite: str = "attention", case: dict = CASE) -> dict:
    return {"suite": suite, "impl": impl, "params": {}, "case": case, "seed": 0, "trials": trials,
            "stop": {"max_time": 0.05, "min_time": 0.0}, "flush_l2": True, "cuda_graph": False}


def test_corpus_folder_has_every_cpu_cheat(registry):
    from kbench import loader

    loaded = loader.load([CORPUS])
    names = {name for name in loaded.implementations("attention") if name.startswith("cheat-")}
    assert names == set(EXPECTED) | set(FINDERS) | {"cheat-segfault", "cheat-hangs"}
    assert not [path for path in loaded.load_errors if "corpus" in path]


@pytest.mark.parametrize("trials", [3, 1])
@pytest.mark.parametrize("name", list(EXPECTED))
def test_cheat_is_caught_with_its_reason(corpus_worker, name, trials):
    """Each cheat is a job sent to a real worker, as `kbench run` sends it. (cheat-cached-result's
    module-level cache lives as long as the worker; its expectations hold in either order.)"""
    status, fragments = EXPECTED[name]
    record = corpus_worker.run(_job(name, trials), timeout=120)
    assert record["status"] == status, record
    for fragment in fragments:
        assert fragment in record["reason"], record["reason"]
    assert record["correctness"]["ok"] is False
    assert record["correctness"]["reason"] == record["reason"]


@pytest.mark.parametrize("trials", [3, 1])
@pytest.mark.parametrize("name", FINDERS)
def test_no_answer_is_within_a_closures_reach(name, trials):
    """Through the trials, the timed calls and the re-check, no tensor of the process other than the
    output holds the answer while the closure runs: the reference is sealed between judgements. (A
    worker of its own: the corpus worker holds other cheats' caches of the same inputs.)"""
    FOUND_LOG.unlink(missing_ok=True)
    w = WorkerProcess([CORPUS], device="cpu", env={**os.environ, "KBENCH_CORPUS_FOUND": str(FOUND_LOG)})
    try:
        record = w.run(_job(name, trials), timeout=120)
    finally:
        w.close()
    found = FOUND_LOG.read_text() if FOUND_LOG.exists() else ""
    FOUND_LOG.unlink(missing_ok=True)
    assert record["status"] == "OK", record
    assert record["timing"]["checked_calls"]["checked"] >= 1
    assert found == "", found


def test_fp32_matmul_on_tf32_is_caught(corpus_worker):
    """An fp32 case computed on TF32 (inputs rounded to a 10-bit mantissa) without --tf32."""
    record = corpus_worker.run(_job("cheat-tf32", 3, "matmul", MATMUL_FP32), timeout=120)
    assert record["status"] == "FAIL", record
    assert "trial 1 (seed 0, normal inputs)" in record["reason"]
    assert "is over what a correct fp32 kernel makes (32 x the plain fp32 computation's" in record["reason"]


def test_the_same_product_on_tf32_passes_with_tf32(corpus_worker):
    """With --tf32 the bound is set by a TF32 computation, and the same kernel is right."""
    record = corpus_worker.run(_job("cheat-tf32", 3, "matmul", {**MATMUL_FP32, "tf32": True}), timeout=120)
    assert record["status"] == "OK", record
    assert record["correctness"]["distributions"].keys() == {"normal", "mixed-magnitudes", "cancellation"}


def test_crash_hang_and_wrong_answer_end_to_end(cli, tmp_path, jsonl, flat_text, wide_console):
    """Through `kbench run --kernels tests/corpus/kernels`: isolation turns a segfault into CRASH and a hang
    into TIMEOUT, the rows show no time, and the exit code is 1."""
    out = tmp_path / "corpus.jsonl"
    result = cli("run", "attention", "--n", "32", "--d", "16", "--heads", "2", "--kernels", CORPUS,
                 "--impl", "cheat-nan,cheat-segfault,cheat-hangs", "--baseline", "cheat-nan",
                 "--timeout", "3", "--max-time", "0.05", "--out", out)
    records = {r["impl"]: r for r in jsonl(out)}
    for record in records.values():
        if record.get("log"):
            Path(record["log"]).unlink(missing_ok=True)
    assert result.exit_code == 1, result.output
    assert records["cheat-nan"]["status"] == "FAIL"
    assert "outputs are NaN/Inf" in records["cheat-nan"]["reason"]
    assert records["cheat-segfault"]["status"] == "CRASH"
    assert "SIGSEGV" in records["cheat-segfault"]["reason"]
    assert records["cheat-hangs"]["status"] == "TIMEOUT"
    assert "no answer within 3 s" in records["cheat-hangs"]["reason"]
    for record in records.values():
        assert "timing" not in record and "speedup" not in record
    text = flat_text(result.stdout)
    for name, status in (("cheat-nan", "FAIL"), ("cheat-segfault", "CRASH"), ("cheat-hangs", "TIMEOUT")):
        assert f"{name}* {status} - -" in text, text  # no median, no spread


# --- faster than the speed of light ----------------------------------------------------

H200_ENV = {"device": "cuda", "gpu": {"name": "NVIDIA H200", "driver": "570.86.15", "cuda_runtime": "12.8"},
            "packages": {"torch": "2.13.0"}}
BIG = Case({"n": 4096, "d": 128, "batch": 4, "heads": 8, "dtype": "fp16", "causal": False})


def _fake_ok(median_ms: float, method: str = "cuda-events+l2-flush") -> dict:
    return {"status": "OK", "reason": "", "correctness": {"ok": True},
            "timing": {"method": method, "samples": [median_ms] * 5, "stats": {"median": median_ms, "n": 5},
                       "warnings": []}}


def _record_for(attention, registry, result, env=H200_ENV, impl="sdpa", baseline="naive", baseline_timing=None):
    implementation = registry.implementations("attention")[impl]
    variant = Variant(implementation, {}, impl)
    request = runner.RunRequest(suite="attention", variants=[variant], cases=[BIG], baseline=baseline)
    return runner._record(attention, variant, BIG, request, result, env,
                          {} if baseline_timing is None else baseline_timing, baseline)


def test_an_interval_too_few_samples_cannot_bound_is_none_in_the_record_and_the_table(attention, registry):
    """Three samples a row cannot bound a 95 % interval of the ratio: the record holds None there (JSON has no
    infinity, so the file reads back the same), and the table shows the speedup alone."""
    from kbench.report import table_for_case

    def few(median_ms):
        return {"status": "OK", "reason": "", "correctness": {"ok": True},
                "timing": {"method": "cuda-events+l2-flush", "samples": [median_ms] * 3,
                           "stats": {"median": median_ms, "n": 3, "p20": median_ms, "p80": median_ms},
                           "warnings": []}}

    baseline_timing = {}
    _record_for(attention, registry, few(2.0), impl="naive", baseline_timing=baseline_timing)
    row = _record_for(attention, registry, few(1.0), impl="sdpa", baseline_timing=baseline_timing)
    assert row.speedup == pytest.approx(2.0)
    assert row.speedup_interval == [None, None]
    assert json.loads(results.dumps(row.to_json()))["speedup_interval"] == [None, None]
    table, _ = table_for_case("t", [row])
    assert "2.00x" in [cell for column in table.columns for cell in column._cells]


def test_speed_of_light_floor_for_h200(attention):
    peaks = peaks_for("NVIDIA H200")
    flops, nbytes = attention.flops(BIG), attention.min_bytes(BIG)
    floor = metrics.speed_of_light_ms(flops, nbytes, "fp16", peaks)
    # 275 GFLOP at 989 TFLOP/s is the binding floor (the 64 MiB at 4.8 TB/s take 14 us).
    assert floor == pytest.approx(flops / 989e12 * 1e3)
    assert floor == pytest.approx(0.278, rel=0.01)
    assert metrics.speed_of_light_ms(flops, nbytes, "fp16", None) is None


def test_faster_than_light_record_is_a_fail(attention, registry):
    """A 'kernel' timed at 20 us for work that needs at least 278 us on an H200 is not fast: it is wrong."""
    baseline_timing = {}
    record = _record_for(attention, registry, _fake_ok(0.020), baseline_timing=baseline_timing, impl="naive")
    assert record.status == "FAIL"
    assert record.reason.startswith("impossible: faster than the roofline: 0.02 ms")
    assert "need at least 0.2779 ms on H200" in record.reason
    assert record.speedup is None and "speedup" not in record.to_json()
    assert baseline_timing == {}  # an impossible baseline gives no speedups to the others
    assert record.metrics.pct_of_peak > 1000  # kept, for whoever investigates


def test_time_at_or_above_the_roofline_stays_ok(attention, registry):
    for median in (0.300, 0.278 / 1.04):  # a plausible time, and one within the 5 % slack of the floor
        record = _record_for(attention, registry, _fake_ok(median))
        assert record.status == "OK", record.reason
        assert record.reason == ""


def test_record_carries_the_speedups_interval(attention, registry):
    """The speedup is the ratio of the baseline's median to the row's; its 95 % interval comes from the raw
    samples of both (kbench.stats.speedup_interval), kept from the baseline's timing by case key."""
    from kbench.stats import speedup_interval

    def timed(median_ms: float, spread: float) -> dict:
        samples = [median_ms * (1 + spread * ((i * 7) % 11 - 5) / 5) for i in range(60)]
        return {"status": "OK", "reason": "", "correctness": {"ok": True},
                "timing": {"method": "cuda-events+l2-flush", "samples": samples,
                           "stats": {"median": float(sorted(samples)[30]), "n": 60}, "warnings": []}}

    baseline_timing = {}
    base = _record_for(attention, registry, timed(2.0, 0.01), impl="naive", baseline_timing=baseline_timing)
    assert baseline_timing[BIG.key] is base.timing  # the baseline's timing, samples and all
    row = _record_for(attention, registry, timed(0.5, 0.05), impl="sdpa", baseline_timing=baseline_timing)
    assert row.speedup == pytest.approx(base.median / row.median)
    low, high = row.speedup_interval
    assert [low, high] == list(speedup_interval(base.timing.samples, row.timing.samples))
    assert low < row.speedup < high and high / low < 1.2
    # without a baseline timing for the case there is neither a speedup nor an interval
    alone = _record_for(attention, registry, timed(0.5, 0.05), impl="sdpa")
    assert alone.speedup is None and alone.speedup_interval is None


def test_memory_floor_applies_only_with_the_l2_flush(attention):
    peaks = peaks_for("NVIDIA H200")
    # A memory-bound case: tiny d, so the bytes dominate. Without the flush the data may sit in L2.
    small_d = Case({"n": 256, "d": 8, "batch": 64, "heads": 16, "dtype": "fp16", "causal": False})
    flops, nbytes = attention.flops(small_d), attention.min_bytes(small_d)
    with_flush = metrics.speed_of_light_ms(flops, nbytes, "fp16", peaks, memory_roof=True)
    without = metrics.speed_of_light_ms(flops, nbytes, "fp16", peaks, memory_roof=False)
    assert with_flush == pytest.approx(nbytes / 4.8e12 * 1e3)
    assert without == pytest.approx(flops / 989e12 * 1e3) and without < with_flush
    median = (with_flush + without) / 2
    assert metrics.impossible(median, flops, nbytes, "fp16", peaks, memory_roof=True)
    assert metrics.impossible(median, flops, nbytes, "fp16", peaks, memory_roof=False) == ""


def test_no_speed_of_light_check_without_peaks(attention, registry):
    """CPU wall-clock times and GPUs missing from the peaks table are never judged against a roofline."""
    cpu_env = {"device": "cpu", "gpu": None}
    assert _record_for(attention, registry, _fake_ok(1e-6, "cpu-wall-clock"), env=cpu_env).status == "OK"
    unknown = {**H200_ENV, "gpu": {**H200_ENV["gpu"], "name": "Some Future GPU"}}
    assert _record_for(attention, registry, _fake_ok(1e-6), env=unknown).status == "OK"


# --- work on a side stream the events do not cover ----------------------------------------

def test_uncovered_work_rule():
    assert timing.uncovered_work(event_ms=1.0, wall_ms=1.02) == ""  # synchronise latency
    assert timing.uncovered_work(event_ms=0.010, wall_ms=0.055) == ""  # launch-bound: within the slack
    assert timing.uncovered_work(event_ms=0.5, wall_ms=1.04) == ""
    why = timing.uncovered_work(event_ms=0.004, wall_ms=12.5)
    assert why.startswith("timing: the CUDA events saw 0.004 ms a call")
    assert "12.5 ms" in why and "side stream" in why


def test_a_host_bound_call_is_not_work_off_the_stream():
    """A library whose Python side outlasts its kernel: long with a synchronise, but the GPU is done
    soon after the call returns and the call does not wait on the GPU. Work still running after the
    return, or a call that waits on the GPU inside (a side stream it synchronises), is still flagged."""
    assert timing.uncovered_work(0.025, 0.25, after_return_ms=0.03, waits_on_gpu=lambda: False) == ""
    assert timing.uncovered_work(0.025, 0.25, after_return_ms=0.2, waits_on_gpu=lambda: False) != ""
    assert timing.uncovered_work(0.025, 0.25, after_return_ms=0.03, waits_on_gpu=lambda: True) != ""
    assert timing.uncovered_work(0.025, 0.25, after_return_ms=0.03) != ""  # nothing says it does not wait


def test_synced_calls_time_each_call_with_a_synchronise():
    calls = []
    synced = timing.synced_calls(lambda: calls.append("call"), lambda: calls.append("sync"), per_call_s=0.1)
    assert calls == ["call", "sync"] * 3  # at least 3 calls, each followed by a synchronise
    assert synced.wall_ms >= synced.after_return_ms >= 0


class _HeldDevice:
    """A seam whose device hold makes a synchronise wait that long (as spinning programs on every SM
    would); ``full`` False stands for a GPU the hold did not fill (another stream's probe ran)."""

    def __init__(self, full: bool = True):
        self.pending_s, self.full = 0.0, full

    def hold_device(self, seconds):
        self.pending_s = seconds
        return lambda: self.full

    def synchronize(self):
        time.sleep(self.pending_s)
        self.pending_s = 0.0


# The host time of the calls below: the hold is ten times that, and host work may be late by nearly half
# the hold before it reads as waiting (a loaded CI machine wakes a sleeping thread milliseconds late).
QUEUE_S = 2e-3


def test_waits_on_gpu_tells_a_synchronising_call_from_host_work():
    cuda = _HeldDevice()
    assert timing.waits_on_gpu(cuda.synchronize, cuda, enqueue_s=QUEUE_S)  # the call synchronises inside
    assert not timing.waits_on_gpu(lambda: time.sleep(QUEUE_S), cuda, enqueue_s=QUEUE_S)  # the host's own work
    assert timing.waits_on_gpu(lambda: None, object(), enqueue_s=QUEUE_S)  # no hold: cannot tell, so it may
    assert "returned after" in timing.waits_on_gpu(cuda.synchronize, cuda, enqueue_s=QUEUE_S)  # says how it was seen


def test_a_hold_that_left_room_on_the_gpu_tells_nothing():
    """Side-stream work the call synchronises itself runs beside a hold that does not fill the GPU, and
    the call returns early: host work and waiting look alike then, so the call counts as waiting."""
    cuda = _HeldDevice(full=False)
    assert "in each of 3 holds" in timing.waits_on_gpu(lambda: time.sleep(QUEUE_S), cuda, enqueue_s=QUEUE_S)


def test_one_hold_that_left_room_is_tried_again():
    """A probe that slipped in beside one hold (a scheduling fluke) does not decide: the next hold does."""

    class FlakyHold(_HeldDevice):
        holds = 0

        def hold_device(self, seconds):
            self.holds += 1
            self.full = self.holds > 1
            return super().hold_device(seconds)

    cuda = FlakyHold()
    assert timing.waits_on_gpu(lambda: time.sleep(QUEUE_S), cuda, enqueue_s=QUEUE_S) == ""
    assert cuda.holds == 2


class _TracedDevice(_HeldDevice):
    """A device-hold seam with the rest of measure_cuda's (events, a flush buffer, the hold before a
    start event), logging what is queued before each start event."""

    def __init__(self, full: bool = True):
        super().__init__(full)
        self.log: list[str] = []

    def hold(self, seconds):
        self.log.append("hold")

    def synchronize(self):
        self.log.append("sync")
        super().synchronize()

    def event(self):
        log = self.log

        class Event:
            def record(self):
                log.append("record")

            def elapsed_time(self, other):
                return 0.5

        return Event()

    def l2_flush(self):
        return lambda: None


def _sampled(cuda, call):
    """What comes before each start event in the samples measure_cuda takes of ``call`` on ``cuda``."""
    from kbench.stopping import StopRule

    rule = StopRule(target_noise=0.5, min_samples=4, min_time=0.0, max_time=100.0, max_samples=4)
    result = timing.measure_cuda(call, timing.Settings(stop=rule, warmup_time=0.0, warmup_calls=1), cuda=cuda)
    log = cuda.log
    starts = [i for i, item in enumerate(log) if item == "record"][0:8:2]  # each sample's start event
    return result, [log[i - 1] for i in starts]


def test_a_call_that_waits_on_the_gpu_is_timed_from_an_idle_gpu():
    """It would wait for a hold queued before its start event: each sample starts after a device-wide
    synchronise instead, so the events span what it waits for; the result says how it was seen to wait,
    and a synchronised call gets no host-bound excuse (its events already span its host time)."""
    cuda = _TracedDevice()
    result, before_start = _sampled(cuda, cuda.synchronize)
    assert before_start == ["sync"] * 4
    assert "with every SM held" in result["host_synchronous"]
    assert any(w.startswith("waits on the GPU inside a call") for w in result["warnings"])


def test_an_asynchronous_call_is_queued_behind_the_hold():
    cuda = _TracedDevice()
    result, before_start = _sampled(cuda, lambda: None)
    assert before_start == ["hold"] * 4
    assert "host_synchronous" not in result


def test_the_reason_a_row_is_failed_for_uncovered_work_says_what_was_measured():
    why = timing.uncovered_work(0.025, 0.25, after_return_ms=0.03, waits_on_gpu=lambda: "it returned late")
    assert "0.03 ms of it after the call returned" in why and "the call waits on the GPU (it returned late)" in why
    late = timing.uncovered_work(0.025, 0.25, after_return_ms=0.2, waits_on_gpu=lambda: "")
    assert "0.2 ms of it after the call returned" in late and "waits on the GPU" not in late


def _fake_sampler(extra: dict):
    """A stand-in for timing.CpuSampler whose result carries ``extra`` (what the GPU path measures)."""
    from kbench.stats import summarize

    class FakeSampler:
        def __init__(self, fn, settings, guard=None):
            self.fn, self.guard = fn, guard

        def burst(self, seconds=None):
            self.fn()
            return "sample limit"

        def result(self):
            return {"method": "cuda-events+l2-flush", "samples": [0.004] * 10, "stats": summarize([0.004] * 10),
                    "warnings": [], "synced_wall_ms": 12.5, **extra}

    return FakeSampler


def _naive_job() -> dict:
    return {"suite": "attention", "impl": "naive", "params": {}, "case": CASE, "seed": 0, "trials": 1,
            "stop": {}, "flush_l2": True, "cuda_graph": False}


def test_worker_fails_a_row_whose_events_missed_its_work(registry, monkeypatch):
    """The worker turns a timing marked `uncovered` into FAIL with that reason (the GPU measures it)."""
    monkeypatch.setattr(timing, "CpuSampler", _fake_sampler({"uncovered": timing.uncovered_work(0.004, 12.5)}))
    record = worker.execute(registry, _naive_job(), "cpu", {"device": "cpu", "gpu": None})
    assert record["status"] == "FAIL"
    assert record["reason"].startswith("timing: the CUDA events saw 0.004 ms a call")


def test_worker_fails_a_row_whose_timed_call_was_wrong(registry, monkeypatch):
    """A timed call judged wrong makes the row FAIL with that reason, and its correctness not ok."""
    wrong = ("timed call 5 (checked at random, outside the timed region) differs from the checked calls: "
             "512 of 1024 outputs are NaN/Inf (unwritten, or overflow)")
    monkeypatch.setattr(timing, "CpuSampler", _fake_sampler({"wrong_call": wrong}))
    record = worker.execute(registry, _naive_job(), "cpu", {"device": "cpu", "gpu": None})
    assert record["status"] == "FAIL" and record["reason"] == wrong
    assert record["correctness"]["ok"] is False and record["correctness"]["reason"] == wrong
    assert "wrong_call" not in record["timing"]


def test_statuses_that_fail():
    assert set(results.FAILED) == {"FAIL", "CRASH", "TIMEOUT"}


# --- the engine pieces the corpus relies on ---------------------------------------------------

def test_same_memory_sees_views_and_copies():
    import torch

    from kbench.correctness import same_memory

    a = torch.zeros(4, 8, dtype=torch.float64)
    assert same_memory(a, a) and same_memory(a[1:], a) and same_memory(a.reshape(8, 4), a)
    assert not same_memory(a.clone(), a)
    assert not same_memory(a, None) and not same_memory([1.0], a)


def test_a_result_that_is_the_reference_is_refused_whatever_its_values():
    """With a float64 case, handing back the reference would even have the right dtype and values."""
    import torch

    from kbench.correctness import compare

    ref = torch.randn(2, 3, dtype=torch.float64)
    reason, max_abs, _ = compare(ref, ref, ref, 1e-3, 1e-3)
    assert reason == "returned the reference's output (a tensor of the harness, not its own result)"
    assert max_abs is None
    assert compare(ref.clone(), ref, ref, 1e-3, 1e-3)[0] == ""
    clone_of_input = torch.randn(2, 3, dtype=torch.float64)
    reason, _, _ = compare(clone_of_input[:], ref, ref, 1, 1, {"the harness's copy of input q": clone_of_input})
    assert reason.startswith("returned the harness's copy of input q")


def test_recheck_refills_the_same_input_tensors(attention):
    """The closure keeps its tensors (set-up is not redone); their values change under it."""
    from kbench.correctness import check, recheck
    from kbench.registry import Implementation, Needs

    seen = []

    def make(case, inputs, out):
        q, k, v = inputs["q"], inputs["k"], inputs["v"]

        def run():
            import torch.nn.functional as F

            seen.append((q.data_ptr(), float(q.flatten()[0])))
            out.copy_(F.scaled_dot_product_attention(q, k, v))

        return run

    impl = Implementation("attention", "right", "torch", make, Needs(), "", "test")
    case = Case({"n": 16, "d": 16, "batch": 1, "heads": 1, "dtype": "fp32", "causal": False})
    verdict = check(attention, impl, case, "cpu", seed=7, trials=2)
    assert verdict.ok, verdict.reason
    assert recheck(verdict, "cpu") == ""
    (ptr_before, value_before), (ptr_after, value_after) = seen[-2:]
    assert ptr_after == ptr_before and value_after != value_before
    # the first seed no trial used: one trial per distribution, then the first distribution again
    assert verdict.refresh[2] == 7 + len(attention.distributions) + 1
