"""One `kbench profile` run: each chosen implementation of one case under ncu, nsys or torch.profiler.

The steps, in the order the CLI (:mod:`kbench.cli.profile_cmd`) calls them and prints between them:

- :func:`settings`: the options checked (a usage error fails here, before anything runs), the
  profiler found, the run's name and device;
- :func:`plan`: the implementations to profile and the files each one's output goes to;
- :func:`profile_variant`: one implementation's worker under the profiler, its answer and the
  profiler's report read back into an *outcome*: a plain dict that goes into the summary as is;
- :func:`summary` and :func:`exit_code`: the run's ``results/profiles/NAME.json`` and its exit code;
- :func:`compare_rows`: two outcomes' per-call figures side by side (``--compare``).

Only the standard library at import time: ``kbench profile --help`` stays fast.
"""

from __future__ import annotations

import math
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from kbench.errors import UserError
from kbench.profilers import common
from kbench.profilers.ncu import DEFAULT_LAUNCH_COUNT, DEFAULT_SET

TOOLS = ("ncu", "nsys", "torch-profiler")
DEFAULT_CALLS = {"ncu": 1, "nsys": 10, "torch-profiler": 5}
CLOCK_CONTROLS = ("none", "base")
FAILED = ("FAIL", "CRASH", "TIMEOUT")
NO_KERNELS = "NO KERNELS"


@dataclass(frozen=True)
class Settings:
    """Everything one implementation's profile needs besides the implementation: checked options,
    the profiler's executable (None for torch.profiler) and the device the worker will use."""

    suite: object  # kbench.suite.Suite
    case: object  # kbench.suite.Case
    tool: str
    run_name: str
    executable: str | None
    calls: int
    set_name: str
    metrics: str | None
    kernel_name: str | None
    launch_count: int
    clock_control: str
    timeout: float
    seed: int
    trials: int
    kernel_dirs: tuple[Path, ...]
    device: str  # as asked: auto, cuda or cpu
    static_device: str  # what the worker will have: cuda or cpu
    cuda_graph: bool


@dataclass(frozen=True)
class Plan:
    """The implementations to profile, in order, and the file stem of each (results/profiles/NAME-LABEL)."""

    variants: list
    stems: dict[str, Path]
    folder: Path


def settings(suite, case, *, tool: str, calls: int | None, set_name: str, metrics: str | None,
             kernel_name: str | None, launch_count: int, clock_control: str, name: str | None, timeout: float,
             seed: int, trials: int, kernels, device: str, cuda_graph: bool) -> Settings:
    """The options checked, in the order their errors are reported; UserError (or a ProfileError with its
    own exit code: an unsafe --name, a profiler not found) on the first bad one."""
    from kbench import runner
    from kbench.profilers import ncu

    calls = DEFAULT_CALLS[tool] if calls is None else calls
    if not math.isfinite(timeout):  # nan passes the comparison below; inf never ends the wait
        raise UserError(f"--timeout must be a finite number (got {timeout})")
    if calls < 1 or launch_count < 1 or trials < 1 or timeout <= 0:
        raise UserError("--calls, --launch-count, --trials and --timeout must be positive")
    if tool != "ncu" and (set_name != DEFAULT_SET or metrics or kernel_name or launch_count != DEFAULT_LAUNCH_COUNT
                          or clock_control != "none"):
        raise UserError("--set, --metrics, --kernel-name, --launch-count and --clock-control are Nsight Compute's: "
                        "use them with --ncu")
    if clock_control not in CLOCK_CONTROLS:
        raise UserError(f"--clock-control: {clock_control!r} is not one of {', '.join(CLOCK_CONTROLS)}")
    run_name = common.profile_name(name, suite.name)
    if tool == "ncu":
        ncu.collection_args(set_name, metrics)  # a bad --set or --metrics fails before anything runs

    executable = None
    if tool == "ncu":
        executable = common.find_tool("ncu", "Nsight Compute", "; install the CUDA toolkit or put its bin/ on PATH")
    elif tool == "nsys":
        executable = common.find_tool(
            "nsys", "Nsight Systems",
            "; --torch-profiler records the same ranges with torch.profiler (a Chrome trace and the kernel table)")
    gpu = device != "cpu" and runner.host_has_gpu()
    if device == "cuda" and not gpu:
        raise UserError("--device cuda: no CUDA device is visible on this machine")
    if tool != "torch-profiler":
        if device == "cpu":
            raise UserError(f"--device cpu: {tool} profiles CUDA kernels (--torch-profiler works on the CPU)")
        if not gpu:
            raise UserError(f"{tool} profiles CUDA kernels and no CUDA device is visible here "
                            "(--torch-profiler works on the CPU)")
    return Settings(
        suite=suite, case=case, tool=tool, run_name=run_name, executable=executable, calls=calls, set_name=set_name,
        metrics=metrics, kernel_name=kernel_name, launch_count=launch_count, clock_control=clock_control,
        timeout=timeout, seed=seed, trials=trials, kernel_dirs=tuple(Path(k).resolve() for k in kernels or ()),
        device=device, static_device="cuda" if gpu else "cpu", cuda_graph=cuda_graph)


def plan(settings: Settings, registry, names: list[str] | None, param: list[str] | None,
         compare: tuple[str, str] | None) -> Plan:
    """The implementations ``names`` (None: all; with ``compare`` and no names, the two compared) of the
    suite in ``registry``, each with its parameters, and where each one's files go."""
    from kbench.registry import _did_you_mean, parse_param_args, variants

    if compare and names is None:
        names = list(dict.fromkeys(label.split("[", 1)[0] for label in compare))
    chosen = variants(registry.select(settings.suite.name, names), parse_param_args(param or []))
    labels = [variant.label for variant in chosen]
    for label in compare or ():
        if label not in labels:
            raise UserError(f"--compare: {label!r} is not among the profiled implementations"
                            f"{_did_you_mean(label, labels)} ({', '.join(labels)})")
    folder = common.make_folder()
    stems = {variant.label: common.output_stem(settings.run_name, variant.label, folder) for variant in chosen}
    if len(set(stems.values())) != len(stems):
        raise UserError("two implementations' labels map to the same file name: profile them one at a time")
    return Plan(chosen, stems, folder)


# --- one implementation ----------------------------------------------------------------

def profile_variant(variant, stem: Path, settings: Settings) -> dict:
    """Run ``variant``'s worker under the profiler and read back what it left: the outcome (status,
    reason, files and, when it ran, the kernels and per-call figures). A profiler that is not
    permitted or runs past the timeout raises its ProfileError; a crash or no kernels is an outcome."""
    from kbench import nvtx
    from kbench.registry import skip_reason

    suite, case, tool = settings.suite, settings.case, settings.tool
    outcome = {"label": variant.label, "impl": variant.impl.name, "params": variant.params, "tool": tool,
               "status": None, "reason": "", "files": {}}
    reason = skip_reason(variant.impl, case, settings.static_device)
    if reason:
        outcome.update(status="SKIP", reason=reason)
        return outcome
    range_name = nvtx.range_name(suite.name, variant.label, case.key)
    outcome["range"] = range_name
    calls = settings.calls
    job = {
        "suite": suite.name, "impl": variant.impl.name, "label": variant.label, "params": variant.params,
        "case": case.values, "seed": settings.seed, "trials": settings.trials,
        # exactly `calls` timed calls, all inside the range: every profiled kernel belongs to one of them
        "stop": {"min_samples": calls, "max_samples": calls, "min_time": 0.0, "max_time": 1e9},
        # no automatic graph replays after the eager calls: they would add kernels to the profiled range
        "flush_l2": True, "cuda_graph": settings.cuda_graph, "auto_graph": False,
    }
    answers = Path(f"{stem}.worker.jsonl").resolve()
    log = Path(f"{stem}.log")
    env = os.environ.copy()
    env.setdefault("PYTHONUNBUFFERED", "1")
    if tool == "torch-profiler":
        trace = Path(f"{stem}.trace.json").resolve()
        job["profile"] = {"tool": "torch-profiler", "trace": str(trace)}
        argv = common.worker_argv(job, answers, settings.kernel_dirs, settings.device)
    elif tool == "ncu":
        from kbench.profilers import ncu

        worker = common.worker_argv(job, answers, settings.kernel_dirs, settings.device)
        argv = ncu.profile_argv(settings.executable, stem, range_name, worker, set_name=settings.set_name,
                                metrics=settings.metrics, kernel_name=settings.kernel_name,
                                launch_count=settings.launch_count, clock_control=settings.clock_control)
    else:
        from kbench.profilers import nsys

        worker = common.worker_argv(job, answers, settings.kernel_dirs, settings.device)
        argv = nsys.profile_argv(settings.executable, stem, range_name, worker)
        env.update(nsys.ENV)
    outcome["files"]["log"] = str(log)
    child = common.run_child(argv, log, answers, settings.timeout, tool, env)
    if tool != "torch-profiler":
        common.check_permission(child, tool)
    record = child.result
    if record is None:
        what = tool if tool != "torch-profiler" else "the worker"
        outcome.update(status="CRASH", reason=f"{what} exited with code {child.returncode} before the worker "
                                              f"answered: {child.last_error()} (log: {log})")
        return outcome
    outcome.update(status=record.get("status"), reason=record.get("reason", ""), nvtx=record.get("nvtx"))
    if record.get("config"):  # what this process ran (an autotuner may choose differently from a kbench run's)
        outcome["config"] = record["config"]
    if record.get("status") != "OK":
        return outcome
    try:
        if tool == "ncu":
            _read_ncu(outcome, stem, child, settings)
        elif tool == "nsys":
            _read_nsys(outcome, stem, child, settings)
        else:
            _read_torch(outcome, record, settings)
    except common.NoKernels as exc:
        outcome.update(status=NO_KERNELS, reason=str(exc))
    return outcome


def _no_kernels(tool: str, outcome: dict, settings: Settings, log) -> str:
    why = f"{tool} captured no kernels inside {outcome['range']}"
    if outcome.get("nvtx") is None and tool != "torch-profiler":
        why += ("; the worker emitted no NVTX ranges (neither the nvtx package nor a CUDA build of torch "
                "was importable there)")
    elif settings.kernel_name:
        why += f"; does --kernel-name {settings.kernel_name!r} match any of its kernels?"
    return f"{why} (log: {log})"


def _run_reader(argv: list[str], timeout: float, what: str) -> subprocess.CompletedProcess:
    """Run the profiler's own reader of its report (ncu --import, nsys stats); ProfileError if it fails."""
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise common.ProfilerTimeout(f"{what} did not finish within {timeout:g} s (killed)") from None
    except OSError as exc:
        raise common.ProfileError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
    if result.returncode != 0:
        lines = [ln for ln in (result.stderr + result.stdout).splitlines() if ln.strip()]
        raise common.ProfileError(f"{what} failed (exit {result.returncode}): {lines[-1] if lines else 'no output'}")
    return result


def _read_ncu(outcome: dict, stem: Path, child, settings: Settings) -> None:
    from kbench.profilers import ncu

    report = Path(f"{stem}.ncu-rep")
    if not report.exists():
        if child.returncode != 0 and "No kernels were profiled" not in child.log:
            raise common.ProfileError(f"ncu exited with code {child.returncode} and wrote no report: "
                                      f"{child.last_error()} (log: {child.log_path})")
        raise common.NoKernels(_no_kernels("ncu", outcome, settings, child.log_path))
    outcome["files"]["report"] = str(report)
    result = _run_reader(ncu.import_argv(settings.executable, report), settings.timeout, f"ncu --import {report}")
    raw = Path(f"{stem}.raw.csv")
    raw.write_text(result.stdout, encoding="utf-8")
    outcome["files"]["csv"] = str(raw)
    data = ncu.summarize(result.stdout, settings.calls, settings.suite.min_bytes(settings.case),
                         tuple(ncu.metric_list(settings.metrics)))
    if not data["launches"]:
        raise common.NoKernels(_no_kernels("ncu", outcome, settings, child.log_path))
    outcome.update(kernels=data["kernels"], launches=data["launches"], per_call=data["per_call"])
    _read_ncu_sources(outcome, report, stem, settings)
    if len(data["launches"]) >= settings.launch_count:
        outcome["warning"] = (f"{len(data['launches'])} kernels: capped by --launch-count {settings.launch_count}, "
                              "so the per-call figures may miss some; raise it")


# Kernels of one implementation whose instructions are read (the longest first): the page of each costs
# one more `ncu --import`.
SOURCE_KERNELS = 4


def _read_ncu_sources(outcome: dict, report: Path, stem: Path, settings: Settings) -> None:
    """Where the collection sampled warp states (its raw page has a sample count), each kernel's hottest
    instructions from the report's source page (ncu.hot_lines), kept as ``hot_lines`` and the page as a
    file beside the report. A page ncu cannot print leaves that kernel without them."""
    from kbench.profilers import ncu

    sampled = [k for k in outcome["kernels"] if k.get("samples")]
    for kernel in sorted(sampled, key=lambda k: -(k.get("duration") or 0.0))[:SOURCE_KERNELS]:
        try:
            result = _run_reader(ncu.source_argv(settings.executable, report, kernel["name"]), settings.timeout,
                                 f"ncu --import {report} --page source")
        except common.ProfileError:
            continue
        lines = ncu.hot_lines(ncu.parse_source(result.stdout, kernel["name"]), kernel["samples"])
        if lines:
            page = Path(f"{stem}.{common.safe_label(kernel['name'])}.source.csv")
            page.write_text(result.stdout, encoding="utf-8")
            outcome["files"].setdefault("source", []).append(str(page))
            kernel["hot_lines"] = lines


def _read_nsys(outcome: dict, stem: Path, child, settings: Settings) -> None:
    from kbench.profilers import nsys

    report = Path(f"{stem}.nsys-rep")
    if not report.exists():
        if child.returncode != 0:
            raise common.ProfileError(f"nsys exited with code {child.returncode} and wrote no report: "
                                      f"{child.last_error()} (log: {child.log_path})")
        raise common.NoKernels(_no_kernels("nsys", outcome, settings, child.log_path))
    outcome["files"]["report"] = str(report)
    _run_reader(nsys.stats_argv(settings.executable, report, stem), settings.timeout, f"nsys stats {report}")
    data = nsys.summarize(stem, outcome["range"], settings.calls)
    outcome["files"]["stats"] = [str(nsys.stats_file(stem, r)) for r in nsys.REPORTS
                                 if nsys.stats_file(stem, r).exists()]
    if not data["kernels"]:
        raise common.NoKernels(_no_kernels("nsys", outcome, settings, child.log_path))
    outcome.update(kernels=data["kernels"], per_call=data["per_call"], source=data["source"])


def _read_torch(outcome: dict, record: dict, settings: Settings) -> None:
    profile = record.get("profile") or {}
    outcome["files"]["trace"] = profile.get("trace")
    calls = profile.get("calls") or 0
    kernels, ops = profile.get("kernels") or [], profile.get("ops") or []
    gpu = settings.static_device == "cuda"  # a GPU run shows GPU time or nothing, never the CPU's in its place
    rows = kernels if gpu else ops
    if not calls or not rows:
        raise common.NoKernels(_no_kernels("torch-profiler", outcome, settings, outcome["files"].get("log")))
    total_us = sum(row["total_us"] for row in kernels) if gpu else profile.get("scope_us", 0.0)
    outcome.update(kernels=kernels, ops=ops, rows=("kernels" if gpu else "ops"),
                   per_call={"calls": calls, "time_us": total_us / calls,
                             "kernels_per_call": sum(row["count"] for row in rows) / calls})


# --- the whole run ------------------------------------------------------------------------

def summary(settings: Settings, outcomes: list[dict], command: str) -> dict:
    """What results/profiles/NAME.json holds: the case, the command line and every outcome."""
    suite, case = settings.suite, settings.case
    return {
        "schema": 1, "name": settings.run_name, "tool": settings.tool, "suite": suite.name, "case": case.values,
        "case_key": case.key, "calls": settings.calls, "min_bytes": suite.min_bytes(case), "command": command,
        "implementations": outcomes,
    }


def exit_code(outcomes: list[dict]) -> int:
    """1 when an implementation failed or crashed, else 4 when one captured no kernels, else 0."""
    statuses = {outcome["status"] for outcome in outcomes}
    if statuses & set(FAILED):
        return 1
    if NO_KERNELS in statuses:
        return 4
    return 0


# --- two implementations side by side ---------------------------------------------------------

class Compared(NamedTuple):
    """One figure of two implementations: ``a`` and ``b`` in the unit of ``title`` (None: not measured),
    ``ratio`` b / a (None when a is zero or missing, or b is missing), ``digits`` to show."""

    title: str
    a: float | None
    b: float | None
    ratio: float | None
    digits: int


COMPARE_ROWS = (  # key in per_call, title, digits shown, scale to the title's unit
    ("time_us", "time per call (us)", 1, 1.0),
    ("kernels_per_call", "kernels per call", 0, 1.0),
    ("dram_read", "DRAM read per call (MB)", 1, 1e-6),
    ("dram_write", "DRAM written per call (MB)", 1, 1e-6),
    ("dram_bytes", "DRAM bytes per call (MB)", 1, 1e-6),
    ("traffic_ratio", "bytes moved / fewest bytes", 2, 1.0),
    ("sm_pct", "SM throughput % (time-weighted)", 1, 1.0),
    ("dram_pct", "DRAM throughput % (time-weighted)", 1, 1.0),
    ("occupancy", "achieved occupancy % (time-weighted)", 1, 1.0),
    ("tensor_pct", "tensor pipe % (time-weighted)", 1, 1.0),
    ("l2_hit", "L2 hit rate % (time-weighted)", 1, 1.0),
    ("registers", "registers per thread (max)", 0, 1.0),
    ("smem", "shared memory per block (max, KB)", 1, 1e-3),
    ("range_med_us", "range on the CPU side, median (us)", 1, 1.0),
)


def compare_rows(a: dict, b: dict) -> list[Compared]:
    """Every per-call figure either of two outcomes' ``per_call`` has, A's and B's side by side."""
    rows = []
    for key, title, digits, scale in COMPARE_ROWS:
        va, vb = a.get(key), b.get(key)
        if va is None and vb is None:
            continue
        rows.append(Compared(title, None if va is None else va * scale, None if vb is None else vb * scale,
                             vb / va if va and vb is not None else None, digits))
    return rows


def compare_outcomes(outcomes: list[dict], labels: tuple[str, str]) -> tuple[list[Compared] | None, list[str]]:
    """``--compare A B``: (the rows, []) or, where A or B has no figures, (None, the labels without them:
    empty when one of the two was not profiled at all)."""
    by_label = {o["label"]: o for o in outcomes}
    a, b = (by_label.get(label) for label in labels)
    missing = [o["label"] for o in (a, b) if o is not None and "per_call" not in o]
    if a is None or b is None or missing:
        return None, missing
    return compare_rows(a["per_call"], b["per_call"]), []
