"""`kbench show FILE...`: stored results as the tables `kbench run` printed (or JSON / CSV)."""

from __future__ import annotations

from pathlib import Path
from typing import List

import typer

from kbench.cli.common import stdout, user_errors
from kbench.errors import UserError


def show_command(
    sources: List[Path] = typer.Argument(..., metavar="RESULTS...", help="Results files (JSONL) or folders of them."),
    fmt: str = typer.Option("table", "--format", help="table, json or csv."),
) -> None:
    """Show stored results: one table per case, with the same columns as `kbench run`."""
    from kbench import api, report

    with user_errors():
        report.check_format(fmt)
        records = api.load(*sources).records
        if not records:
            raise UserError("no records in " + ", ".join(map(str, sources)))
    report.emit(records, fmt, stdout)
