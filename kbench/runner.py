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
from pathlib import Path
from typing import Callable

from kbench import envinfo, metrics, results, roofline
from kbench.devices import peaks_for
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


def _by_implementation(variants: list[Variant], baselines: set[str]) -> list[list[Variant]]:
    """Variants grouped per implementation (they share a worker), the baselines' groups first."""
    groups: dict[str, list[Variant]] = {}
    for variant in variants:
        groups.setdefault(variant.impl.name, []).append(variant)
    return sorted(groups.values(), key=lambda group: group[0].impl.name not in baselines)


def run(
    registry: Registry,
    request: RunRequest,
    out: results.ResultsFile,
    on_start: Callable[[Variant, Case], None] = lambda variant, case: None,
    on_record: Callable[[Record], None] = lambda record: None,
    done: dict | None = None,
) -> list[Record]:
    """Measure every variant x case not in ``done`` (records already in the results file, by
    Record.key: a resumed run) and return the new records."""
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

    def has_work(variants: list[Variant]) -> bool:  # a job that needs a worker
        return any((suite.name, v.label, case.key) not in done and not skip_reason(v.impl, case, static_device)
                   for v in variants for case in request.cases)

    groups = _by_implementation(request.variants, set(baseline_of.values()))
    # The workers are forked from one process that has imported torch and the kernels (never touching the
    # GPU: each worker of a GPU run makes its own CUDA context after the fork).
    fork_device = static_device
    if request.interleave:  # a worker per variant, all of them started at once
        needed = sum(has_work([v]) for v in request.variants)
        starter = WorkerStarter(request.kernel_dirs, request.device, suite.name, needed=needed, ahead=needed,
                                fork_device=fork_device)
    else:
        starter = WorkerStarter(request.kernel_dirs, request.device, suite.name, needed=sum(map(has_work, groups)),
                                fork_device=fork_device)
    try:
        if request.interleave:
            _run_interleaved(suite, request, recorder, on_start, done, baseline_of, static_device, starter)
        else:
            for group in groups:
                jobs = _ImplJobs(group[0].impl, request, static_device, starter)
                try:
                    for variant in group:
                        for case in request.cases:
                            if (suite.name, variant.label, case.key) in done:
                                continue
                            on_start(variant, case)
                            recorder.write(variant, case, *jobs.measure(variant, case))
                finally:
                    jobs.close()
    finally:
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


# Seconds of sampling each implementation takes in its turn, in interleaved mode.
BURST_SECONDS = 0.05


def _run_interleaved(suite, request, recorder: _Recorder, on_start, done, baseline_of,
                     static_device, starter: WorkerStarter) -> None:
    """Case by case: every implementation is checked and warmed up in its own worker, then they take
    turns of BURST_SECONDS of sampling until each one's stop rule is met, so the rows of one table
    are sampled under the same clock and temperature. Records are written baselines first, as they
    finish, so each can carry its speedup."""
    baselines_set = set(baseline_of.values())
    order = sorted(request.variants, key=lambda variant: variant.impl.name not in baselines_set)
    workers = {variant.label: _ImplJobs(variant.impl, request, static_device, starter) for variant in order}
    starter.top_up()  # every worker starts now, side by side; each takes its first job in turn
    try:
        for case in request.cases:
            pending = [v for v in order if (suite.name, v.label, case.key) not in done]
            sampling, finished = [], {}
            for variant in pending:  # check and warm up each; the ones with nothing to time end here
                on_start(variant, case)
                reply, env = workers[variant.label].start(variant, case)
                if reply is None:
                    sampling.append(variant)
                else:
                    finished[variant.label] = (reply, env)
            while sampling:  # turns of sampling, in the same order every round
                for variant in list(sampling):
                    over, failure = workers[variant.label].burst(BURST_SECONDS)
                    if failure is not None:
                        finished[variant.label] = failure
                    if over or failure is not None:
                        sampling.remove(variant)
            for variant in pending:  # baselines first
                if variant.label not in finished:
                    finished[variant.label] = workers[variant.label].finish()
                recorder.write(variant, case, *finished[variant.label])
    finally:
        for jobs in workers.values():
            jobs.close()


class _ImplJobs:
    """The jobs of one implementation (all its variants), sharing one worker until it crashes or hangs."""

    def __init__(self, impl: Implementation, request: RunRequest, static_device: str, starter: WorkerStarter):
        self.impl = impl
        self.request = request
        self.static_device = static_device
        self.starter = starter
        self.worker = None
        self.env: dict | None = None

    def measure(self, variant: Variant, case: Case) -> tuple[dict, dict | None]:
        """Returns the job's result fields and the environment it ran in (None if no worker ran)."""
        skipped = self._skip(case)
        if skipped:
            return skipped, self.env
        return self._ask(self._job(variant, case))

    def _skip(self, case: Case) -> dict | None:
        """The SKIP this job is before any worker runs (not part of the case, no GPU...), or None."""
        outside = out_of_case(self.impl, case)
        if outside:
            return {"status": "SKIP", "reason": outside, "out_of_case": True}
        reason = skip_reason(self.impl, case, self.static_device)
        return {"status": "SKIP", "reason": reason} if reason else None

    def start(self, variant: Variant, case: Case) -> tuple[dict | None, dict | None]:
        """Interleaved mode: send the job and wait until it is checked and warmed up. (None, env) when
        it is ready for bursts; (its result, env) when it ended there (SKIP, FAIL, CRASH...)."""
        skipped = self._skip(case)
        if skipped:
            return skipped, self.env
        result, env = self._ask({**self._job(variant, case), "interleave": True})
        return (None, env) if result.get("type") == "ready" else (result, env)

    def burst(self, seconds: float) -> tuple[bool, tuple | None]:
        """One turn of sampling: (whether sampling is over, the finished result when the job ended)."""
        result, env = self._ask({"op": "burst", "seconds": seconds})
        if result.get("type") == "burst":
            return bool(result.get("done")), None
        return True, (result, env)

    def finish(self) -> tuple[dict, dict | None]:
        return self._ask({"op": "finish"})

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

    def _ask(self, message: dict) -> tuple[dict, dict | None]:
        """Send one message to the worker (started if need be) and return its answer and environment."""
        started = None
        try:
            if self.worker is None:
                waiting = time.monotonic()
                self.worker = self.starter.take()
                started = {"waited_for_worker_s": round(time.monotonic() - waiting, 3),
                           "worker_startup_s": getattr(self.worker, "startup_s", None)}
                self.env = self.worker.env
            result = self.worker.run(message, self.request.timeout)
        except WorkerGone as gone:
            self.close()
            return {"status": gone.status, "reason": gone.reason, "log": gone.log}, self.env
        if result.get("type") == "result":
            result.pop("type")
        if started is not None:  # the first answer of a new worker carries what its start-up cost
            result["harness"] = {**started, **(result.get("harness") or {})}
        if result.pop("fatal", False):
            self.close()  # its CUDA context is unusable: the next job starts a fresh worker
        return result, self.env

    def close(self) -> None:
        """Done with the worker: a crashed or hung one is killed now; an idle one ends on its own while
        the next implementation measures (reaped when the run ends)."""
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
