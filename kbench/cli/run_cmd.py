"""`kbench run SUITE --OPTION VALUE ...`: check and time a suite's implementations.

Each suite becomes its own subcommand whose options are the suite's case axes,
so `kbench run attention --help` lists exactly the options that suite takes,
with their defaults. `kbench bench` runs a plan's entries through the same
prepare() and measure().
"""

from __future__ import annotations

import inspect
import math
import shlex
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, List, Optional

import typer

from kbench.cli.common import split_list, stderr, stdout
from kbench.cli.suite_options import SuiteGroup, add_suite_commands, no_options, option
from kbench.errors import UserError
from kbench.stopping import CPU_DEFAULTS, StopRule

if TYPE_CHECKING:  # the runner, registry and suites are loaded when a run is prepared, not for --help
    from kbench.registry import Registry
    from kbench.runner import RunRequest
    from kbench.suite import Case, Suite

DEVICES = ("auto", "cuda", "cpu")
GPU_STOP = StopRule()


def build() -> typer.Typer:
    return typer.Typer(
        cls=SuiteGroup.of(lambda app: add_suite_commands(app, run_suite, [run_options])),
        callback=no_options,
        no_args_is_help=True,
        help="Check and time a suite's implementations: kbench run SUITE --OPTION VALUE ....",
    )


def run_options(suite: Suite) -> list[inspect.Parameter]:
    """kbench run's options after the suite's axes (the handler's keyword arguments)."""
    return [
        option("impl", Optional[str], None, "--impl", help="Implementations to run, comma-separated (default: all)."),
        option("param", Optional[List[str]], None, "--param",
               help="An implementation parameter, NAME=VALUE or a sweep NAME=V1,V2 (repeatable; see kbench list; "
                    "default: each implementation's own values)."),
        _baseline_option(suite),
        option("seed", int, 0, "--seed", help="Seed of the first correctness trial's random inputs."),
        option("trials", int, suite.trials, "--trials", help="Correctness trials, each on fresh random inputs."),
        option("out", Optional[Path], None, "--out",
               help="JSONL file the records are appended to (default: results/SUITE-TIME.jsonl)."),
        option("resume", bool, False, "--resume",
               help="Continue an interrupted run: skip what --out already records (by implementation and case)."),
        option("save_baseline", Optional[str], None, "--save-baseline",
               help="Also write the run's records to results/baselines/NAME.jsonl, atomically, once it completes "
                    "(default: none)."),
        option("fmt", str, "table", "--format", help="Output: table, json or csv."),
        option("kernels", Optional[List[Path]], None, "--kernels",
               help="Extra folder of kernel files, or one kernel file (repeatable), besides the built-in kernels "
                    "and $KBENCH_KERNELS's (default: those only)."),
        option("timeout", float, 600.0, "--timeout", help="Seconds one implementation may take on one case."),
        option("cuda_graph", bool, False, "--cuda-graph/--no-cuda-graph",
               help="Time every case as CUDA-graph replays (eager CUDA events are not taken)."),
        option("auto_graph", bool, True, "--auto-graph/--no-auto-graph",
               help="A launch-bound case (eager median under 20 us) is timed again as CUDA-graph replays, "
                    "which become its median, the eager time shown beside it; --no-auto-graph: eager only."),
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


def _baseline_option(suite: Suite) -> inspect.Parameter:
    if suite.baseline_per_case:  # no one default: the suite names each case's (Suite.baseline_for)
        return option("baseline", Optional[str], None, "--baseline",
                      help="Implementation that speedups are relative to (default: the suite's, case by case).")
    return option("baseline", str, suite.baseline, "--baseline", help="Implementation that speedups are relative to.")



@dataclass
class PreparedRun:
    """A run whose options are checked and whose variants are chosen: nothing is measured or written yet."""

    registry: Registry
    request: RunRequest
    cases: list[Case]
    fmt: str
    out: Path | None
    resume: bool
    baseline_file: Path | None  # --save-baseline's file
    added_baselines: list[str]  # baselines not asked for, added so that speedups can be computed

    @property
    def jobs(self) -> list[tuple[str, str, str]]:
        """The run's jobs by results.key, in the order its records are reported: case by case, each case's
        baselines first."""
        from kbench.runner import in_turn
        from kbench.selection import baselines

        request = self.request
        first = set(baselines(self.registry.suite(request.suite), self.cases, request.baseline).values())
        return [(request.suite, variant.label, case.key) for case in self.cases
                for variant in in_turn(request.variants, first)]


def load_registry(kernels: list[Path]) -> Registry:
    """The suites with the built-in kernels and ``kernels``; files that failed to load are warnings."""
    from kbench import loader

    registry = loader.load(kernels)
    for path, error in registry.load_errors.items():
        stderr.print(f"[yellow]warning:[/] could not load {path}: {error}", highlight=False)
    return registry


def prepare(suite: Suite, cases: list[Case], *, impl, param, baseline, seed, trials, out, fmt, kernels, timeout,
            cuda_graph, flush_l2, min_time, max_time, target_noise, device, auto_graph=True, resume=False,
            interleave=False,
            save_baseline=None, command: str | None = None,
            load: Callable[[list[Path]], Registry] = load_registry) -> PreparedRun:
    """Check kbench run's options and choose what the run measures; UserError for a mistake.
    ``command``: what the records say made them (default: this process's command line)."""
    from kbench import report, results, runner, selection

    report.check_format(fmt)
    if device not in DEVICES:
        raise UserError(f"--device: unknown device {device!r} (choose from {', '.join(DEVICES)})")
    if trials < 1:
        raise UserError("--trials must be at least 1")
    stop = {"min_time": min_time, "max_time": max_time, "target_noise": target_noise}
    stop = {key: value for key, value in stop.items() if value is not None}  # unset: the device's defaults
    # nan passes every comparison below and inf never ends a wait: neither is a time or a fraction.
    for name, value in (("--timeout", timeout), *((f"--{k.replace('_', '-')}", v) for k, v in stop.items())):
        if not math.isfinite(value):
            raise UserError(f"{name} must be a finite number (got {value})")
    if timeout <= 0 or stop.get("min_time", 0) < 0 or any(stop.get(k, 1) <= 0 for k in ("max_time", "target_noise")):
        raise UserError("--timeout, --max-time and --target-noise must be positive, --min-time not negative")
    if device == "cuda" and not runner.host_has_gpu():
        raise UserError("--device cuda: no CUDA device is visible on this machine")
    if resume and not out:
        raise UserError("--resume needs --out FILE: the results file of the run to continue")
    baseline_file = results.baseline_path(save_baseline) if save_baseline is not None else None

    registry = load(kernels or [])
    chosen = selection.select(registry, suite, cases, split_list(impl) or None, param or [], baseline)
    request = runner.RunRequest(
        suite=suite.name, variants=chosen.variants, cases=cases, baseline=baseline, seed=seed, trials=trials,
        stop=stop, flush_l2=flush_l2, cuda_graph=cuda_graph, auto_graph=auto_graph, timeout=timeout,
        kernel_dirs=tuple(kernels or ()),
        interleave=interleave, device=device,
        command=command if command is not None else shlex.join(["kbench", *sys.argv[1:]]),
    )
    return PreparedRun(registry, request, cases, fmt, Path(out) if out else None, resume, baseline_file,
                       chosen.added_baselines)


def say_added_baselines(prepared: PreparedRun) -> None:
    for name in prepared.added_baselines:
        stderr.print(f"(baseline {name} added so speedups can be computed)")


def say_torn_line(path: Path, removed: int, doing: str = "resuming") -> None:
    if removed:
        stderr.print(f"{doing} {path}: removed its torn last line ({removed} bytes, an interrupted write)",
                     highlight=False)


def run_suite(suite: Suite, cases: list[Case], **options) -> None:
    """`kbench run SUITE ...`: check and time, append the records to --out, print them."""
    from kbench.worker_starter import fork_server_started_early

    started = time.monotonic()
    with fork_server_started_early(options.get("kernels") or (), options["device"], suite.name):
        _run_suite(suite, cases, started, **options)


def _run_suite(suite: Suite, cases: list[Case], started: float, **options) -> None:
    from kbench import report, results, resume

    prepared = prepare(suite, cases, **options)
    say_added_baselines(prepared)
    path = prepared.out or results.default_path(suite.name)
    wanted = prepared.jobs
    state = resume.recorded(path, set(wanted)) if prepared.resume else resume.Recorded()
    say_torn_line(path, state.torn_bytes)
    done = state.done
    results_file = results.ResultsFile(path)
    if prepared.resume:
        stderr.print(f"resuming {path}: {len(done)} of {len(wanted)} already recorded, "
                     f"{len(wanted) - len(done)} to run", highlight=False)
    try:
        new_records = measure(prepared, results_file, done, f"--resume --out {path} continues")
    finally:
        results_file.close()
    records = [done[key] for key in wanted if key in done] + new_records  # the whole run
    report.emit(records, prepared.fmt, stdout)
    stderr.print(f"results: {path} ({len(new_records)} records"
                 f"{f', {len(done)} from before' if done else ''})", highlight=False)
    # The harness's own cost, start-ups included: what a user waits for (from loading the kernels on).
    stderr.print(f"done in {time.monotonic() - started:.1f} s{harness_summary(new_records)}", highlight=False)
    failed = [r for r in records if r.status in results.FAILED]
    if prepared.baseline_file is not None:
        results.write_atomic(prepared.baseline_file, records)
        warning = f" ({len(failed)} of them failed: a later compare reports no time for those)" if failed else ""
        stderr.print(f"baseline: {prepared.baseline_file} ({len(records)} records){warning}", highlight=False)
    if failed:
        raise typer.Exit(1)


# What each step of a row is called in the line that ends a run (the records' ``harness`` keys).
HARNESS_STEPS = (("waited_for_worker_s", "waiting for workers to start"),
                 ("trials_s", "trials drawn side by side"), ("check_s", "checks"),
                 ("warmup_s", "warm-up"), ("sample_s", "sampling"),
                 ("after_sampling_s", "side-stream checks and graph replays"), ("recheck_s", "re-checks"))


def harness_summary(records) -> str:
    """Where the run's time went, summed over its rows ("" when no row says): the wait for workers to
    start, which starting them ahead hides, and each step of the rows' measurements."""
    totals = {key: sum((r.harness or {}).get(key) or 0.0 for r in records) for key, _ in HARNESS_STEPS}
    parts = [f"{name} {totals[key]:.1f} s" for key, name in HARNESS_STEPS if totals[key] >= 0.05]
    return f" ({', '.join(parts)})" if parts else ""


def measure(prepared: PreparedRun, results_file, done: dict, how_to_continue: str) -> list[dict]:
    """Run the jobs not in ``done`` with a progress bar, appending each record to ``results_file`` (left
    open); returns the new records. Ctrl-C or SIGTERM: the records so far stay, exit code 130."""
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from kbench import runner

    request = prepared.request
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
            # The worker's log keeps what the one-line reason cannot: the traceback, a compiler's own errors.
            log = f" (worker log: {record.log})" if record.log else ""
            progress.console.print(f"  {record.label} {record.case_key}: {status} {record.reason}{log}",
                                   highlight=False, markup=False)

    terminated = []

    def on_sigterm(signum, frame):
        terminated.append(signum)
        raise KeyboardInterrupt  # CI cancellation, `timeout`: clean up as for Ctrl-C

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        with progress:
            runner.run(prepared.registry, request, results_file, on_start=on_start, on_record=on_record, done=done)
    except KeyboardInterrupt:
        stderr.print(f"interrupted: {len(measured)} records kept in {results_file.path} ({how_to_continue})",
                     highlight=False)
        if terminated:
            _end_as_terminated(previous)  # each record was written and synced as it came
        raise typer.Exit(130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    return measured


def _end_as_terminated(previous) -> None:
    """Once the records are kept, end the way SIGTERM would have ended us without kbench's handler: the
    signal delivered again to the handler that was there before. A shell sees 143 and ``timeout`` its
    own signal; a program that runs kbench in-process (a pytest test under ``timeout``) is ended too,
    instead of reading an ordinary exit code as the kernel's failure."""
    import os

    signal.signal(signal.SIGTERM, previous)
    os.kill(os.getpid(), signal.SIGTERM)
    raise typer.Exit(128 + signal.SIGTERM)  # reached only where SIGTERM was ignored or handled and returned


def prepare_args(suite: Suite, args: list[str], *, load: Callable[[list[Path]], Registry] = load_registry,
                 before_cases=None) -> PreparedRun:
    """``kbench run SUITE ARGS`` parsed by the suite's own run options and checked by prepare(), without
    running anything (a bench plan's runs, the Python API's kbench.run); UserError for a mistake."""
    from kbench.cli.common import ClickException, click_error_line

    command = shlex.join(["kbench", "run", suite.name, *args])

    def checked(suite, cases, **options):
        return prepare(suite, cases, **options, command=command, load=load)

    try:
        ready = run_command(suite, checked, before_cases).main(list(args), prog_name=f"kbench run {suite.name}",
                                                               standalone_mode=False)
    except ClickException as exc:
        raise UserError(click_error_line(exc)) from None
    if not isinstance(ready, PreparedRun):  # nothing else returns without an error; never a silent skip
        raise UserError(f"the args {list(args)} do not make a run")
    return ready


def run_command(suite: Suite, handler: Callable, before_cases=None):
    """``kbench run SUITE`` as a Click command calling ``handler(suite, cases, **options)`` (its errors
    reach the caller): what a bench plan's args and kbench.run's keyword arguments are parsed by."""
    from kbench.cli.suite_options import suite_command

    app = typer.Typer(add_completion=False)
    app.command(context_settings={"help_option_names": []})(
        suite_command(suite, handler, [run_options], before_cases=before_cases, one_line_errors=False))
    return typer.main.get_command(app)
