"""`kbench explain`: what the GPU will do for a case, before any profiling.

    kbench explain attention --n 256 --d 128 [--impl cupy-fa2] [--param block_n=128]
    kbench explain mma [--lane 0]          (added by the attention suite)

The suite subcommands take the same case options as `kbench run`; a suite may add commands of its own
(Suite.explain_commands).
"""

from __future__ import annotations

import inspect
from typing import List, Optional

import typer
from rich.markup import escape
from rich.table import Table

from kbench import loader
from kbench.cli.common import split_list, stdout, user_errors
from kbench.cli.run_cmd import SuiteGroup, _axis_options, make_cases
from kbench.registry import parse_param_args, variants
from kbench.suite import Suite

def build() -> typer.Typer:
    explain_app = typer.Typer(cls=SuiteGroup, no_args_is_help=True,
                              help="Launch geometry, resources and traffic of a case; mma.sync lane layouts; "
                                   "the online softmax step by step.")
    registry = loader.load(with_kernels=False)
    for suite in registry.suites.values():
        explain_app.command(suite.name, help=f"Explain a case of: {suite.description}")(_suite_command(suite))
    for suite in registry.suites.values():  # what a suite adds: `kbench explain mma` (attention)
        for name, command in suite.explain_commands().items():
            explain_app.command(name)(command)
    return explain_app


def _suite_command(suite: Suite):
    axis_names = [axis.name for axis in suite.axes]

    def command(**options) -> None:
        with user_errors():
            cases = make_cases(suite, {name: options.pop(name) for name in axis_names})
            explain_suite(suite, cases, **options)

    common = [
        inspect.Parameter("impl", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str],
                          default=typer.Option(None, "--impl", help="Implementations to explain (default: all).")),
        inspect.Parameter("param", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[List[str]],
                          default=typer.Option(None, "--param", help="An implementation parameter NAME=VALUE.")),
    ]
    command.__signature__ = inspect.Signature(_axis_options(suite) + common)
    command.__name__ = suite.name
    return command


def _figures_table(title: str, figures: dict) -> Table:
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")
    for name, value in figures.items():
        table.add_row(escape(str(name)), escape(str(value)))
    return table


def explain_suite(suite: Suite, cases, *, impl, param) -> None:
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
            stdout.print(_figures_table(f"{variant.label}", figures))
        silent = [v.label for v in chosen if v.impl.explain is None]
        if silent:
            stdout.print(f"[dim]no launch walkthrough for: {', '.join(silent)}[/]")
        if elsewhere:
            stdout.print(f"[dim]not for this case: {', '.join(elsewhere)}[/]")
