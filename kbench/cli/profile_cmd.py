"""`kbench profile --ncu|--nsys|--torch-profiler SUITE [case options]`: why an implementation takes its time.

    kbench profile --ncu attention --n 4096 --d 128 --batch 2 --heads 16 --impl naive,sdpa,triton-fa2
    kbench profile --ncu attention --n 4096 --compare naive triton-fa2
    kbench profile --torch-profiler attention --n 256 --impl naive

Each implementation runs in kbench's own worker (correctness check, warm-up, then ``--calls`` timed
calls, each inside its NVTX range ``kbench/SUITE/IMPL/CASE``) under the profiler, in a child process
with a timeout. Files go to ``results/profiles/NAME-IMPL.*`` (the report, the profiler's log, its CSV)
and ``results/profiles/NAME.json`` (every figure shown). Exit codes: see :mod:`kbench.profilers.common`.
The tool flag may come before or after the suite.
"""

from __future__ import annotations

import inspect
import math
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Tuple

import typer
from rich.markup import escape
from rich.table import Table

from kbench import loader
from kbench.cli.common import split_list, stderr, stdout
from kbench.cli.run_cmd import DEVICES
from kbench.cli.suite_options import SuiteGroup, add_suite_commands, option
from kbench.errors import UserError
from kbench.profilers.ncu import DEFAULT_LAUNCH_COUNT, DEFAULT_SECTIONS, DEFAULT_SET  # stdlib only: --help stays fast
from kbench.suite import Case, Suite

TOOLS = ("ncu", "nsys", "torch-profiler")
DEFAULT_CALLS = {"ncu": 1, "nsys": 10, "torch-profiler": 5}
CLOCK_CONTROLS = ("none", "base")
FAILED = ("FAIL", "CRASH", "TIMEOUT")
NO_KERNELS = "NO KERNELS"


def build() -> typer.Typer:
    profile_app = typer.Typer(
        cls=SuiteGroup,
        no_args_is_help=True,
        help="Profile a suite's implementations under a profiler: kbench profile --ncu|--nsys|--torch-profiler SUITE --OPTION VALUE ....",
    )

    @profile_app.callback()
    def tools(ctx: typer.Context,
              ncu: bool = typer.Option(False, "--ncu", help="Nsight Compute: per-kernel metrics."),
              nsys: bool = typer.Option(False, "--nsys", help="Nsight Systems: kernel and NVTX summaries."),
              torch_profiler: bool = typer.Option(False, "--torch-profiler",
                                                  help="torch.profiler: a Chrome trace and a kernel/op table "
                                                       "(works without Nsight, and on a CPU).")) -> None:
        """Profile a suite's implementations under Nsight Compute, Nsight Systems or torch.profiler."""
        ctx.obj = {"ncu": ncu, "nsys": nsys, "torch_profiler": torch_profiler}

    add_suite_commands(profile_app, _profile_case, [_profile_options], sweeps=False,  # one case per profile
                       before_cases=_choose_tool, help=lambda suite: f"Profile: {suite.description}")
    return profile_app


def _profile_options(suite: Suite) -> list[inspect.Parameter]:
    return [
        option("ncu", bool, False, "--ncu", help="Nsight Compute (also accepted before SUITE)."),
        option("nsys", bool, False, "--nsys", help="Nsight Systems (also accepted before SUITE)."),
        option("torch_profiler", bool, False, "--torch-profiler", help="torch.profiler (also before SUITE)."),
        option("impl", Optional[str], None, "--impl", help="Implementations to profile, comma-separated (default: all)."),
        option("param", Optional[List[str]], None, "--param", help="An implementation parameter NAME=VALUE (repeatable)."),
        option("compare", Optional[Tuple[str, str]], None, "--compare",
                help="Two implementations' figures side by side (profiles just those two unless --impl says more)."),
        option("calls", Optional[int], None, "--calls",
                help="Timed calls profiled per implementation (default: ncu 1, nsys 10, torch-profiler 5)."),
        option("set_name", str, DEFAULT_SET, "--set",
                help=f"ncu: a section set (`ncu --list-sets`) instead of kbench's sections ({', '.join(DEFAULT_SECTIONS)})."),
        option("metrics", Optional[str], None, "--metrics",
                help="ncu: collect exactly these metrics (comma-separated) and no sections."),
        option("kernel_name", Optional[str], None, "--kernel-name",
                help="ncu: profile only kernels matching this filter (NAME or regex:EXPR), passed to ncu as is."),
        option("launch_count", int, DEFAULT_LAUNCH_COUNT, "--launch-count",
                help="ncu: the most kernels profiled per implementation (a cap: the --calls calls are profiled whole "
                     "unless they launch more)."),
        option("clock_control", str, "none", "--clock-control",
                help="ncu: none (the GPU's own clocks, as kbench times them) or base (locked to base clocks)."),
        option("name", Optional[str], None, "--name",
                help="Name of this profile: files go to results/profiles/NAME-IMPL.* (default: SUITE-TIME)."),
        option("timeout", float, 600.0, "--timeout", help="Seconds the profiler may take per implementation."),
        option("seed", int, 0, "--seed", help="Seed of the correctness check's random inputs."),
        option("trials", int, 1, "--trials", help="Correctness trials before the profiled calls."),
        option("kernels", Optional[List[Path]], None, "--kernels",
                help="Extra folder of kernel files, or one kernel file (repeatable)."),
        option("device", str, "auto", "--device", help="auto, cuda or cpu (ncu and nsys need cuda)."),
        option("cuda_graph", bool, False, "--cuda-graph/--no-cuda-graph",
                help="Profile CUDA-graph replays of the closure."),
    ]


def _choose_tool(ctx: typer.Context, options: dict) -> None:
    """The one profiler asked for, before SUITE (the group's flags, in ctx.obj) or after it: options["tool"]."""
    before = ctx.obj or {}
    flags = {tool: bool(options.pop(key) or before.get(key))
             for tool, key in (("ncu", "ncu"), ("nsys", "nsys"), ("torch-profiler", "torch_profiler"))}
    chosen = [tool for tool, on in flags.items() if on]
    if len(chosen) != 1:
        raise UserError("choose one profiler: --ncu, --nsys or --torch-profiler"
                        + (f" (got {', '.join('--' + t for t in chosen)})" if chosen else ""))
    options["tool"] = chosen[0]


def _profile_case(suite: Suite, cases: list[Case], **options) -> None:
    if len(cases) != 1:
        raise UserError(f"kbench profile takes one case: give each case option one value "
                        f"(these options make {len(cases)} cases)")
    code = profile_suite(suite, cases[0], **options)
    if code:
        raise typer.Exit(code)


# --- the run --------------------------------------------------------------------------

def profile_suite(suite: Suite, case: Case, *, tool, impl, param, compare, calls, set_name, metrics, kernel_name,
                  launch_count, clock_control, name, timeout, seed, trials, kernels, device, cuda_graph) -> int:
    """Profile every chosen implementation on ``case``; returns the exit code."""
    from kbench import runner
    from kbench.profilers import common
    from kbench.profilers import ncu as ncu_mod
    from kbench.registry import _did_you_mean, parse_param_args, variants

    if device not in DEVICES:
        raise UserError(f"--device: unknown device {device!r} (choose from {', '.join(DEVICES)})")
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
        ncu_mod.collection_args(set_name, metrics)  # a bad --set or --metrics fails before anything runs

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
    static_device = "cuda" if gpu else "cpu"

    registry = loader.load(kernels or [])
    for path, error in registry.load_errors.items():
        stderr.print(f"[yellow]warning:[/] could not load {path}: {error}", highlight=False)
    names = split_list(impl) or None
    if compare and names is None:
        names = list(dict.fromkeys(label.split("[", 1)[0] for label in compare))
    chosen = variants(registry.select(suite.name, names), parse_param_args(param or []))
    labels = [variant.label for variant in chosen]
    for label in compare or ():
        if label not in labels:
            raise UserError(f"--compare: {label!r} is not among the profiled implementations"
                            f"{_did_you_mean(label, labels)} ({', '.join(labels)})")

    folder = common.make_folder()
    stems = {variant.label: common.output_stem(run_name, variant.label, folder) for variant in chosen}
    if len(set(stems.values())) != len(stems):
        raise UserError("two implementations' labels map to the same file name: profile them one at a time")
    context = {
        "suite": suite, "case": case, "tool": tool, "executable": executable, "calls": calls, "set_name": set_name,
        "metrics": metrics, "kernel_name": kernel_name, "launch_count": launch_count,
        "clock_control": clock_control, "timeout": timeout,
        "seed": seed, "trials": trials, "kernel_dirs": [Path(k).resolve() for k in kernels or ()],
        "device": device, "static_device": static_device, "cuda_graph": cuda_graph,
    }
    outcomes = []
    try:
        for variant in chosen:
            stderr.print(f"profiling {variant.label} ({tool}, {calls} call{'s' if calls > 1 else ''}) ...",
                         highlight=False)
            outcome = _profile_variant(variant, stems[variant.label], context)
            outcomes.append(outcome)
            _print_outcome(outcome, context)
    except KeyboardInterrupt:
        stderr.print("interrupted: the profiler and its worker were stopped", highlight=False)
        raise typer.Exit(130) from None

    if compare:
        _print_compare(outcomes, compare)
    summary_path = folder / f"{run_name}.json"
    common.write_summary(summary_path, {
        "schema": 1, "name": run_name, "tool": tool, "suite": suite.name, "case": case.values, "case_key": case.key,
        "calls": calls, "min_bytes": suite.min_bytes(case), "command": shlex.join(["kbench", *sys.argv[1:]]),
        "implementations": outcomes,
    })
    stderr.print(f"profiles: {folder}/{run_name}-*; figures: {summary_path}", highlight=False)
    statuses = {outcome["status"] for outcome in outcomes}
    if statuses & set(FAILED):
        return 1
    if NO_KERNELS in statuses:
        return 4
    return 0


def _profile_variant(variant, stem: Path, ctx: dict) -> dict:
    from kbench import nvtx
    from kbench.profilers import common
    from kbench.registry import skip_reason

    suite, case, tool = ctx["suite"], ctx["case"], ctx["tool"]
    outcome = {"label": variant.label, "impl": variant.impl.name, "params": variant.params, "tool": tool,
               "status": None, "reason": "", "files": {}}
    reason = skip_reason(variant.impl, case, ctx["static_device"])
    if reason:
        outcome.update(status="SKIP", reason=reason)
        return outcome
    range_name = nvtx.range_name(suite.name, variant.label, case.key)
    outcome["range"] = range_name
    calls = ctx["calls"]
    job = {
        "suite": suite.name, "impl": variant.impl.name, "label": variant.label, "params": variant.params,
        "case": case.values, "seed": ctx["seed"], "trials": ctx["trials"],
        # exactly `calls` timed calls, all inside the range: every profiled kernel belongs to one of them
        "stop": {"min_samples": calls, "max_samples": calls, "min_time": 0.0, "max_time": 1e9},
        "flush_l2": True, "cuda_graph": ctx["cuda_graph"],
    }
    answers = Path(f"{stem}.worker.jsonl").resolve()
    log = Path(f"{stem}.log")
    env = os.environ.copy()
    env.setdefault("PYTHONUNBUFFERED", "1")
    if tool == "torch-profiler":
        trace = Path(f"{stem}.trace.json").resolve()
        job["profile"] = {"tool": "torch-profiler", "trace": str(trace)}
        argv = common.worker_argv(job, answers, ctx["kernel_dirs"], ctx["device"])
    elif tool == "ncu":
        from kbench.profilers import ncu

        worker = common.worker_argv(job, answers, ctx["kernel_dirs"], ctx["device"])
        argv = ncu.profile_argv(ctx["executable"], stem, range_name, worker, set_name=ctx["set_name"],
                                metrics=ctx["metrics"], kernel_name=ctx["kernel_name"],
                                launch_count=ctx["launch_count"], clock_control=ctx["clock_control"])
    else:
        from kbench.profilers import nsys

        worker = common.worker_argv(job, answers, ctx["kernel_dirs"], ctx["device"])
        argv = nsys.profile_argv(ctx["executable"], stem, range_name, worker)
        env.update(nsys.ENV)
    outcome["files"]["log"] = str(log)
    child = common.run_child(argv, log, answers, ctx["timeout"], tool, env)
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
            _read_ncu(outcome, stem, child, ctx)
        elif tool == "nsys":
            _read_nsys(outcome, stem, child, ctx)
        else:
            _read_torch(outcome, record, ctx)
    except common.NoKernels as exc:
        outcome.update(status=NO_KERNELS, reason=str(exc))
    return outcome


def _no_kernels(tool: str, outcome: dict, ctx: dict, log) -> str:
    why = f"{tool} captured no kernels inside {outcome['range']}"
    if outcome.get("nvtx") is None and tool != "torch-profiler":
        why += ("; the worker emitted no NVTX ranges (neither the nvtx package nor a CUDA build of torch "
                "was importable there)")
    elif ctx.get("kernel_name"):
        why += f"; does --kernel-name {ctx['kernel_name']!r} match any of its kernels?"
    return f"{why} (log: {log})"


def _run_reader(argv: list[str], ctx: dict, what: str) -> subprocess.CompletedProcess:
    from kbench.profilers import common

    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=ctx["timeout"],
                                stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise common.ProfilerTimeout(f"{what} did not finish within {ctx['timeout']:g} s (killed)") from None
    except OSError as exc:
        raise common.ProfileError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
    if result.returncode != 0:
        lines = [ln for ln in (result.stderr + result.stdout).splitlines() if ln.strip()]
        raise common.ProfileError(f"{what} failed (exit {result.returncode}): {lines[-1] if lines else 'no output'}")
    return result


def _read_ncu(outcome: dict, stem: Path, child, ctx: dict) -> None:
    from kbench.profilers import common, ncu

    report = Path(f"{stem}.ncu-rep")
    if not report.exists():
        if child.returncode != 0 and "No kernels were profiled" not in child.log:
            raise common.ProfileError(f"ncu exited with code {child.returncode} and wrote no report: "
                                      f"{child.last_error()} (log: {child.log_path})")
        raise common.NoKernels(_no_kernels("ncu", outcome, ctx, child.log_path))
    outcome["files"]["report"] = str(report)
    result = _run_reader(ncu.import_argv(ctx["executable"], report), ctx, f"ncu --import {report}")
    raw = Path(f"{stem}.raw.csv")
    raw.write_text(result.stdout, encoding="utf-8")
    outcome["files"]["csv"] = str(raw)
    data = ncu.summarize(result.stdout, ctx["calls"], ctx["suite"].min_bytes(ctx["case"]))
    if not data["launches"]:
        raise common.NoKernels(_no_kernels("ncu", outcome, ctx, child.log_path))
    outcome.update(kernels=data["kernels"], launches=data["launches"], per_call=data["per_call"])
    if len(data["launches"]) >= ctx["launch_count"]:
        outcome["warning"] = (f"{len(data['launches'])} kernels: capped by --launch-count {ctx['launch_count']}, "
                              "so the per-call figures may miss some; raise it")


def _read_nsys(outcome: dict, stem: Path, child, ctx: dict) -> None:
    from kbench.profilers import common, nsys

    report = Path(f"{stem}.nsys-rep")
    if not report.exists():
        if child.returncode != 0:
            raise common.ProfileError(f"nsys exited with code {child.returncode} and wrote no report: "
                                      f"{child.last_error()} (log: {child.log_path})")
        raise common.NoKernels(_no_kernels("nsys", outcome, ctx, child.log_path))
    outcome["files"]["report"] = str(report)
    _run_reader(nsys.stats_argv(ctx["executable"], report, stem), ctx, f"nsys stats {report}")
    data = nsys.summarize(stem, outcome["range"], ctx["calls"])
    outcome["files"]["stats"] = [str(nsys.stats_file(stem, r)) for r in nsys.REPORTS
                                 if nsys.stats_file(stem, r).exists()]
    if not data["kernels"]:
        raise common.NoKernels(_no_kernels("nsys", outcome, ctx, child.log_path))
    outcome.update(kernels=data["kernels"], per_call=data["per_call"], source=data["source"])


def _read_torch(outcome: dict, record: dict, ctx: dict) -> None:
    from kbench.profilers import common

    profile = record.get("profile") or {}
    outcome["files"]["trace"] = profile.get("trace")
    calls = profile.get("calls") or 0
    kernels, ops = profile.get("kernels") or [], profile.get("ops") or []
    gpu = ctx["static_device"] == "cuda"  # a GPU run shows GPU time or nothing, never the CPU's in its place
    rows = kernels if gpu else ops
    if not calls or not rows:
        raise common.NoKernels(_no_kernels("torch-profiler", outcome, ctx, outcome["files"].get("log")))
    total_us = sum(row["total_us"] for row in kernels) if gpu else profile.get("scope_us", 0.0)
    outcome.update(kernels=kernels, ops=ops, rows=("kernels" if gpu else "ops"),
                   per_call={"calls": calls, "time_us": total_us / calls,
                             "kernels_per_call": sum(row["count"] for row in rows) / calls})


# --- the tables ---------------------------------------------------------------------------

def _abbrev(name: str, width: int = 60) -> str:
    """A long kernel name shortened in the middle (the JSON summary and the CSV keep it whole)."""
    return name if len(name) <= width else f"{name[: width - 20]}...{name[-17:]}"


def _f(value, digits: int = 1, scale: float = 1.0) -> str:
    return "-" if value is None else f"{value * scale:,.{digits}f}"


def _print_outcome(outcome: dict, ctx: dict) -> None:
    label = escape(outcome["label"])
    status = outcome["status"]
    if status != "OK":
        color = "yellow" if status == "SKIP" else "red"
        stdout.print(f"[{color}]{label}: {status}[/] {escape(outcome.get('reason') or '')}", highlight=False)
        return
    tool = outcome["tool"]
    if tool == "ncu":
        _print_ncu(outcome, ctx)
    elif tool == "nsys":
        _print_nsys(outcome, ctx)
    else:
        _print_torch(outcome, ctx)
    if outcome.get("warning"):
        stdout.print(f"[yellow]warning:[/] {escape(outcome['warning'])}", highlight=False)


def _print_ncu(outcome: dict, ctx: dict) -> None:
    per = outcome["per_call"]
    table = Table(title=f"{escape(outcome['label'])}: Nsight Compute, {escape(ctx['case'].key)} "
                        f"({per['calls']} call{'s' if per['calls'] > 1 else ''} profiled; per launch: time, SM and "
                        "DRAM throughput and achieved occupancy in % of peak, registers per thread, shared memory "
                        "per block, tensor pipe %, L2 hit rate, DRAM bytes)", title_justify="left")
    columns = ("kernel", "launches", "time us", "SM %", "DRAM %", "occup. %", "regs", "smem KB", "tensor %",
               "L2 hit %", "read MB", "write MB")
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i == 0 else "right", overflow="fold", min_width=20 if i == 0 else None)
    for k in outcome["kernels"]:
        table.add_row(escape(_abbrev(k["name"])), str(k["launches"]), _f(k["duration"], 1, 1e6), _f(k["sm_pct"]),
                      _f(k["dram_pct"]), _f(k["occupancy"]), _f(k["registers"], 0), _f(k["smem"], 1, 1e-3),
                      _f(k["tensor_pct"]), _f(k["l2_hit"]), _f(k["dram_read"], 1, 1e-6),
                      _f(k["dram_write"], 1, 1e-6))
    stdout.print(table)
    line = (f"per call: {_f(per['time_us'])} us in {per['kernels_per_call']:g} kernel"
            f"{'s' if per['kernels_per_call'] != 1 else ''}")
    if per.get("dram_bytes") is not None:
        line += (f"; DRAM {_f(per['dram_read'], 1, 1e-6)} MB read + {_f(per['dram_write'], 1, 1e-6)} MB written "
                 f"= {_f(per['dram_bytes'], 1, 1e-6)} MB")
        if per.get("traffic_ratio") is not None:
            line += (f", [bold]{per['traffic_ratio']:.2f}x[/] the fewest bytes "
                     f"({_f(per['min_bytes'], 1, 1e-6)} MB: inputs read once, outputs written once)")
    stdout.print(line, highlight=False)
    for k in outcome["kernels"]:
        if k.get("stalls"):
            stdout.print(f"{escape(_abbrev(k['name']))}: top stalls, cycles per issued instruction: "
                         + ", ".join(f"{reason} {value:.1f}" for reason, value in k["stalls"]), highlight=False)


def _print_nsys(outcome: dict, ctx: dict) -> None:
    per = outcome["per_call"]
    calls = max(1, per["calls"])
    scope = "inside kbench's range" if outcome.get("source") == "nvtx_kern_sum" else "whole capture"
    table = Table(title=f"{escape(outcome['label'])}: Nsight Systems, {escape(ctx['case'].key)} "
                        f"({per['calls']} calls, kernels {scope})", title_justify="left")
    for i, column in enumerate(("kernel", "launches/call", "time/call (us)", "avg (us)", "med (us)", "min (us)",
                                "max (us)")):
        table.add_column(column, justify="left" if i == 0 else "right", overflow="fold", min_width=20 if i == 0 else None)
    for k in outcome["kernels"]:
        table.add_row(escape(_abbrev(k["name"])), f"{k['launches'] / calls:g}",
                      _f(k["total"] / calls if k["total"] is not None else None, 1, 1e6), _f(k["avg"], 1, 1e6),
                      _f(k["med"], 1, 1e6), _f(k["min"], 1, 1e6), _f(k["max"], 1, 1e6))
    stdout.print(table)
    line = f"per call: {_f(per['time_us'])} us of kernels"
    if per.get("range_med_us") is not None:
        line += f"; the range's median on the CPU side {_f(per['range_med_us'])} us"
    stdout.print(line, highlight=False)


def _print_torch(outcome: dict, ctx: dict) -> None:
    per = outcome["per_call"]
    calls = max(1, per["calls"])
    gpu = outcome["rows"] == "kernels"
    what = "CUDA kernels (device time)" if gpu else "operators (own CPU time; CPU wall-clock is not GPU performance)"
    table = Table(title=f"{escape(outcome['label'])}: torch.profiler, {escape(ctx['case'].key)} ({per['calls']} "
                        f"calls; {what})", title_justify="left")
    for i, column in enumerate(("kernel" if gpu else "operator", "count/call", "time/call (us)", "mean (us)",
                                "total (ms)")):
        table.add_column(column, justify="left" if i == 0 else "right", overflow="fold", min_width=20 if i == 0 else None)
    for row in outcome[outcome["rows"]]:
        table.add_row(escape(_abbrev(row["name"])), f"{row['count'] / calls:g}", _f(row["total_us"] / calls),
                      _f(row["total_us"] / row["count"] if row["count"] else None), _f(row["total_us"], 3, 1e-3))
    stdout.print(table)
    stdout.print(f"per call: {_f(per['time_us'])} us; trace: {escape(str(outcome['files'].get('trace')))} "
                 "(chrome://tracing or https://ui.perfetto.dev)", highlight=False)


COMPARE_ROWS = (
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


def compare_rows(a: dict, b: dict) -> list[tuple[str, str, str, str]]:
    """(figure, A, B, B/A) for every per-call figure either side has."""
    rows = []
    for key, title, digits, scale in COMPARE_ROWS:
        va, vb = a.get(key), b.get(key)
        if va is None and vb is None:
            continue
        ratio = f"{vb / va:.2f}x" if va and vb is not None else "-"
        rows.append((title, _f(va, digits, scale), _f(vb, digits, scale), ratio))
    return rows


def _print_compare(outcomes: list[dict], compare) -> None:
    by_label = {o["label"]: o for o in outcomes}
    a, b = (by_label.get(label) for label in compare)
    missing = [o["label"] for o in (a, b) if o is not None and "per_call" not in o]
    if a is None or b is None or missing:
        stdout.print(f"[yellow]--compare: no figures for {', '.join(missing) or 'both'}[/]", highlight=False)
        return
    table = Table(title=f"{escape(compare[0])} vs {escape(compare[1])}", title_justify="left")
    for i, column in enumerate(("per call", compare[0], compare[1], f"{compare[1]} / {compare[0]}")):
        table.add_column(escape(column), justify="left" if i == 0 else "right")
    for row in compare_rows(a["per_call"], b["per_call"]):
        table.add_row(*(escape(cell) for cell in row))
    stdout.print(table)
