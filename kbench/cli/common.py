"""What every command shares: consoles and the one-line handling of a user's mistake."""

from __future__ import annotations

import contextlib
import os
import sys

import typer
from rich.console import Console
from rich.markup import escape

from kbench.errors import UserError

try:  # Typer 0.22 and later carry their own copy of Click
    from typer._click.exceptions import ClickException
except ImportError:  # pragma: no cover - older Typer on Click
    from click.exceptions import ClickException

# Rich assumes 80 columns when output is not a terminal (CI logs, pipes): too
# narrow for a results table. $COLUMNS still wins where it is set.
_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 140
stdout = Console(width=_WIDTH)
stderr = Console(stderr=True, width=_WIDTH)


def print_error(message: str) -> None:
    """`kbench: error: MESSAGE` on stderr, one physical line however long (soft_wrap: rich never breaks it)."""
    stderr.print(f"[bold red]kbench: error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def click_error_line(exc: ClickException) -> str:
    """Click's message for a usage error (an unknown option, a bad value) on one line, with where to look."""
    message = " ".join(exc.format_message().split()).rstrip(".")  # Click's messages may span lines
    ctx = getattr(exc, "ctx", None)
    if ctx is not None and ctx.command.get_help_option(ctx) is not None:
        message += f" (see '{ctx.command_path} --help')"
    return message


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
