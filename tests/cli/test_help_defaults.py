"""Every option of every command says in its --help what it is when not given: `[default: VALUE]` for an
option with a value, and for an option whose default is none, its help text says what happens without it.
A lone on-flag (--force, --resume) is off unless given, and says nothing more."""

from __future__ import annotations

import pytest
import typer
from typer.core import TyperOption

from kbench.cli import app


def _commands(command, path):
    """Every command under ``command``, as Click finds them (kbench's groups build theirs when asked)."""
    yield path, command
    if isinstance(command, typer.core.TyperGroup):
        ctx = typer.Context(command)
        for name in sorted(command.list_commands(ctx)):
            yield from _commands(command.get_command(ctx, name), [*path, name])


COMMANDS = [(path, command) for path, command in _commands(typer.main.get_command(app), [])
            if any(isinstance(p, TyperOption) for p in command.params)]


def _option_rows(help_text: str) -> dict[str, str]:
    """Each option's row of the rendered Options panel, its wrapped lines joined, by its first name."""
    rows: dict[str, str] = {}
    current = None
    for line in help_text.splitlines():
        body = line.strip().strip("│").strip()
        if not line.startswith("│") or not body:
            current = None
        elif line.startswith("│ -"):  # a row starts with the option's names
            current = body.split()[0]
            rows[current] = body
        elif current:  # a wrapped line of the same row
            rows[current] += " " + body
    return rows


def _shown_default(option: TyperOption) -> str | None:
    """What `[default: ...]` must say for this option, or None where there is no value to show."""
    if option.is_flag and not option.secondary_opts:
        return None  # a lone flag: off unless given
    if option.default is None or option.default in ((), []):
        return None
    if option.is_flag:  # --flush-l2/--no-flush-l2: the name of the side that is on
        return (option.opts if option.default else option.secondary_opts)[0].lstrip("-")
    return str(option.default)


def test_every_command_is_walked():
    names = {" ".join(path) for path, _ in COMMANDS}
    for name in ("compare", "show", "plot", "report", "roofline", "bench", "list", "env", "calibrate", "run attention",
                 "run matmul", "explain attention", "explain mma", "explain softmax", "profile attention"):
        assert name in names, name


@pytest.mark.parametrize("path, command", COMMANDS, ids=[" ".join(path) or "kbench" for path, _ in COMMANDS])
def test_every_option_shows_its_default_or_says_what_happens_without_it(cli, path, command):
    result = cli(*path, "--help", env={"COLUMNS": "250", "TERMINAL_WIDTH": "250"})
    assert result.exit_code == 0, result.output
    rows = _option_rows(result.stdout)
    for option in command.params:
        if not isinstance(option, TyperOption) or option.hidden or option.name == "help":
            continue
        row = rows[option.opts[0]]
        assert option.show_default is not False, f"{option.opts[0]} hides its default"
        shown = _shown_default(option)
        if shown is not None:
            assert f"[default: {shown}]" in row, (option.opts[0], row)
        elif not option.is_flag:
            assert "default" in row.lower(), f"{option.opts[0]}: say what happens without it: {row}"
