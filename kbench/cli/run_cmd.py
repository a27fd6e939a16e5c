"""`kbench run SUITE --OPTION VALUE ...`: check and time a suite's implementations.

Each suite becomes its own subcommand whose options are the suite's case axes,
so `kbench run attention --help` lists exactly the options that suite takes,
with their defaults.
"""

from __future__ import annotations

import inspect
import itertools
import math
import shlex
import signal
import sys
from pathlib import Path
from typing import List, Optional

import typer
from typer.core import TyperGroup

from kbench import loader
from kbench.cli.common import split_list, stderr, stdout, user_errors
from kbench.errors import UserError
from kbench.registry import _did_you_mean, parse_param_args, variants
from kbench.stopping import CPU_DEFAULTS, StopRule
from kbench.suite import Case, Suite

DEVICES = ("auto", "cuda", "cpu")
GPU_STOP = StopRule()


class SuiteGroup(TyperGroup):
    """`kbench run NAME`: an unknown suite gets one line with a suggestion."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.suggest_commands = False  # Typer's own suggestion would repeat ours

    def get_command(self, ctx, cmd_name):
        command = super().get_command(ctx, cmd_name)
        if command is None and not cmd_name.startswith("-"):
            known = self.list_commands(ctx)
            ctx.fail(f"unknown suite {cmd_name!r}{_did_you_mean(cmd_name, known)} (suites: {', '.join(known)})")
        return command


def build() -> typer.Typer:
    run_app = typer.Typer(
        cls=SuiteGroup,
        no_args_is_help=True,
        help="Check and time a suite's implementations: kbench run SUITE --OPTION VALUE ....",
    )
    registry = loader.load(with_kernels=False)  # suites only: cheap, no torch
    for suite in registry.suites.values():
        run_app.command(suite.name, help=suite.description)(_suite_command(suite))
    return run_app


def _common_options(suite: Suite) -> list[inspect.Parameter]:
    def option(name, annotation, default, *decls, help):
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                                 default=typer.Option(default, *decls, help=help))

    return [
        option("impl", Optional[str], None, "--impl", help="Implementations to run, comma-separated (default: all)."),
        option("param", Optional[List[str]], None, "--param",
               help="An implementation parameter, NAME=VALUE or a sweep NAME=V1,V2 (repeatable; see kbench list)."),
        _baseline_option(suite, option),
        option("seed", int, 0, "--seed", help="Seed of the first correctness trial's random inputs."),
        option("trials", int, suite.trials, "--trials", help="Correctness trials, each on fresh random inputs."),
        option("out", Optional[Path], None, "--out",
               help="JSONL file the records are appended to (default: results/SUITE-TIME.jsonl)."),
        option("resume", bool, False, "--resume",
               help="Continue an interrupted run: skip what --out already records (by implementation and case)."),
        option("save_baseline", Optional[str], None, "--save-baseline",
               help="Also write the run's records to results/baselines/NAME.jsonl, atomically, once it completes."),
        option("fmt", str, "table", "--format", help="Output: table, json or csv."),
        option("kernels", Optional[List[Path]], None, "--kernels",
               help="Extra folder of kernel files, or one kernel file (repeatable); also $KBENCH_KERNELS."),
        option("timeout", float, 600.0, "--timeout", help="Seconds one implementation may take on one case."),
        option("cuda_graph", bool, False, "--cuda-graph/--no-cuda-graph",
               help="Time CUDA-graph replays (for launch-bound sizes)."),
        option("flush_l2", bool, True, "--flush-l2/--no-flush-l2", help="Flush L2 between samples (untimed)."),
        option("interleave", bool, False, "--interleave/--no-interleave",
               help="Alternate bursts of samples between a case's implementations (one worker each, all "
                    "alive at once), so the ratios of one table come from the same clock conditions."),
        option("min_time", Optional[float], None, "--min-time",
               help=f"Seconds of sampling before the noise target may stop it (default {GPU_STOP.min_time})."),
        option("max_time", Optional[float], None, "--max-time",
               help=f"Most seconds of sampling per case (default {GPU_STOP.max_time}; CPU {CPU_DEFAULTS['max_time']})."),
        option("target_noise", Optional[float], None, "--target-noise",
               help="Stop once the median's relative standard error is under this "
                    f"(default {GPU_STOP.target_noise}; CPU {CPU_DEFAULTS['target_noise']})."),
        option("device", str, "auto", "--device", help="auto, cuda or cpu."),
    ]


def _baseline_option(suite: Suite, option) -> inspect.Parameter:
    if suite.baseline_per_case:  # no one default: the suite names each case's (Suite.baseline_for)
        return option("baseline", Optional[str], None, "--baseline",
                      help="Implementation that speedups are relative to (default: the suite's, case by case).")
    return option("baseline", str, suite.baseline, "--baseline", help="Implementation that speedups are relative to.")


def _axis_options(suite: Suite) -> list[inspect.Parameter]:
    params = []
    for axis in suite.axes:
        if axis.type is bool:
            default = typer.Option(bool(axis.default[0]), f"{axis.option}/--no-{axis.option[2:]}", help=axis.help)
            annotation = bool
        else:
            choices = f" ({'|'.join(map(str, axis.choices))})" if axis.choices else ""
            default = typer.Option(",".join(map(axis.format, axis.default)), axis.option,
                                   help=f"{axis.help}{choices}; a comma list sweeps")
            annotation = str
        params.append(inspect.Parameter(axis.name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                                        default=default))
    return params


def _suite_command(suite: Suite):
    axis_names = [axis.name for axis in suite.axes]

    def command(**options) -> None:
        with user_errors():
            cases = make_cases(suite, {name: options.pop(name) for name in axis_names})
            execute(suite, cases, **options)

    params = _axis_options(suite) + _common_options(suite)
    command.__signature__ = inspect.Signature(params)
    command.__name__ = suite.name
    command.__doc__ = suite.description
    return command


def make_cases(suite: Suite, raw: dict) -> list[Case]:
    """Every combination of the axes' values (a comma list on any axis sweeps it)."""
    values = {}
    for axis in suite.axes:
        value = raw[axis.name]
        values[axis.name] = [value] if axis.type is bool else axis.parse(value)
        # A value given twice (`--dtype fp16,fp16`, `--n 256,0256`) would measure the same case twice.
        twice = next((v for i, v in enumerate(values[axis.name]) if v in values[axis.name][:i]), None)
        if twice is not None:
            raise UserError(f"{axis.option}: {axis.format(twice)} is given twice in {value!r}")
    cases = [Case(dict(zip(values, combo))) for combo in itertools.product(*values.values())]
    for case in cases:
        suite.validate(case)
    return cases


def execute(suite: Suite, cases: list[Case], *, impl, param, baseline, seed, trials, out, fmt, kernels, timeout,
            cuda_graph, flush_l2, min_time, max_time, target_noise, device, resume=False, interleave=False,
            save_baseline=None) -> None:
    from kbench import report, results, runner

    report.check_format(fmt)
    if device not in DEVICES:
        raise UserError(f"--device: unknown device {device!r} (choose from {', '.join(DEVICES)})")
    if trials < 1:
        raise UserError("--trials must be at least 1")
    stop = {"min_time": min_time, "max_time": max_time, "target_noise": target_noise}
    stop = {key: value for key, value in stop.items() if value is not None}  # unset: the device's defaults
    # nan passes every comparison below and inf never ends a wait: neither is a time or a fraction.
    for option, value in (("--timeout", timeout), *((f"--{k.replace('_', '-')}", v) for k, v in stop.items())):
        if not math.isfinite(value):
            raise UserError(f"{option} must be a finite number (got {value})")
    if timeout <= 0 or stop.get("min_time", 0) < 0 or any(stop.get(k, 1) <= 0 for k in ("max_time", "target_noise")):
        raise UserError("--timeout, --max-time and --target-noise must be positive, --min-time not negative")
    if device == "cuda" and not runner.host_has_gpu():
        raise UserError("--device cuda: no CUDA device is visible on this machine")
    if resume and not out:
        raise UserError("--resume needs --out FILE: the results file of the run to continue")
    baseline_file = results.baseline_path(save_baseline) if save_baseline is not None else None

    registry = loader.load(kernels or [])
    for path, error in registry.load_errors.items():
        stderr.print(f"[yellow]warning:[/] could not load {path}: {error}", highlight=False)
    impls = registry.select(suite.name, split_list(impl) or None)
    known = registry.implementations(suite.name)
    if baseline is not None and baseline not in known:
        raise UserError(f"--baseline: unknown implementation {baseline!r}{_did_you_mean(baseline, known)}")
    needed = list(dict.fromkeys(runner.baselines(suite, cases, baseline).values()))
    for name in needed:
        if name not in known:  # the suite's own choice: a suite or kernel file is missing
            raise UserError(f"suite {suite.name!r} measures speedups against {name!r}, which is not loaded "
                            f"(give --baseline NAME)")
    added = [name for name in needed if name not in {i.name for i in impls}]
    impls = [*(known[name] for name in added), *impls]
    chosen = variants(impls, parse_param_args(param or []))
    for name in added:
        stderr.print(f"(baseline {name} added so speedups can be computed)")

    path = Path(out) if out else results.default_path(suite.name)
    wanted = [(suite.name, variant.label, case.key) for variant in chosen for case in cases]
    if resume and path.exists():
        _drop_torn_line(path)
    done = _recorded(path, set(wanted)) if resume else {}
    results_file = results.ResultsFile(path)
    request = runner.RunRequest(
        suite=suite.name, variants=chosen, cases=cases, baseline=baseline, seed=seed, trials=trials, stop=stop,
        flush_l2=flush_l2, cuda_graph=cuda_graph, timeout=timeout, kernel_dirs=tuple(kernels or ()),
        interleave=interleave,
        device=device, command=shlex.join(["kbench", *sys.argv[1:]]),
    )
    if resume:
        stderr.print(f"resuming {path}: {len(done)} of {len(wanted)} already recorded, "
                     f"{len(wanted) - len(done)} to run", highlight=False)
    new_records = _run_with_progress(registry, request, results_file, done)
    records = [done[key] for key in wanted if key in done] + new_records  # the whole run
    report.emit(records, fmt, stdout)
    stderr.print(f"results: {path} ({len(new_records)} records"
                 f"{f', {len(done)} from before' if done else ''})", highlight=False)
    failed = [r for r in records if r.status in results.FAILED]
    if baseline_file is not None:
        results.write_atomic(baseline_file, records)
        warning = f" ({len(failed)} of them failed: a later compare reports no time for those)" if failed else ""
        stderr.print(f"baseline: {baseline_file} ({len(records)} records){warning}", highlight=False)
    if failed:
        raise typer.Exit(1)


def _drop_torn_line(path: Path) -> None:
    """--resume appends to ``path``: first cut off a last line torn by a kill, which would otherwise
    end up between records, where `kbench show` and `kbench compare` refuse the file."""
    from kbench import results

    removed = results.drop_torn_last_line(path, "--resume")
    if removed:
        stderr.print(f"resuming {path}: removed its torn last line ({removed} bytes, an interrupted write)",
                     highlight=False)


def _recorded(path: Path, wanted: set) -> dict:
    """The records of an earlier run in ``path`` that this run would make again, by key (the last one wins).
    _drop_torn_line has already removed a torn last line (its record is re-run); a line that is not a
    record is a UserError naming it."""
    from kbench import results

    if not path.exists():
        return {}
    try:
        previous = results.read(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--resume: cannot read {str(path)!r}: {getattr(exc, 'strerror', None) or exc}") from None
    return {record.key: record for record in previous if record.key in wanted}


def _run_with_progress(registry, request, results_file, done=None) -> list:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from rich.markup import escape

    from kbench import runner

    done = done or {}
    total = len(request.variants) * len(request.cases) - len(done)
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=stderr, transient=True)
    task = progress.add_task("starting", total=total)
    measured: list = []

    def on_start(variant, case):
        progress.update(task, description=f"{escape(variant.label)} [dim]{case.key}[/]")

    def on_record(record):
        measured.append(record)
        progress.advance(task)
        status = record.status
        if status in ("FAIL", "CRASH", "TIMEOUT"):
            progress.console.print(f"  {record.label} {record.case_key}: {status} {record.reason}",
                                   highlight=False, markup=False)

    def on_sigterm(signum, frame):
        raise KeyboardInterrupt  # CI cancellation, `timeout`: clean up as for Ctrl-C

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        with progress:
            runner.run(registry, request, results_file, on_start=on_start, on_record=on_record, done=done)
    except KeyboardInterrupt:
        stderr.print(f"interrupted: {len(measured)} records kept in {results_file.path} "
                     f"(--resume --out {results_file.path} continues)", highlight=False)
        raise typer.Exit(130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        results_file.close()
    return measured
