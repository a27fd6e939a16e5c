"""What the attention suite adds to `kbench explain`: the mma.sync fragment layout its hand-written
kernel uses, and the online softmax its FlashAttention kernels compute, step by step.

    kbench explain mma [--lane 0]
    kbench explain softmax [--scores 1,3,5,2 --values 10,20,30,40 --block 2]
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from kbench.cli.common import split_list, stdout, user_errors
from kbench.errors import UserError
from kbench.loader import load_helper

_HERE = Path(__file__).resolve().parent
_layout = load_helper(_HERE / "mma_layout.py")
a_elements, b_elements, d_elements = _layout.a_elements, _layout.b_elements, _layout.d_elements
_softmax = load_helper(_HERE / "online_softmax.py")
softmax_weighted_sum, steps = _softmax.softmax_weighted_sum, _softmax.steps

EXAMPLE_SCORES = "1,3,5,2"  # the FlashAttention walkthrough's online-softmax example
EXAMPLE_VALUES = "10,20,30,40"


def mma_command(
    lane: Optional[int] = typer.Option(None, "--lane", help="Show one lane, 0-31 (default: all 32)."),
) -> None:
    """Which elements of A, B and D each lane holds in mma.sync.m16n8k16 (f16/bf16 in, f32 out)."""

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
