"""`kbench bench PLAN.toml [--out FILE]`: run a benchmark plan, every run into one results file.

Each [[run]] of the plan (kbench.bench_plan) is a suite and its options as `kbench run SUITE` spells
them; they are parsed with the same suite options and checked, all of them, before anything runs,
then run one after the other through kbench run's prepare() and measure(). Each run's table is
printed as `kbench run` prints it, and at the end one table of every kernel against its peer. A
record's command is the `kbench run SUITE ARGS` that makes the same run on its own.

The results file is continued when it exists: a job it already records is not run again, so the same
command after a crash or Ctrl-C measures only what is missing.
"""

from __future__ import annotations

import datetime as dt
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from kbench.cli import run_cmd
from kbench.cli.common import stderr, stdout, user_errors
from kbench.errors import UserError

if TYPE_CHECKING:  # loaded when a plan is read, not for --help
    from kbench import bench_plan
    from kbench.registry import Registry

# kbench run's options that a plan's run may not give: the bench writes one file and prints tables.
NOT_IN_A_PLAN = {"out": "--out", "resume": "--resume", "save_baseline": "--save-baseline", "fmt": "--format"}


def bench_command(
    plan_file: Path = typer.Argument(..., metavar="PLAN.toml", help="The plan (TOML): a title and its runs, each "
                                     "a suite and its kbench run options, e.g. args = [\"--n\", \"4096\"]."),
    out: Optional[Path] = typer.Option(None, "--out", help="JSONL file every run's records go to (default: "
                                       "results/PLAN-DATE.jsonl); an existing one is continued, its jobs not "
                                       "run again."),
) -> None:
    """Run a benchmark plan: every run into one results file, then each kernel against its peer."""
    from kbench import bench_plan, peers, report, results, resume

    with user_errors():
        plan = bench_plan.read(plan_file)
        prepared = prepare_plan(plan)
        path = Path(out) if out else default_path(plan)
        wanted = [job for run in prepared for job in run.jobs]
        state = resume.recorded(path, set(wanted), why="kbench bench")
        run_cmd.say_torn_line(path, state.torn_bytes, "continuing")
        results_file = results.ResultsFile(path)
    if state.done:
        stderr.print(f"continuing {path}: {len(state.done)} of {len(wanted)} jobs already recorded, "
                     f"{len(wanted) - len(state.done)} to run", highlight=False)
    every: list[dict] = []
    new = 0
    try:
        for run, ready in zip(plan.runs, prepared):
            stderr.print(f"{plan.title}: run {run.number} of {len(plan.runs)}: {ready.request.command}",
                         highlight=False)
            run_cmd.say_added_baselines(ready)
            done = {key: state.done[key] for key in ready.jobs if key in state.done}
            measured = run_cmd.measure(ready, results_file, done,
                                       f"kbench bench {shlex.quote(str(plan.path))} --out {shlex.quote(str(path))} "
                                       "continues")
            records = [done[key] for key in ready.jobs if key in done] + measured  # the whole run
            report.emit(records, "table", stdout)
            every += records
            new += len(measured)
    finally:
        results_file.close()
    ratios = peers.peer_ratios(every)
    stdout.print(report.peer_table(f"{plan.title}: each kernel against its peer (median(peer) / median(kernel); "
                                   "above 1: faster)", ratios))
    if any(row.basis for row in ratios):
        stdout.print("  * eager: the ratio of the two rows' eager times (one of them graph-timed, launch-bound, "
                     "the other not)", highlight=False)
    before = len(every) - new
    stderr.print(f"results: {path} ({new} records{f', {before} from before' if before else ''})", highlight=False)
    if any(r.status in results.FAILED for r in every):
        raise typer.Exit(1)


def default_path(plan: bench_plan.Plan, folder: Path = Path("results")) -> Path:
    """results/PLAN-DATE.jsonl: the same plan run again the same day continues its file."""
    return folder / f"{plan.stem}-{dt.date.today():%Y%m%d}.jsonl"


def prepare_plan(plan: bench_plan.Plan) -> list[run_cmd.PreparedRun]:
    """Every run parsed and checked before any runs (UserError naming the run), and no job in two runs:
    the results file holds each job once, which is how a continued plan knows what is done."""
    registries: dict[tuple[str, ...], Registry] = {}

    def load(kernels: list[Path]) -> Registry:  # runs with the same --kernels share one registry
        key = tuple(str(Path(k).resolve()) for k in kernels)
        if key not in registries:
            registries[key] = run_cmd.load_registry(kernels)
        return registries[key]

    prepared, owner = [], {}
    for run in plan.runs:
        ready = prepare_run(plan, run, load)
        for job in ready.jobs:
            if job in owner:
                why = " (the baseline its speedups need)" if job[1] in ready.added_baselines else ""
                raise UserError(f"{plan.path}: {run.name} measures {job[1]}{why} at {job[2]}, as run {owner[job]} "
                                "does: a plan measures each job once")
            owner[job] = run.number
        prepared.append(ready)
    return prepared


def prepare_run(plan: bench_plan.Plan, run: bench_plan.PlannedRun, load) -> run_cmd.PreparedRun:
    """One run's args parsed by kbench run's own options for its suite, then checked by prepare()."""
    from kbench import loader
    from kbench.registry import _did_you_mean

    suites = loader.builtin_suites()
    where = f"{plan.path}: {run.name}"
    if run.suite not in suites:
        raise UserError(f"{plan.path}: run {run.number}: unknown suite {run.suite!r}"
                        f"{_did_you_mean(run.suite, suites)} (suites: {', '.join(suites)})")

    def refuse_own_options(ctx: typer.Context, options: dict) -> None:
        for name, flag in NOT_IN_A_PLAN.items():
            if ctx.get_parameter_source(name).name == "COMMANDLINE":
                raise UserError(f"{flag} is not for a plan's run: kbench bench writes one results file "
                                "(kbench bench --out FILE) and prints tables")

    try:
        return run_cmd.prepare_args(suites[run.suite], list(run.args), load=load, before_cases=refuse_own_options)
    except UserError as exc:
        raise UserError(f"{where}: {exc}") from None
