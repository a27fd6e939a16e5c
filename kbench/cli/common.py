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


def print_error(message: str) -> None:
    """`kbench: error: MESSAGE` on stderr, one physical line however long (soft_wrap: rich never breaks it)."""
    stderr.print(f"[bold red]kbench: error:[/] {escape(message)}", highlight=False, soft_wrap=True)


@contextlib.contextmanager
def user_errors():
    """Turn a UserError into one line on stderr and exit code 2 (never a traceback)."""
    try:
        yield
    except UserError as exc:
        print_error(str(exc))
        raise typer.Exit(exc.exit_code) from None


def split_list(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]
