"""Run a suite: every chosen implementation on every case, each in its own worker.

The baseline runs first so every later record can carry its speedup the moment
it is written. Records go to the results file one by one as they are measured.
The baseline is the request's (`--baseline`) or, where it gives none, the suite's
for each case (Suite.baseline_for: a suite whose cases are different problems names one per case).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable

from kbench import envinfo, metrics, results, roofline
from kbench.devices import peaks_for
from kbench.gpu_memory import Room
from kbench.stats import speedup_interval
from kbench.isolation import WorkerGone
from kbench.record import Correctness, Metrics, Record, Roof, Timing, comparable
from kbench.registry import Implementation, Registry, Variant, out_of_case, skip_reason
from kbench.selection import baselines
from kbench.suite import Case
from kbench.worker_starter import WorkerStarter


@dataclass
class RunRequest:
    suite: str
    variants: list[Variant]  # implementations with their parameters fixed
    cases: list[Case]
    baseline: str | None  # None: the suite's, case by case (Suite.baseline_for)
    seed: int = 0
    trials: int = 3
    stop: dict = field(default_factory=dict)  # StopRule overrides
    flush_l2: bool = True
    cuda_graph: bool = False
    # Launch-bound cases (eager median under timing.LAUNCH_BOUND_MS) also timed as graph replays, the headline.
    auto_graph: bool = True
    timeout: float = 600.0
    kernel_dirs: tuple[Path, ...] = ()
    device: str = "auto"  # "auto", "cpu" or "cuda"
    command: str = ""
    interleave: bool = False  # alternate bursts of samples between the implementations of each case


def host_has_gpu() -> bool:
    """A cheap look (NVML, no CUDA context) used only to skip CUDA-only work up front."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetCount() > 0
    except Exception:  # noqa: BLE001 - no driver, no GPU
        return False


# A case whose inputs and output take at most this many bytes has its trials drawn ahead, side by side
# in every implementation's worker, before the first implementation runs: there the harness's part of a
# check (first calls, float64 references, many small launches) outweighs the measurement itself. A
# larger case's trials are drawn one before each call, in each implementation's turn, so that only one
# implementation's trial tensors (float64 references among them) take memory at once.
SIDE_BY_SIDE_BYTES = 16 << 20


def in_turn(variants: list[Variant], baseline_names: set[str]) -> list[Variant]:
    """The order in which a case's variants are measured and recorded: baselines first, then the rest as
    given."""
    return sorted(variants, key=lambda variant: variant.impl.name not in baseline_names)


# Seconds of sampling each implementation takes in its turn, in interleaved mode.
BURST_SECONDS = 0.05


def run(
    registry: Registry,
    request: RunRequest,
    out: results.ResultsFile,
    on_start: Callable[[Variant, Case], None] = lambda variant, case: None,
    on_record: Callable[[Record], None] = lambda record: None,
    done: dict | None = None,
) -> list[Record]:
    """Measure every variant x case not in ``done`` (records already in the results file, by
    Record.key: a resumed run) and return the new records. Case by case: each variant, in its own
    worker, draws its trials (side by side with the others where the case is small), then is checked
    and timed in its turn, baselines first, so that every record carries its speedup the moment it is
    written."""
    suite = registry.suite(request.suite)
    if request.device == "auto":
        static_device = "cuda" if host_has_gpu() else "cpu"
    else:
        static_device = request.device
    done = done or {}
    baseline_of = baselines(suite, request.cases, request.baseline)
    baseline_timing: dict[str, Timing] = {}  # case key -> the baseline's timing (its median and samples)
    for record in done.values():  # a resumed run's speedups are relative to the baseline it recorded
        if record.impl == baseline_of.get(record.case_key) and record.ok:
            baseline_timing.setdefault(record.case_key, record.timing)
    recorder = _Recorder(suite, request, out, on_record, baseline_timing, baseline_of)
    order = in_turn(request.variants, set(baseline_of.values()))

    def has_work(variant: Variant) -> bool:  # a job that needs a worker
        return any((suite.name, variant.label, case.key) not in done and not skip_reason(variant.impl, case, static_device)
                   for case in request.cases)

    # A worker per variant, forked from one process that has imported torch and the kernels (never touching
    # the GPU: each worker of a GPU run makes its own CUDA context after the fork).
    starter = WorkerStarter(request.kernel_dirs, request.device, suite.name, needed=sum(map(has_work, order)),
                            fork_device=static_device)
    workers = {variant.label: _VariantWorker(variant.impl, request, static_device, starter) for variant in order}
    measure_case = partial(_case_interleaved, device=static_device) if request.interleave else _case_in_turn
    try:
        for case in request.cases:
            pending = [v for v in order if (suite.name, v.label, case.key) not in done]
            if pending:
                measure_case(case, pending, workers, recorder, on_start,
                             side_by_side=suite.min_bytes(case) <= SIDE_BY_SIDE_BYTES)
    finally:
        for worker in workers.values():
            worker.close()
        starter.close()
    return recorder.records


class _Recorder:
    """Turns each job's result into a record, appends it to the results file at once and keeps it."""

    def __init__(self, suite, request, out, on_record, baseline_timing, baseline_of):
        self.suite, self.request, self.out, self.on_record = suite, request, out, on_record
        self.baseline_timing, self.baseline_of = baseline_timing, baseline_of
        self.records: list[Record] = []
        self._host_env = None
        self._run_env = None  # the environment the last worker reported (its GPU, versions)

    def write(self, variant: Variant, case: Case, result: dict, env: dict | None) -> None:
        if env is not None:
            self._run_env = env
        elif self._run_env is not None:  # nothing ran for this row: the machine the run's workers ran on
            env = self._run_env
        else:  # nothing ran yet: describe the host without starting CUDA
            self._host_env = self._host_env or envinfo.collect("cpu")
            env = self._host_env
        record = _record(self.suite, variant, case, self.request, result, env, self.baseline_timing,
                         self.baseline_of[case.key])
        self.out.append(record)
        self.records.append(record)
        self.on_record(record)


def _prepare(variants: list[Variant], case: Case, workers: dict, ahead: bool) -> dict:
    """Send each variant's job and wait until each worker has drawn its trials (``ahead``: every trial,
    references included, side by side: the workers hold the GPU shared meanwhile, and no code of an
    implementation's runs). Returns label -> (result, env) of the variants that ended there (a SKIP, a
    worker that crashed...). Every worker has answered before any implementation is called, so none
    runs (or tunes itself by timing its candidates) beside another worker's preparation."""
    ended, sent = {}, []
    for variant in variants:
        result = workers[variant.label].send_job(variant, case, trials_ahead=ahead)
        if result is None:
            sent.append(variant)
        else:
            ended[variant.label] = result
    for variant in sent:  # in order: each one's timeout counts from the moment it is waited for
        result = workers[variant.label].prepared()
        if result is not None:
            ended[variant.label] = result
    return ended


def _case_in_turn(case: Case, pending: list[Variant], workers: dict, recorder: _Recorder, on_start,
                  side_by_side: bool) -> None:
    """One case, each variant checked and timed in its turn (baselines first), its record written as
    soon as it is."""
    ended = _prepare(pending, case, workers, ahead=True) if side_by_side else {}
    for variant in pending:
        on_start(variant, case)
        began = time.monotonic()
        if not side_by_side:
            ended.update(_prepare([variant], case, workers, ahead=False))
        result, env = ended.pop(variant.label, None) or workers[variant.label].measure()
        if result.get("harness"):  # the whole of its turn, the steps the worker timed and what lies between
            result["harness"]["turn_s"] = round(time.monotonic() - began, 3)
        recorder.write(variant, case, result, env)


def _case_interleaved(case: Case, pending: list[Variant], workers: dict, recorder: _Recorder, on_start,
                      side_by_side: bool, device: str = "cpu") -> None:
    """One case, every variant checked and warmed up first (in turn), then taking turns of BURST_SECONDS
    of sampling until each one's stop rule is met, so the rows of one table are sampled under the same
    clock and temperature. Records are written baselines first, once their group is done, so each can
    carry its speedup.

    A large case on a GPU is interleaved in groups where it must be: before the next variant's job the
    GPU must have room for what the largest worker so far took (kbench.gpu_memory.Room); where it has
    not, the variants so far are sampled in turns and finished (their workers then give their memory
    back), and the next group begins. Each record of a case split so says with which others it was
    sampled."""
    for variant in pending:
        on_start(variant, case)
    ended = _prepare(pending, case, workers, ahead=True) if side_by_side else {}
    room = Room() if device == "cuda" and not side_by_side else None
    group: list[Variant] = []
    why = ""  # the room there was at the first split
    written = 0  # records are written in ``pending``'s order (baselines first), each group's when it ends

    def end_group(split: bool) -> None:
        nonlocal written
        _sample_in_turns(group, workers, ended)
        if split:
            _say_group(group, ended, why)
        while written < len(pending) and pending[written].label in ended:
            recorder.write(pending[written], case, *ended.pop(pending[written].label))
            written += 1

    for variant in pending:
        uuid = _gpu_uuid(workers)
        if room is not None and group and not room.fits_another(uuid):
            why = why or room.describe()
            end_group(split=True)
            group = []
        if room is not None:
            room.before_job(uuid)
        if not side_by_side:
            ended.update(_prepare([variant], case, workers, ahead=False))
        figures = {}  # the worker's own GPU memory figures, once it is warmed up
        if variant.label not in ended:
            worker = workers[variant.label]
            result = worker.check() or worker.warm_up()
            if result is None:
                group.append(variant)
                figures = worker.memory
            else:
                ended[variant.label] = result
        if room is not None:
            room.after_warm_up(_gpu_uuid(workers), **figures)
    end_group(split=bool(why))


def _sample_in_turns(group: list[Variant], workers: dict, ended: dict) -> None:
    """Turns of sampling, in the same order every round, until each variant of ``group`` is done; then
    each one's record (its finish) into ``ended``."""
    sampling = list(group)
    while sampling:
        for variant in list(sampling):
            over, failure = workers[variant.label].burst(BURST_SECONDS)
            if failure is not None:
                ended[variant.label] = failure
            if over or failure is not None:
                sampling.remove(variant)
    for variant in group:  # in the group's order: baselines first
        if variant.label not in ended:
            ended[variant.label] = workers[variant.label].finish()


def _say_group(group: list[Variant], ended: dict, why: str) -> None:
    """The note of each record of one group of a case interleaved in groups: which others it was
    sampled with, and why the case was split."""
    for variant in group:
        result, _ = ended[variant.label]
        others = [v.label for v in group if v is not variant]
        with_whom = f"with {', '.join(others)} only" if others else "alone"
        if result.get("timing"):
            result["timing"].setdefault("warnings", []).append(f"interleaved {with_whom}: {why}")


def _gpu_uuid(workers: dict) -> str | None:
    """The run's GPU, as its workers reported it (None before any worker started, or on a CPU)."""
    for worker in workers.values():
        gpu = (worker.env or {}).get("gpu") or {}
        if gpu.get("uuid"):
            return gpu["uuid"]
    return None


class _VariantWorker:
    """One variant's worker, taken from the run's WorkerStarter when its first job is sent (a fresh one
    after a crash or a hang), and the steps of each job (kbench.worker.serve_in_steps). Every step
    answers (result, env) when the job ended there: a SKIP, a FAIL, a CRASH or TIMEOUT of the worker."""

    def __init__(self, impl: Implementation, request: RunRequest, static_device: str, starter: WorkerStarter):
        self.impl = impl
        self.request = request
        self.static_device = static_device
        self.starter = starter
        self.worker = None
        self.env: dict | None = None
        self._started: dict | None = None  # what a new worker's start-up cost, for its first record
        self.memory: dict = {}  # the worker's GPU memory after its last warm-up (gpu_peak_bytes, gpu_held_bytes)

    def _skip(self, case: Case) -> dict | None:
        """The SKIP this job is before any worker runs (not part of the case, no GPU...), or None."""
        outside = out_of_case(self.impl, case)
        if outside:
            return {"status": "SKIP", "reason": outside, "out_of_case": True}
        reason = skip_reason(self.impl, case, self.static_device)
        return {"status": "SKIP", "reason": reason} if reason else None

    def send_job(self, variant: Variant, case: Case, trials_ahead: bool) -> tuple | None:
        """Send the job (its worker starts drawing its trials at once); None, or (result, env) when it
        ended before that."""
        skipped = self._skip(case)
        if skipped:
            return skipped, self.env
        try:
            if self.worker is None:
                waiting = time.monotonic()
                self.worker = self.starter.take()
                self._started = {"waited_for_worker_s": round(time.monotonic() - waiting, 3),
                                 "worker_startup_s": getattr(self.worker, "startup_s", None)}
                self.env = self.worker.env
            self.worker.send({**self._job(variant, case), "in_steps": True, "trials_ahead": trials_ahead})
        except WorkerGone as gone:
            return self._gone(gone)
        return None

    def prepared(self) -> tuple | None:
        """Wait until the worker has drawn the job's trials: None, else the job's (result, env)."""
        return self._answer("prepared")

    def check(self) -> tuple | None:
        """Call the implementation on its trials: None once it passed them, else the job's (result, env)."""
        return self._step({"op": "check"}, "checked")

    def warm_up(self) -> tuple | None:
        """Warm the checked closure up: None once it is ready to sample (its GPU memory figures kept in
        ``memory``: kbench.gpu_memory.worker_figures), else the job's (result, env)."""
        answer = self._step({"op": "warm_up"}, "ready", keep=True)
        if isinstance(answer, dict):
            self.memory = {key: value for key, value in answer.items() if key != "type"}
            return None
        return answer

    def burst(self, seconds: float | None) -> tuple[bool, tuple | None]:
        """One turn of sampling: (whether sampling is over, the job's (result, env) when it ended)."""
        answer = self._step({"op": "burst", "seconds": seconds}, "burst", keep=True)
        if isinstance(answer, dict):
            return bool(answer.get("done")), None
        return True, answer

    def finish(self) -> tuple:
        """The job's record: the timing, the implementation's own figures, the check after it."""
        return self._step({"op": "finish"}, None)

    def measure(self) -> tuple:
        """Check, warm up, sample until the stop rule is met, finish: the job's (result, env)."""
        ended = self.check() or self.warm_up()
        if ended is not None:
            return ended
        _, ended = self.burst(None)
        return ended if ended is not None else self.finish()

    def _step(self, message: dict, expected: str | None, keep: bool = False):
        """Send a step and take its answer (:meth:`_answer`); the job's (result, env) when the worker is gone."""
        try:
            self.worker.send(message)
        except WorkerGone as gone:
            return self._gone(gone)
        return self._answer(expected, keep)

    def _answer(self, expected: str | None, keep: bool = False):
        """The worker's next answer: None when it is the ``expected`` step's (the answer itself with
        ``keep``), else the job's (result, env)."""
        try:
            answer = self.worker.receive(self.request.timeout)
        except WorkerGone as gone:
            return self._gone(gone)
        if expected is not None and answer.get("type") == expected:
            return answer if keep else None
        answer.pop("type", None)
        if self._started is not None:  # a new worker's first record carries what its start-up cost
            answer["harness"] = {**self._started, **(answer.get("harness") or {})}
            self._started = None
        if answer.pop("fatal", False):
            self.close()  # its CUDA context is unusable: the next job starts a fresh worker
        return answer, self.env

    def _gone(self, gone: WorkerGone) -> tuple:
        self.close()
        return {"status": gone.status, "reason": gone.reason, "log": gone.log}, self.env

    def _job(self, variant: Variant, case: Case) -> dict:
        return {
            "suite": self.request.suite,
            "impl": self.impl.name,
            "label": variant.label,  # names the NVTX range of its timed calls
            "params": variant.params,
            "case": case.values,
            "seed": self.request.seed,
            "trials": self.request.trials,
            "stop": self.request.stop,
            "flush_l2": self.request.flush_l2,
            "cuda_graph": self.request.cuda_graph,
            "auto_graph": self.request.auto_graph,
        }

    def close(self) -> None:
        """Done with the worker: a crashed or hung one is killed now; an idle one ends on its own (reaped
        when the run ends)."""
        if self.worker is not None:
            if self.worker.alive and not self.worker.busy:
                self.starter.release(self.worker)
            else:
                self.worker.close()
            self.worker = None


def _record(suite, variant: Variant, case, request, result, env, baseline_timing, baseline: str) -> Record:
    """The record of one job: what the worker answered (``result``), with the roofline, the metrics and
    the speedup against the baseline's timing worked out here."""
    impl = variant.impl
    record = Record(
        created_at=results.now(), suite=suite.name, impl=impl.name, label=variant.label, params=variant.params,
        backend=impl.backend, case=case.values, case_key=case.key, status=result.get("status"),
        reason=result.get("reason", ""), out_of_case=result.get("out_of_case"), baseline=baseline,
        flops=suite.flops(case), min_bytes=suite.min_bytes(case),
        correctness=_part(Correctness, result, "correctness"), timing=_part(Timing, result, "timing"),
        config=result.get("config") or {}, figures=result.get("figures") or {}, log=result.get("log"),
        harness=result.get("harness") or {},
    )
    timing = record.timing
    if record.ok and timing:
        median = timing.stats.median
        gpu = env.get("gpu") if env else None
        peaks = peaks_for(gpu["name"]) if gpu and timing.method != "cpu-wall-clock" else None
        dtype = suite.dtype(case)
        compute_tflops = None
        if peaks is not None:
            compute_tflops, roof_label = roofline.compute_roof(peaks, impl.unit, dtype, bool(case.values.get("tf32")))
            record.roof = Roof(gpu=peaks.key, unit=impl.unit, compute=roof_label, compute_tflops=compute_tflops,
                               hbm_tbs=peaks.hbm_tbs)
            if compute_tflops is None:  # a memory kernel: no compute ceiling at all
                compute_tflops = math.inf
        record.metrics = Metrics.from_json(metrics.derive(median, record.flops, record.min_bytes, dtype, peaks,
                                                          compute_tflops), "metrics")
        # Without the L2 flush the inputs may come from cache: only the compute floor holds then.
        why = metrics.impossible(median, record.flops, record.min_bytes, dtype, peaks,
                                 memory_roof="l2-flush" in timing.method, compute_tflops=compute_tflops)
        if why:
            record.status, record.reason = "FAIL", why
        else:
            if impl.name == baseline:
                baseline_timing.setdefault(case.key, timing)
            base = baseline_timing.get(case.key)
            _set_speedup(record, base, timing)
    record.env = env
    record.command = request.command
    return record


def _set_speedup(record: Record, base: Timing | None, timing: Timing) -> None:
    """The record's speedup over the baseline's timing ``base`` (None: no baseline measured), like with
    like (record.comparable): where one of the two rows was graph-timed and the other not, their eager
    times, so a launch-bound row's graph replays are never set against another row's launch gaps."""
    if base is None:
        return
    theirs, mine, basis = comparable(base, timing)
    record.speedup = metrics.speedup(theirs.stats.median, mine.stats.median)
    if record.speedup is None:
        return
    record.speedup_basis = basis or None
    if theirs.samples and mine.samples:
        # From the raw samples of both rows, at 95 %: the ratio is known this well, no better.
        # A bound the samples cannot set (too few of them) is None: JSON has no infinity.
        record.speedup_interval = [v if math.isfinite(v) and v > 0 else None
                                   for v in speedup_interval(theirs.samples, mine.samples)]


def _part(cls, result: dict, key: str):
    """A part of the worker's answer (its timing, its correctness check) as its type; None when it has none."""
    return cls.from_json(result[key], key) if result.get(key) is not None else None
