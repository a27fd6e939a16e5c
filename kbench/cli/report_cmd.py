"""`kbench report RESULTS... --out DIR`: results as a static HTML site (kbench.site), to open from disk."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from kbench.cli.common import stderr, user_errors
from kbench.errors import UserError


def report_command(
    sources: List[Path] = typer.Argument(..., metavar="RESULTS...", help="Results files (JSONL) or folders of them, e.g. results/baselines.",
                                         show_default=False),
    out: Path = typer.Option(Path("results/report"), "--out", help="Folder to write the site into (created if need be)."),
    threshold: Optional[str] = typer.Option(
        None, "--threshold",
        help="Smallest change of a median that counts as a regression, e.g. 5% (default: as kbench compare: "
             "tool.kbench in pyproject.toml, else 5%; a suite's entry in tool.kbench.thresholds wins for it)."),
) -> None:
    """A static HTML site of results: per suite, the latest tables, each case over commits with its
    regressions (judged as kbench compare judges), and the roofline. Open OUT/index.html in a browser."""
    from kbench import api, compare_thresholds, loader, site

    with user_errors():
        cli_threshold = compare_thresholds.parse_fraction(threshold, "--threshold") if threshold is not None else None
        records = api.load(*sources).records
        if not records:
            raise UserError("no records in " + ", ".join(map(str, sources)))
        settings = compare_thresholds.load()
        if settings.note:
            stderr.print(f"note: {settings.note}", highlight=False, markup=False)
        alpha = settings.alpha or compare_thresholds.DEFAULT_ALPHA
        thresholds = {suite: compare_thresholds.threshold_for(suite, settings, cli_threshold)
                      for suite in dict.fromkeys(r.suite for r in records)}
        registry = loader.load()  # the suites' own table columns, and each implementation's roofline unit
        units = {(s, name): impl.unit for s, table in registry.impls.items() for name, impl in table.items()}
        index = site.build(records, out, [str(s) for s in sources], registry.suites, units, thresholds, alpha,
                           progress=lambda line: stderr.print(f"wrote {line}", highlight=False, markup=False))
        stderr.print(f"open {index}", highlight=False, markup=False)
