"""Run a suite: every chosen implementation on every case, each in its own worker.

The baseline runs first so every later record can carry its speedup the moment
it is written. Records go to the results file one by one as they are measured.
The baseline is the request's (`--baseline`) or, where it gives none, the suite's
for each case (Suite.baseline_for: the patterns suite has one per lesson).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kbench import envinfo, metrics, results, roofline
from kbench.devices import peaks_for
from kbench.isolation import Worker, WorkerGone
from kbench.registry import Implementation, Registry, Variant, skip_reason
from kbench.suite import Case


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
    timeout: float = 600.0
    kernel_dirs: tuple[Path, ...] = ()
    device: str = "auto"  # "auto", "cpu" or "cuda"
    command: str = ""


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


def baselines(suite, cases, baseline: str | None = None) -> dict[str, str]:
    """Case key -> the implementation its speedups are relative to (``baseline``, else the suite's choice)."""
    return {case.key: baseline or suite.baseline_for(case) for case in cases}


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
    on_record: Callable[[dict], None] = lambda record: None,
    done: dict | None = None,
) -> list[dict]:
    """Measure every variant x case not in ``done`` (records already in the results file, by
    results.key: a resumed run) and return the new records."""
    suite = registry.suite(request.suite)
    if request.device == "auto":
        static_device = "cuda" if host_has_gpu() else "cpu"
    else:
        static_device = request.device
    done = done or {}
    host_env = None
    baseline_of = baselines(suite, request.cases, request.baseline)
    baseline_ms: dict[str, float] = {}
    for record in done.values():  # a resumed run's speedups are relative to the baseline it recorded
        if (record.get("impl") == baseline_of.get(record.get("case_key")) and record.get("status") == "OK"
                and record.get("timing")):
            baseline_ms.setdefault(record["case_key"], record["timing"]["stats"]["median"])
    records = []
    for group in _by_implementation(request.variants, set(baseline_of.values())):
        jobs = _ImplJobs(group[0].impl, request, static_device)
        try:
            for variant in group:
                for case in request.cases:
                    if (suite.name, variant.label, case.key) in done:
                        continue
                    on_start(variant, case)
                    result, env = jobs.measure(variant, case)
                    if env is None:  # nothing ran: describe the host without starting CUDA
                        host_env = host_env or envinfo.collect("cpu")
                        env = host_env
                    record = _record(suite, variant, case, request, result, env, baseline_ms,
                                     baseline_of[case.key])
                    out.append(record)
                    records.append(record)
                    on_record(record)
        finally:
            jobs.close()
    return records


class _ImplJobs:
    """The jobs of one implementation (all its variants), sharing one worker until it crashes or hangs."""

    def __init__(self, impl: Implementation, request: RunRequest, static_device: str):
        self.impl = impl
        self.request = request
        self.static_device = static_device
        self.worker: Worker | None = None
        self.env: dict | None = None

    def measure(self, variant: Variant, case: Case) -> tuple[dict, dict | None]:
        """Returns the job's result fields and the environment it ran in (None if no worker ran)."""
        reason = skip_reason(self.impl, case, self.static_device)
        if reason:
            return {"status": "SKIP", "reason": reason}, self.env
        job = {
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
        }
        try:
            if self.worker is None:
                self.worker = Worker(self.request.kernel_dirs, self.request.device)
                self.env = self.worker.env
            result = self.worker.run(job, self.request.timeout)
        except WorkerGone as gone:
            self.close()
            return {"status": gone.status, "reason": gone.reason, "log": gone.log}, self.env
        result.pop("type", None)
        if result.pop("fatal", False):
            self.close()  # its CUDA context is unusable: the next job starts a fresh worker
        return result, self.env

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None


def _record(suite, variant: Variant, case, request, result, env, baseline_ms, baseline: str) -> dict:
    impl = variant.impl
    record = {
        "schema": results.SCHEMA,
        "created_at": results.now(),
        "suite": suite.name,
        "impl": impl.name,
        "label": variant.label,
        "params": variant.params,
        "backend": impl.backend,
        "case": case.values,
        "case_key": case.key,
        "status": result.get("status"),
        "reason": result.get("reason", ""),
        "baseline": baseline,
        "flops": suite.flops(case),
        "min_bytes": suite.min_bytes(case),
    }
    for key in ("correctness", "timing", "config", "figures", "log"):
        if key in result:
            record[key] = result[key]
    timing = result.get("timing")
    if record["status"] == "OK" and timing:
        median = timing["stats"]["median"]
        gpu = env.get("gpu") if env else None
        peaks = peaks_for(gpu["name"]) if gpu and timing["method"] != "cpu-wall-clock" else None
        dtype = suite.dtype(case)
        compute_tflops = None
        if peaks is not None:
            compute_tflops, roof_label = roofline.compute_roof(peaks, impl.unit, dtype, bool(case.values.get("tf32")))
            record["roof"] = {"gpu": peaks.key, "unit": impl.unit, "compute": roof_label,
                              "compute_tflops": compute_tflops, "hbm_tbs": peaks.hbm_tbs}
            if compute_tflops is None:  # a memory kernel: no compute ceiling at all
                compute_tflops = math.inf
        record["metrics"] = metrics.derive(median, record["flops"], record["min_bytes"], dtype, peaks,
                                           compute_tflops)
        # Without the L2 flush the inputs may come from cache: only the compute floor holds then.
        why = metrics.impossible(median, record["flops"], record["min_bytes"], dtype, peaks,
                                 memory_roof="l2-flush" in timing["method"], compute_tflops=compute_tflops)
        if why:
            record.update(status="FAIL", reason=why)
        else:
            if impl.name == baseline:
                baseline_ms.setdefault(case.key, median)
            record["speedup"] = metrics.speedup(baseline_ms.get(case.key), median)
    record["env"] = env
    record["command"] = request.command
    return record
