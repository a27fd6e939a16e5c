"""What every command shares: consoles and the one-line handling of a user's mistake."""

from __future__ import annotations

import contextlib
import os
import sys

import typer
from rich.console import Console
from rich.markup import escape

from kbench.errors import UserError

# Rich assumes 80 columns when output is not a terminal (CI logs, pipes): too
# narrow for a results table. $COLUMNS still wins where it is set.
_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 140
stdout = Console(width=_WIDTH)
stderr = Console(stderr=True, width=_WIDTH)


@contextlib.contextmanager
def user_errors():
    """Turn a UserError into one line on stderr and exit code 2 (never a traceback)."""
    try:
        yield
    except UserError as exc:
        stderr.print(f"[bold red]kbench: error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(exc.exit_code) from None


def split_list(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]
