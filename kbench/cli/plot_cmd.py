"""`kbench plot RESULTS`: throughput against size for each implementation of a sweep, or a metric of
the suite's own (Suite.plot_metrics: the allreduce suite's bus bandwidth)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kbench.cli.common import stderr, user_errors
from kbench.errors import UserError


def plot_command(
    source: Path = typer.Argument(..., metavar="RESULTS", help="A results file (or folder) of a sweep, e.g. kbench run ... --n 256,1024,4096."),
    out: Optional[Path] = typer.Option(None, "--out", help="PNG to write (an SVG is written beside it); "
                                                           "default: the results file's name with .png."),
    metric: str = typer.Option("tflops", "--metric", help="tflops or gbps, or a metric of the suite's own "
                                                          "(allreduce: busbw or algbw, against the message size)."),
) -> None:
    """Throughput against size for each implementation of a sweep, with the peer dashed."""
    from kbench import api, loader, plots

    with user_errors():
        records = api.load(source).records
        by_suite: dict[str, list] = {}
        for r in records:
            by_suite.setdefault(r.suite, []).append(r)
        suites = loader.builtin_suites()
        for name in by_suite:
            own = suites[name].plot_metrics if name in suites else ()
            if metric not in ("tflops", "gbps", *own):
                raise UserError(f"--metric: {metric!r} is not tflops or gbps"
                                + (f" or one of {name}'s: {', '.join(own)}" if own else f" ({name} adds none)"))
        base = out or Path(source).with_suffix(".png")
        for name, rows in by_suite.items():
            target = base if len(by_suite) == 1 else base.with_name(f"{base.stem}-{name}{base.suffix}")
            if metric in ("tflops", "gbps"):
                written = plots.throughput_plot(rows, target, metric)
            else:
                written = suites[name].plot(rows, target, metric)
            stderr.print(f"plot: {', '.join(map(str, written))}")
