"""`kbench roofline` and `kbench plot`: where results stand against the device's roofs, and sweeps as pictures."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer
from rich.markup import escape
from rich.table import Table

from kbench.cli.common import stderr, stdout, user_errors
from kbench.errors import UserError

if TYPE_CHECKING:
    from kbench.record import Record

RESULTS = Path("results")


def _latest_per_suite(suites: list[str]) -> list[Path]:
    """The newest results file of each suite under results/ (of the named suites, if any)."""
    if not RESULTS.is_dir():
        raise UserError("no results/ folder here: run `kbench run SUITE` first, or pass --from FILE")
    newest: dict[str, Path] = {}
    for path in sorted(RESULTS.glob("*.jsonl"), key=lambda p: p.stat().st_mtime):
        suite = path.stem.rsplit("-", 2)[0]
        if not suites or suite in suites:
            newest[suite] = path
    if not newest:
        raise UserError(f"no results files in results/ for {', '.join(suites) or 'any suite'}")
    return list(newest.values())


def _records(sources: list[Path], suites: list[str]) -> list[Record]:
    from kbench import results

    files = [f for src in sources for f in results.results_files(src)] if sources else _latest_per_suite(suites)
    records = [r for f in files for _, r in results.read_strict(f)]
    return [r for r in records if not suites or r.suite in suites]


def roofline_command(
    suites: Optional[List[str]] = typer.Argument(None, help="Suites to include (default: all in the files)."),
    sources: Optional[List[Path]] = typer.Option(None, "--from", help="Results file or folder (repeatable); "
                                                                      "default: the newest file of each suite in results/."),
    gpu: str = typer.Option("detected", "--gpu", help="Roofs of: detected (each record's own GPU) or a table "
                                                      "entry: h200, h100, h100-pcie, "
                                                      "a100 (312 TFLOP/s over 2 TB/s), a100-80, "
                                                      "a100-40, a100-pcie, a100-pcie-40, l40s, l4, rtx4090."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Also draw the roofline to this PNG, and an SVG beside it (default: the table only)."),
) -> None:
    """Each result against its roof: arithmetic intensity, attained and attainable TFLOP/s, % of roof, bound."""
    from kbench import loader, roofline
    from kbench.devices import by_key
    from kbench.registry import _did_you_mean

    with user_errors():
        fixed = None
        if gpu != "detected":
            fixed = by_key(gpu)
            if fixed is None:
                raise UserError(f"--gpu: unknown GPU {gpu!r} (see kbench roofline --help)")
        registry = loader.load()
        for name in suites or ():  # a misspelt suite is the name's fault, not the results files'
            if name not in registry.suites:
                raise UserError(f"unknown suite {name!r}{_did_you_mean(name, registry.suites)} "
                                f"(suites: {', '.join(registry.suites)})")
        records = _records(list(sources or []), list(suites or []))
        units = {(s, name): impl.unit for s, table in registry.impls.items() for name, impl in table.items()}
        placed = roofline.place(records, units, fixed)
        points, skipped, calibrations, measured = placed.points, placed.skipped, placed.calibrations, placed.measured
        if not points:
            raise UserError("no OK GPU results to place on a roofline (CPU runs and failed rows have none)")
        table = Table(title="roofline" + (f" of {fixed.name} ({fixed.source})" if fixed else ""),
                      title_justify="left", header_style="bold")
        calibrated = any(v is not None for v in measured.values())
        columns = ["GPU", "implementation", "case", "FLOP/B", "TFLOP/s", "TB/s", "attainable", "% roof"]
        columns += ["measured roof", "% measured"] if calibrated else []
        for col in columns + ["bound", "roof", "valid"]:
            table.add_column(col, justify="left" if col in ("GPU", "implementation", "case", "bound", "roof", "valid")
                             else "right", no_wrap=col not in ("implementation", "case"))
        for peaks, p in points:
            row = [peaks.key, escape(p.label), escape(p.case_key), f"{p.intensity:.1f}", f"{p.attained_tflops:.2f}",
                   f"{p.attained_tbs:.3f}", f"{p.attainable_tflops:.1f}", f"{p.pct_of_roof:.1f}"]
            if calibrated:
                roof = measured.get(id(p))
                row += [f"{roof:.1f}", f"{100 * p.attained_tflops / roof:.1f}"] if roof else ["-", "-"]
            if not p.valid:
                verdict = "[bold red]INVALID: above the roof[/]" + (f" of {p.ran_on}" if p.ran_on else "")
            elif not p.below_roof:
                verdict = f"yes; above {peaks.key}'s roof (ran on {p.ran_on})"
            else:
                verdict = "yes"
            row += [p.bound, p.roof_label, verdict]
            table.add_row(*row)
        for line in roofline.roof_lines(points):  # the roofs and their ridge points, not only in the plot
            stdout.print(escape(line), highlight=False)
        stdout.print(table)
        if skipped:
            stderr.print(f"({skipped} records without a GPU time or a known GPU were left out)")
        if plot is not None:
            from kbench import plots

            gpus = {peaks.key for peaks, _ in points}
            for key in sorted(gpus):
                peaks = next(pk for pk, _ in points if pk.key == key)
                target = plot if len(gpus) == 1 else plot.with_name(f"{plot.stem}-{key}{plot.suffix}")
                written = plots.roofline_plot([p for pk, p in points if pk.key == key], peaks, target,
                                              calibration=calibrations.get(key))
                stderr.print(f"plot: {', '.join(map(str, written))}")
