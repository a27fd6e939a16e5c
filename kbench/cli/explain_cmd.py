"""`kbench explain`: what the GPU will do for a case, before any profiling.

    kbench explain attention --n 256 --d 128 [--impl cupy-fa2] [--param block_n=128]
    kbench explain mma [--lane 0]          (added by the attention suite)

The suite subcommands take the same case options as `kbench run`; a suite may add commands of its own
(Suite.explain_commands).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, List, Optional

import typer
from rich.markup import escape
from rich.table import Table

from kbench.cli.common import split_list, stdout
from kbench.cli.suite_options import SuiteGroup, add_suite_commands, no_options, option

if TYPE_CHECKING:  # the suites and the registry load when a subcommand is first asked for, not for --help
    from kbench.suite import Suite

def build() -> typer.Typer:
    return typer.Typer(cls=SuiteGroup.of(_add_commands), callback=no_options, no_args_is_help=True,
                       help="Launch geometry, resources and traffic of a case; mma.sync lane layouts; "
                            "the online softmax step by step.")


def _add_commands(explain_app: typer.Typer) -> None:
    from kbench import loader

    add_suite_commands(explain_app, explain_suite, [_explain_options],
                       help=lambda suite: f"Explain a case of: {suite.description}")
    for suite in loader.builtin_suites().values():  # what a suite adds: `kbench explain mma` (attention)
        for name, command in suite.explain_commands().items():
            explain_app.command(name)(command)


def _explain_options(suite: Suite) -> list[inspect.Parameter]:
    return [
        option("impl", Optional[str], None, "--impl", help="Implementations to explain (default: all)."),
        option("param", Optional[List[str]], None, "--param", help="An implementation parameter NAME=VALUE (default: each implementation's own values)."),
    ]


def _is_table(value) -> bool:
    """A figure that is a table of its own (a list of rows, each a dict of column -> text), such as a
    kernel's lane table, printed after the figures."""
    return isinstance(value, list) and bool(value) and all(isinstance(row, dict) for row in value)


def _rows_table(title: str, rows: list[dict]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in rows[0]:
        table.add_column(escape(str(column)))
    for row in rows:
        table.add_row(*(escape(str(row.get(column, ""))) for column in rows[0]))
    return table


def _figures_table(title: str, figures: dict) -> Table:
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")
    for name, value in figures.items():
        table.add_row(escape(str(name)), escape(str(value)))
    return table


def explain_suite(suite: Suite, cases, *, impl, param) -> None:
    from kbench import loader
    from kbench.registry import parse_param_args, variants

    registry = loader.load()
    impls = registry.select(suite.name, split_list(impl) or None)
    chosen = variants(impls, parse_param_args(param or []))
    for case in cases:
        stdout.print(_figures_table(f"{suite.name}: {case.key}", suite.explain(case)))
        elsewhere = []  # an explain hook with nothing to say for this case (another lesson's kernel)
        for variant in chosen:
            if variant.impl.explain is None:
                continue
            figures = variant.impl.explain(case, variant.params)
            if not figures:
                elsewhere.append(variant.label)
                continue
            tables = {name: value for name, value in figures.items() if _is_table(value)}
            stdout.print(_figures_table(f"{variant.label}", {k: v for k, v in figures.items() if k not in tables}))
            for name, rows in tables.items():
                stdout.print(_rows_table(f"{variant.label}: {name}", rows))
        silent = [v.label for v in chosen if v.impl.explain is None]
        if silent:
            stdout.print(f"[dim]no launch walkthrough for: {', '.join(silent)}[/]")
        if elsewhere:
            stdout.print(f"[dim]not for this case: {', '.join(elsewhere)}[/]")
