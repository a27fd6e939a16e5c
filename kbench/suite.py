"""What a suite is: its case axes, how it makes inputs, its float64 reference and its cost model.

A suite file in ``suites/`` subclasses :class:`Suite` and marks the class with
:func:`kbench.registry.suite`. Nothing here imports torch: suites import it
inside their methods, which run only in worker processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kbench.errors import UserError


def parse_value(kind: type, text: str, option: str) -> Any:
    """One command-line value as ``kind`` (bool, int, float or str); UserError names ``option``."""
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
    type: type  # int, float, str or bool
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


class Suite:
    """Base class of a problem definition. Subclasses fill in the attributes and
    implement the methods that raise NotImplementedError."""

    name: str = ""
    description: str = ""
    axes: tuple[Axis, ...] = ()
    baseline: str = ""  # implementation that speedups are measured against
    trials: int = 3  # correctness trials, each on fresh random inputs
    # dtype name -> (atol, rtol) for |out - ref| <= atol + rtol * |ref|
    tolerances: dict[str, tuple[float, float]] = {}

    # --- cases -----------------------------------------------------------
    def validate(self, case: Case) -> None:
        """Raise UserError for a case no implementation could run (n <= 0...)."""

    def dtype(self, case: Case) -> str:
        """The dtype name that picks the tolerance and the datasheet peak."""
        return case.values.get("dtype", "fp32")

    def tolerance(self, case: Case) -> tuple[float, float]:
        return self.tolerances[self.dtype(case)]

    # --- data ------------------------------------------------------------
    def make_inputs(self, case: Case, seed: int, device: str) -> dict:
        """Fresh random inputs (never zeros) for this case and seed, on ``device``."""
        raise NotImplementedError

    def make_output(self, case: Case, inputs: dict):
        """An allocated, unwritten output buffer of the expected shape and dtype."""
        raise NotImplementedError

    def reference(self, case: Case, inputs: dict):
        """The exact answer computed in float64 (on the inputs' device)."""
        raise NotImplementedError

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
