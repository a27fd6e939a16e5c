"""What a suite is: its case axes, how it makes inputs, its float64 reference and its cost model.

A suite file in ``suites/`` subclasses :class:`Suite` and marks the class with
:func:`kbench.registry.suite`. Nothing here imports torch: suites import it
inside their methods, which run only in worker processes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kbench.errors import UserError

_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)")
SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
              "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


class ByteSize(int):
    """An axis type: a number of bytes, written 1000, 64KiB, 256MiB, 1GiB or 1.5GB (KB, MB, GB, TB
    are powers of 1000; KiB, MiB, GiB, TiB of 1024; units in any case). Parsed values are plain ints."""


def parse_size(text: str, option: str) -> int:
    """A byte count from ``text`` (see ByteSize); UserError naming ``option`` when it is not one."""
    match = _SIZE.fullmatch(text.strip().lower())
    unit = SIZE_UNITS.get(match.group(2)) if match else None
    if unit is None:
        raise UserError(f"{option}: {text!r} is not a size (bytes, or a number and a unit: "
                        "1000, 64KiB, 256MiB, 1GiB, 1.5GB)")
    number = match.group(1)
    whole, _, fraction = number.partition(".")
    # Exact arithmetic: 1.5GiB is 1610612736 bytes, not a float's approximation of it.
    numerator = int(whole or "0") * 10 ** len(fraction) + int(fraction or "0")
    value, rest = divmod(numerator * unit, 10 ** len(fraction))
    if rest:
        raise UserError(f"{option}: {text!r} is not a whole number of bytes")
    return value


def format_size(value: int) -> str:
    """The shortest exact spelling parse_size reads back: 268435456 -> 256MiB, 1000 -> 1000."""
    for name in ("TiB", "GiB", "MiB", "KiB"):
        unit = SIZE_UNITS[name.lower()]
        if value and value % unit == 0:
            return f"{value // unit}{name}"
    return str(value)


def parse_value(kind: type, text: str, option: str) -> Any:
    """One command-line value as ``kind`` (bool, int, float, str or ByteSize); UserError names ``option``."""
    if kind is ByteSize:
        return parse_size(text, option)
    if kind is bool:
        lowered = text.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise UserError(f"{option}: {text!r} is not a boolean (use true or false)")
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise UserError(f"{option}: {text!r} is not an integer") from None
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise UserError(f"{option}: {text!r} is not a number") from None
    return text


@dataclass(frozen=True)
class Axis:
    """One case parameter. Every axis becomes a ``kbench run SUITE --NAME`` option
    that takes one value or a comma-separated sweep (``--n 256,1024,4096``)."""

    name: str
    type: type  # int, float, str, bool or ByteSize
    default: tuple
    help: str
    choices: tuple | None = None

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")

    def parse(self, text: str) -> list:
        """Parse one option value ("256" or "256,1024") into a list of typed values."""
        values = []
        for part in str(text).split(","):
            part = part.strip()
            if not part:
                raise UserError(f"{self.option}: empty value in {text!r}")
            values.append(self._convert(part))
        return values

    def format(self, value: Any) -> str:
        """A value as the command line writes it (a ByteSize axis: 256MiB rather than 268435456)."""
        return format_size(value) if self.type is ByteSize and isinstance(value, int) else str(value)

    def _convert(self, part: str) -> Any:
        value = parse_value(self.type, part, self.option)
        if self.choices is not None and value not in self.choices:
            raise UserError(
                f"{self.option}: unknown value {part!r} (choose from {', '.join(map(str, self.choices))})"
            )
        return value


class Case:
    """One point of a suite's axes, e.g. n=256, d=128, batch=1, heads=1, dtype=fp16, causal=False."""

    def __init__(self, values: dict[str, Any]):
        self.values = dict(values)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def key(self) -> str:
        """Stable identity of the case, used to match records across runs."""
        return ",".join(f"{k}={v}" for k, v in self.values.items())

    def __repr__(self) -> str:
        return f"Case({self.key})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Case) and self.values == other.values

    def __hash__(self) -> int:
        return hash(self.key)


@dataclass(frozen=True)
class Column:
    """A column a suite adds to a case's results table: its header and one cell per record, in the
    records' order (rich markup; an empty cell shows as '-')."""

    header: str
    cells: tuple[str, ...]


class Suite:
    """Base class of a problem definition. Subclasses fill in the attributes and
    implement the methods that raise NotImplementedError.

    Besides the problem, a suite may add to kbench's output what is its own (the methods under
    "output" below): table columns, lines under a case's table, plots of its own metrics and
    `kbench explain` commands. The engine calls them; it knows no suite by name."""

    name: str = ""
    description: str = ""
    axes: tuple[Axis, ...] = ()
    baseline: str = ""  # implementation that speedups are measured against
    trials: int = 3  # correctness trials, each on fresh random inputs (at least one per distribution)
    # The input distributions the correctness trials draw from, in turn (make_inputs' ``distribution``).
    # A suite with more than one makes its trials cover them all: a kernel that is right only on
    # well-scaled inputs fails on the others. The record says which ones a kernel passed.
    distributions: tuple[str, ...] = ("normal",)
    # dtype name -> (atol, rtol) for |out - ref| <= atol + rtol * |ref|
    tolerances: dict[str, tuple[float, float]] = {}

    # --- cases -----------------------------------------------------------
    def validate(self, case: Case) -> None:
        """Raise UserError for a case no implementation could run (n <= 0...)."""

    def canonical(self, case: Case) -> Case:
        """The case as it is run: an axis that does not apply to it (a quantized cache's group for a
        16-bit cache) at its default, so that a sweep makes one case of what is one computation."""
        return case

    def dtype(self, case: Case) -> str:
        """The dtype name that picks the tolerance and the datasheet peak."""
        return case.values.get("dtype", "fp32")

    def tolerance(self, case: Case) -> tuple[float, float]:
        return self.tolerances[self.dtype(case)]

    def baseline_for(self, case: Case) -> str:
        """The implementation this case's speedups are relative to when `--baseline` is not given.
        One for the whole suite by default; a suite whose cases are different problems (lessons,
        each against its own plain variant) names one per case."""
        return self.baseline

    @property
    def baseline_per_case(self) -> bool:
        """Does this suite pick its baseline case by case (overrides baseline_for)?"""
        return type(self).baseline_for is not Suite.baseline_for

    # --- data ------------------------------------------------------------
    def make_inputs(self, case: Case, seed: int, device: str) -> dict:
        """Fresh random inputs (never zeros) for this case and seed, on ``device``. A suite with
        several ``distributions`` also takes ``distribution=NAME``."""
        raise NotImplementedError

    def draw(self, case: Case, seed: int, device: str, distribution: str | None = None) -> dict:
        """make_inputs for one of the suite's distributions (the first when None)."""
        if len(self.distributions) == 1:
            return self.make_inputs(case, seed=seed, device=device)
        return self.make_inputs(case, seed=seed, device=device, distribution=distribution or self.distributions[0])

    def input_error(self, case: Case, seed: int, device: str, distribution: str | None = None) -> dict:
        """The error the inputs of ``draw(case, seed, device, distribution)`` carry before any
        implementation runs, kept apart from the implementation's own (what a quantized input format
        loses against the values before quantization, say): name -> {"max_abs_err": x, "max_rel_err":
        y}, both float64 figures. The check asks once per input distribution, with the seed of that
        distribution's first trial; the record keeps each name's worst over the distributions and
        each distribution's (``correctness.input_error``). {}: the inputs are exact (the default)."""
        return {}

    def make_output(self, case: Case, inputs: dict):
        """An allocated, unwritten output buffer of the expected shape and dtype."""
        raise NotImplementedError

    def reference(self, case: Case, inputs: dict):
        """The exact answer computed in float64 (on the inputs' device)."""
        raise NotImplementedError

    def plain(self, case: Case, inputs: dict):
        """The problem computed the plain way in the case's own precision (inputs in their type, fp32
        accumulation, intermediates rounded where a straightforward kernel rounds them), or None.

        Where a suite gives one, a kernel's largest error against the float64 reference may be at
        most c times this computation's (kbench.correctness.PLAIN_FACTOR), plus one ulp of the output
        (the tolerance then sees precision); where it gives none, :meth:`tolerance` applies.

        A tuple of such computations: several correct ways of that precision whose errors differ by
        chance on some inputs (where one rounds an intermediate the other keeps, and the two
        roundings cancel or add); the bound takes the largest of their errors, so no kernel is judged
        against the luckier one alone."""
        return None

    def judge(self, case: Case, result, ref, inputs: dict) -> tuple[str, float | None, float | None] | None:
        """A suite whose output is not to be compared element by element with the reference (integer
        codes whose rounding ties may go either way, fields of several types packed in one buffer)
        judges a result here: (why it is wrong or "", max abs error, max relative error). ``result``
        already has the output's shape and dtype and is none of the harness's tensors; ``inputs`` are
        the harness's copies of the inputs. None (the default): the plain computation's bound, else
        the tolerance."""
        return None

    # --- cost model ------------------------------------------------------
    def flops(self, case: Case) -> float:
        raise NotImplementedError

    def min_bytes(self, case: Case) -> float:
        """The fewest bytes that must move through device memory: each input
        read once, each output written once."""
        raise NotImplementedError

    def explain(self, case: Case) -> dict:
        """Figures of the problem itself for `kbench explain` (suites add their own)."""
        flops, nbytes = self.flops(case), self.min_bytes(case)
        return {
            "FLOPs": f"{flops:,.0f}",
            "fewest bytes (inputs read once, outputs written once)": f"{nbytes:,.0f}",
            "arithmetic intensity at the fewest bytes": f"{flops / nbytes:,.1f} FLOP/byte",
        }

    # --- output: what the suite adds to kbench's tables, plots and explain -------------------
    # Metrics `kbench plot --metric` accepts for this suite besides tflops and gbps (drawn by plot()).
    plot_metrics: tuple[str, ...] = ()

    def columns(self, records: list) -> list[Column]:
        """Extra columns of one case's table (records: that case's rows, in table order)."""
        return []

    def summary_lines(self, records: list) -> list[str]:
        """Lines printed under one case's table (after the footnotes)."""
        return []

    def run_lines(self, records: list) -> list[str]:
        """Lines printed after all of a run's case tables, comparing its cases (records: this suite's rows
        of every case, in table order). Not for a run timed by the CPU's clock."""
        return []

    def plot(self, records: list, path: Path, metric: str) -> list[Path]:
        """Draw ``metric`` (one of plot_metrics) for this suite's records; the files written."""
        raise NotImplementedError(f"suite {self.name!r} draws no {metric!r} plot")

    def explain_commands(self) -> dict[str, Callable]:
        """Extra `kbench explain NAME` commands (typer command functions) this suite provides."""
        return {}
