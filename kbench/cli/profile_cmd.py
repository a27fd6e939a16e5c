"""`kbench profile --ncu|--nsys|--torch-profiler SUITE [case options]`: why an implementation takes its time.

    kbench profile --ncu attention --n 4096 --d 128 --batch 2 --heads 16 --impl naive,sdpa,triton-fa2
    kbench profile --ncu attention --n 4096 --compare naive triton-fa2
    kbench profile --torch-profiler attention --n 256 --impl naive
    kbench profile --ncu attention --n 4096 --impl naive --against results/RUN.jsonl
    kbench profile agreement results/profiles/NAME.json results/RUN.jsonl [--tolerance 0.05] [--min-us 50]

Each implementation runs in kbench's own worker (correctness check, warm-up, then ``--calls`` timed
calls, each inside its NVTX range ``kbench/SUITE/IMPL/CASE``) under the profiler, in a child process
with a timeout. Files go to ``results/profiles/NAME-IMPL.*`` (the report, the profiler's log, its CSV)
and ``results/profiles/NAME.json`` (every figure shown). Exit codes: see :mod:`kbench.profilers.common`.
The tool flag may come before or after the suite. The work is :mod:`kbench.profilers.capture`'s (and
:mod:`kbench.profilers.agreement`'s for ``--against`` and ``agreement``); this module parses and prints.
"""

from __future__ import annotations

import inspect
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional, Tuple

import typer
from rich.markup import escape
from rich.table import Table

from kbench.cli.common import split_list, stderr, stdout, user_errors
from kbench.cli.run_cmd import DEVICES
from kbench.cli.suite_options import SuiteGroup, add_suite_commands, option
from kbench.errors import UserError
from kbench.profilers.agreement import MIN_US, TOLERANCE  # stdlib only: --help stays fast

if TYPE_CHECKING:  # the suites load when a subcommand is first asked for, not for --help
    from kbench.suite import Case, Suite


def build() -> typer.Typer:
    profile_app = typer.Typer(
        cls=SuiteGroup.of(_add_commands),
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

    return profile_app


def _add_commands(profile_app: typer.Typer) -> None:
    add_suite_commands(profile_app, _profile_case, [_profile_options], sweeps=False,  # one case per profile
                       before_cases=_choose_tool, help=lambda suite: f"Profile: {suite.description}")
    profile_app.command("agreement")(agreement_command)


def _profile_options(suite: Suite) -> list[inspect.Parameter]:
    from kbench.profilers.ncu import DEFAULT_LAUNCH_COUNT, DEFAULT_SECTIONS, DEFAULT_SET

    return [
        option("ncu", bool, False, "--ncu", help="Nsight Compute (also accepted before SUITE)."),
        option("nsys", bool, False, "--nsys", help="Nsight Systems (also accepted before SUITE)."),
        option("torch_profiler", bool, False, "--torch-profiler", help="torch.profiler (also before SUITE)."),
        option("impl", Optional[str], None, "--impl", help="Implementations to profile, comma-separated (default: all)."),
        option("param", Optional[List[str]], None, "--param", help="An implementation parameter NAME=VALUE (repeatable; default: each implementation's own values)."),
        option("compare", Optional[Tuple[str, str]], None, "--compare",
                help="Two implementations' figures side by side (profiles just those two unless --impl says more; "
                     "default: each implementation's figures alone)."),
        option("calls", Optional[int], None, "--calls",
                help="Timed calls profiled per implementation (default: ncu 1, nsys 10, torch-profiler 5)."),
        option("set_name", str, DEFAULT_SET, "--set",
                help=f"ncu: a section set (`ncu --list-sets`) instead of kbench's sections ({', '.join(DEFAULT_SECTIONS)})."),
        option("metrics", Optional[str], None, "--metrics",
                help="ncu: collect exactly these metrics (comma-separated) and no sections (default: --set's sections)."),
        option("kernel_name", Optional[str], None, "--kernel-name",
                help="ncu: profile only kernels matching this filter (NAME or regex:EXPR), passed to ncu as is "
                     "(default: every kernel)."),
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
                help="Extra folder of kernel files, or one kernel file (repeatable), besides the built-in kernels "
                     "and $KBENCH_KERNELS's (default: those only)."),
        option("device", str, "auto", "--device", help="auto, cuda or cpu (ncu and nsys need cuda)."),
        option("cuda_graph", bool, False, "--cuda-graph/--no-cuda-graph",
                help="Profile CUDA-graph replays of the closure."),
        option("against", Optional[Path], None, "--against",
                help="A kbench run's results file of this case: then check that the profiler's time per call "
                     "agrees with its event medians (5 %; see kbench profile agreement; default: no check)."),
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
                  launch_count, clock_control, name, timeout, seed, trials, kernels, device, cuda_graph,
                  against=None) -> int:
    """Profile every chosen implementation on ``case`` (kbench.profilers.capture) and print each; returns the
    exit code."""
    from kbench import loader
    from kbench.profilers import agreement, capture, common

    if device not in DEVICES:
        raise UserError(f"--device: unknown device {device!r} (choose from {', '.join(DEVICES)})")
    settings = capture.settings(suite, case, tool=tool, calls=calls, set_name=set_name, metrics=metrics,
                                kernel_name=kernel_name, launch_count=launch_count, clock_control=clock_control,
                                name=name, timeout=timeout, seed=seed, trials=trials, kernels=kernels, device=device,
                                cuda_graph=cuda_graph)
    run_records = None
    if against is not None:  # read before profiling: a wrong file fails now, not after the profiler ran
        run_records = agreement.read_run(against)
        agreement.check_case(run_records, case.key, against)

    registry = loader.load(kernels or [])
    for path, error in registry.load_errors.items():
        stderr.print(f"[yellow]warning:[/] could not load {path}: {error}", highlight=False)
    plan = capture.plan(settings, registry, split_list(impl) or None, param, compare)
    calls = settings.calls
    outcomes = []
    try:
        for variant in plan.variants:
            stderr.print(f"profiling {variant.label} ({tool}, {calls} call{'s' if calls > 1 else ''}) ...",
                         highlight=False)
            outcome = capture.profile_variant(variant, plan.stems[variant.label], settings)
            outcomes.append(outcome)
            _print_outcome(outcome, case.key)
    except KeyboardInterrupt:
        stderr.print("interrupted: the profiler and its worker were stopped", highlight=False)
        raise typer.Exit(130) from None

    if compare:
        _print_compare(outcomes, compare)
    summary_path = plan.folder / f"{settings.run_name}.json"
    summary = capture.summary(settings, outcomes, command=shlex.join(["kbench", *sys.argv[1:]]))
    common.write_summary(summary_path, summary)
    stderr.print(f"profiles: {plan.folder}/{settings.run_name}-*; figures: {summary_path}", highlight=False)
    code = capture.exit_code(outcomes)
    if run_records is not None:
        rows = agreement.agreement_rows(summary, run_records)
        _print_agreement(summary, rows, TOLERANCE, MIN_US)
        code = code or agreement.exit_code(rows)
    return code


def agreement_command(
    summary: Path = typer.Argument(..., metavar="NAME.json",
                                   help="A kbench profile summary: results/profiles/NAME.json."),
    run: Path = typer.Argument(..., metavar="RUN.jsonl",
                               help="A kbench run's results file of the same case (JSONL or JSON)."),
    tolerance: float = typer.Option(TOLERANCE, "--tolerance", help="The largest difference that agrees, as a fraction."),
    min_us: float = typer.Option(MIN_US, "--min-us",
                                 help="Calls shorter than this (us) are listed but not checked: launch gaps "
                                      "dominate them."),
) -> None:
    """An earlier profile's kernel time per call against a kbench run's event medians (exit 0: every checked
    implementation agrees; 1: one does not; 2: none could be checked)."""
    from kbench.profilers import agreement

    with user_errors():
        agreement.check_limits(tolerance, min_us)
        figures = agreement.read_summary(summary)
        records = agreement.read_run(run)
    rows = agreement.agreement_rows(figures, records, tolerance, min_us)
    _print_agreement(figures, rows, tolerance, min_us)
    code = agreement.exit_code(rows)
    if code:
        raise typer.Exit(code)


# --- the tables ---------------------------------------------------------------------------

def _abbrev(name: str, width: int = 60) -> str:
    """A long kernel name shortened in the middle (the JSON summary and the CSV keep it whole)."""
    return name if len(name) <= width else f"{name[: width - 20]}...{name[-17:]}"


def _f(value, digits: int = 1, scale: float = 1.0) -> str:
    return "-" if value is None else f"{value * scale:,.{digits}f}"


def _print_outcome(outcome: dict, case_key: str) -> None:
    label = escape(outcome["label"])
    status = outcome["status"]
    if status != "OK":
        color = "yellow" if status == "SKIP" else "red"
        stdout.print(f"[{color}]{label}: {status}[/] {escape(outcome.get('reason') or '')}", highlight=False)
        return
    tool = outcome["tool"]
    if tool == "ncu":
        _print_ncu(outcome, case_key)
    elif tool == "nsys":
        _print_nsys(outcome, case_key)
    else:
        _print_torch(outcome, case_key)
    if outcome.get("warning"):
        stdout.print(f"[yellow]warning:[/] {escape(outcome['warning'])}", highlight=False)


def _print_ncu(outcome: dict, case_key: str) -> None:
    per = outcome["per_call"]
    table = Table(title=f"{escape(outcome['label'])}: Nsight Compute, {escape(case_key)} "
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
    _print_asked_metrics(outcome["kernels"])
    for k in outcome["kernels"]:
        if k.get("stalls"):
            sampled = k.get("stall_unit") == "samples"
            unit = "share of its sampled warp states" if sampled else "cycles per issued instruction"
            stdout.print(f"{escape(_abbrev(k['name']))}: top stalls, {unit}: "
                         + ", ".join(f"{reason} {value:.0f} %" if sampled else f"{reason} {value:.1f}"
                                     for reason, value in k["stalls"]), highlight=False)
        if k.get("hot_lines"):
            stdout.print(f"{escape(_abbrev(k['name']))}: the instructions its sampled warps waited at most "
                         "(share of its samples, the state most were in):", highlight=False)
            for line in k["hot_lines"]:
                stdout.print(f"  {line['percent']:5.1f} %  {line['state']:<16} {escape(line['sass'])}  ({line['address']})",
                             highlight=False)


def _print_asked_metrics(kernels: list[dict]) -> None:
    """--metrics: each metric asked for, one row, with each kernel's value (the mean over its launches, as
    ncu gives it: counts, bytes, cycles and percentages in base units) and the launch geometry."""
    names = list((kernels[0].get("asked") or {}) if kernels else {})
    if not names:
        return
    table = Table(title="the metrics asked for (--metrics), per launch", title_justify="left")
    table.add_column("metric", overflow="fold")
    for k in kernels:
        table.add_column(escape(_abbrev(k["name"], 40)), justify="right", overflow="fold")
    table.add_row("grid", *[escape(str(k.get("grid") or "-")) for k in kernels])
    table.add_row("block", *[escape(str(k.get("block") or "-")) for k in kernels])
    for name in names:
        table.add_row(escape(name), *[_number(k["asked"].get(name)) for k in kernels])
    stdout.print(table)


def _number(value) -> str:
    """A metric's value: whole numbers with thousands separators, others to 4 significant digits."""
    if value is None:
        return "-"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.4g}"


def _print_nsys(outcome: dict, case_key: str) -> None:
    per = outcome["per_call"]
    calls = max(1, per["calls"])
    scope = "inside kbench's range" if outcome.get("source") == "nvtx_kern_sum" else "whole capture"
    table = Table(title=f"{escape(outcome['label'])}: Nsight Systems, {escape(case_key)} "
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


def _print_torch(outcome: dict, case_key: str) -> None:
    per = outcome["per_call"]
    calls = max(1, per["calls"])
    gpu = outcome["rows"] == "kernels"
    what = "CUDA kernels (device time)" if gpu else "operators (own CPU time; CPU wall-clock is not GPU performance)"
    table = Table(title=f"{escape(outcome['label'])}: torch.profiler, {escape(case_key)} ({per['calls']} "
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


def _print_compare(outcomes: list[dict], compare) -> None:
    from kbench.profilers.capture import compare_outcomes

    rows, missing = compare_outcomes(outcomes, compare)
    if rows is None:
        stdout.print(f"[yellow]--compare: no figures for {', '.join(missing) or 'both'}[/]", highlight=False)
        return
    table = Table(title=f"{escape(compare[0])} vs {escape(compare[1])}", title_justify="left")
    for i, column in enumerate(("per call", compare[0], compare[1], f"{compare[1]} / {compare[0]}")):
        table.add_column(escape(column), justify="left" if i == 0 else "right")
    for row in rows:
        ratio = "-" if row.ratio is None else f"{row.ratio:.2f}x"
        table.add_row(escape(row.title), _f(row.a, row.digits), _f(row.b, row.digits), ratio)
    stdout.print(table)


def _print_agreement(summary: dict, rows: list[dict], tolerance: float, min_us: float) -> None:
    table = Table(title=f"{escape(str(summary.get('tool')))} kernel time per call vs kbench's event median, "
                        f"{escape(str(summary.get('case_key')))} (tolerance {tolerance * 100:g} %, checked from "
                        f"{min_us:g} us)", title_justify="left")
    for i, column in enumerate(("implementation", "profiler (us)", "at the run's clock (us)", "events (us)",
                                "difference", "SM clock (MHz): profiler, run", "verdict")):
        table.add_column(column, justify="right" if 0 < i < 6 else "left", overflow="fold")
    for row in rows:
        if not row["checked"]:
            verdict = f"[yellow]not checked[/] ({escape(row['why'])})"
        else:
            verdict = "[green]agrees[/]" if row["ok"] else "[bold red]DISAGREES[/]"
        clocks = f"{row['profiled_mhz']:,.0f}, {row['run_mhz']:,.0f}" if row.get("run_mhz") else "-"
        table.add_row(escape(row["label"]), _f(row["profiled_us"]), _f(row.get("profiled_us_at_run_clock")),
                      _f(row["event_us"]), "-" if row["diff"] is None else f"{row['diff']:+.1%}", clocks, verdict)
    stdout.print(table)
    if not any(row["checked"] for row in rows):
        stdout.print("[yellow]no implementation was checked[/]"
                     + (" (each row says why)" if rows else ": the summary lists none"), highlight=False)
