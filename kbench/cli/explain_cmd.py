"""`kbench explain`: what the GPU will do for a case, before any profiling.

    kbench explain attention --n 256 --d 128 [--impl cupy-fa2] [--param block_n=128]
    kbench explain mma [--lane 0]
    kbench explain softmax [--scores 1,3,5,2 --values 10,20,30,40 --block 2]

The suite subcommands take the same case options as `kbench run`.
"""

from __future__ import annotations

import inspect
from typing import List, Optional

import typer
from rich.markup import escape
from rich.table import Table

from kbench import loader
from kbench.cli.common import split_list, stdout, user_errors
from kbench.cli.suite_options import SuiteGroup, add_suite_commands, option
from kbench.errors import UserError
from kbench.registry import parse_param_args, variants
from kbench.suite import Suite

EXAMPLE_SCORES = "1,3,5,2"  # the FlashAttention walkthrough's online-softmax example
EXAMPLE_VALUES = "10,20,30,40"


def build() -> typer.Typer:
    explain_app = typer.Typer(cls=SuiteGroup, no_args_is_help=True,
                              help="Launch geometry, resources and traffic of a case; mma.sync lane layouts; "
                                   "the online softmax step by step.")
    add_suite_commands(explain_app, explain_suite, [_explain_options],
                       help=lambda suite: f"Explain a case of: {suite.description}")
    explain_app.command("mma")(mma_command)
    explain_app.command("softmax")(softmax_command)
    return explain_app


def _explain_options(suite: Suite) -> list[inspect.Parameter]:
    return [
        option("impl", Optional[str], None, "--impl", help="Implementations to explain (default: all)."),
        option("param", Optional[List[str]], None, "--param", help="An implementation parameter NAME=VALUE."),
    ]


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


def mma_command(
    lane: Optional[int] = typer.Option(None, "--lane", help="Show one lane (0-31) instead of all 32."),
) -> None:
    """Which elements of A, B and D each lane holds in mma.sync.m16n8k16 (f16/bf16 in, f32 out)."""
    from kbench.mma_layout import a_elements, b_elements, d_elements

    with user_errors():
        if lane is not None and not 0 <= lane < 32:
            raise UserError(f"--lane must be 0..31 (got {lane})")
    table = Table(title="mma.sync.aligned.m16n8k16: elements (row, col) held by each lane; "
                        "groupID = lane / 4, threadInGroup = lane % 4", title_justify="left")
    for column in ("lane", "A 16x16: a0..a7 (4 registers of 2)", "B 16x8: b0..b3 (2 registers of 2)",
                   "D 16x8 fp32: d0..d3"):
        table.add_column(column)
    for i in range(32) if lane is None else [lane]:
        fmt = lambda pairs: " ".join(f"({r},{c})" for r, c in pairs)  # noqa: E731
        table.add_row(str(i), fmt(a_elements(i)), fmt(b_elements(i)), fmt(d_elements(i)))
    stdout.print(table)


def softmax_command(
    scores: str = typer.Option(EXAMPLE_SCORES, "--scores", help="Scores of one query row, comma-separated."),
    values: str = typer.Option(EXAMPLE_VALUES, "--values", help="The matching values (one number per key)."),
    block: int = typer.Option(2, "--block", help="Keys per block (the K/V tile)."),
) -> None:
    """The online softmax of one row, block by block: m, l and the unnormalised O, divided once at the end."""
    from kbench.online_softmax import softmax_weighted_sum, steps

    with user_errors():
        try:
            s = [float(x) for x in split_list(scores)]
            v = [float(x) for x in split_list(values)]
        except ValueError:
            raise UserError("--scores and --values take comma-separated numbers") from None
        if len(s) != len(v) or not s:
            raise UserError(f"--scores has {len(s)} numbers and --values {len(v)}: they must match")
        if block < 1:
            raise UserError("--block must be positive")
    table = Table(title="online softmax (m: running max, alpha = exp(m_old - m), l: running sum, "
                        "O: unnormalised output)", title_justify="left")
    for column in ("block", "scores", "values", "m", "exp(s - m)", "alpha", "l", "O"):
        table.add_column(column, justify="right")
    trace = steps(s, v, block)
    for st in trace:
        table.add_row(str(st.block), ", ".join(f"{x:g}" for x in st.scores), ", ".join(f"{x:g}" for x in st.values),
                      f"{st.m:g}", ", ".join(f"{p:.4f}" for p in st.p), f"{st.alpha:.4f}", f"{st.l:.4f}",
                      f"{st.o:.3f}")
    stdout.print(table)
    last = trace[-1]
    note = f"two-pass softmax: {softmax_weighted_sum(s, v):.4f}"
    if (scores, values) == (EXAMPLE_SCORES, EXAMPLE_VALUES):
        note += "; the FlashAttention walkthrough's 28.986 carries its 4-digit roundings"
    stdout.print(f"O = {last.o:.3f} / {last.l:.4f} = [bold]{last.o / last.l:.4f}[/]   ({note})")
