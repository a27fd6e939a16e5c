"""A benchmark plan: a TOML file of runs that `kbench bench` makes one after the other, each a suite and
its options as `kbench run SUITE` spells them.

    title = "headline set"

    [[run]]
    suite = "SUITE"
    args = ["--n", "4096", "--interleave"]   # kbench run SUITE --n 4096 --interleave

This module reads the file and checks its shape; the options themselves are parsed by the command line,
with the suite's own options.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kbench.toml_parser import toml_loads
from kbench.errors import UserError

PLAN_KEYS = ("title", "run")
RUN_KEYS = ("suite", "args")


@dataclass(frozen=True)
class PlannedRun:
    number: int  # 1 for the plan's first [[run]]
    suite: str
    args: tuple[str, ...]

    @property
    def name(self) -> str:
        """How messages name this run: `run 2 (SUITE)`."""
        return f"run {self.number} ({self.suite})"


@dataclass(frozen=True)
class Plan:
    path: Path
    title: str
    runs: tuple[PlannedRun, ...]

    @property
    def stem(self) -> str:
        return self.path.stem


def read(path: Path) -> Plan:
    """The plan in ``path``; UserError naming the file for a missing file, bad TOML or a bad shape."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read plan {str(path)!r}: {getattr(exc, 'strerror', None) or exc}") from None
    loads, decode_error = toml_loads()
    if loads is None:
        raise UserError(f"{path}: reading a plan needs Python 3.11+ or the tomli package (pip install tomli)")
    try:
        data = loads(text)
    except decode_error as exc:
        raise UserError(f"{path}: not valid TOML: {exc}") from None
    unknown = [key for key in data if key not in PLAN_KEYS]
    if unknown:
        raise UserError(f"{path}: unknown key {unknown[0]!r} (a plan has {', '.join(PLAN_KEYS)})")
    title = data.get("title", path.stem)
    if not isinstance(title, str):
        raise UserError(f"{path}: title must be a string")
    entries = data.get("run")
    if not entries:
        raise UserError(f"{path}: no runs: add a [[run]] table with suite = \"NAME\" and args = [...]")
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise UserError(f"{path}: run must be an array of tables ([[run]])")
    return Plan(path, title, tuple(_run(path, number, entry) for number, entry in enumerate(entries, 1)))


def _run(path: Path, number: int, entry: dict) -> PlannedRun:
    where = f"{path}: run {number}"
    unknown = [key for key in entry if key not in RUN_KEYS]
    if unknown:
        raise UserError(f"{where}: unknown key {unknown[0]!r} (a run has {', '.join(RUN_KEYS)})")
    suite = entry.get("suite")
    if not isinstance(suite, str) or not suite:
        raise UserError(f"{where}: suite must name a suite (suite = \"NAME\")")
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        raise UserError(f"{where} ({suite}): args must be a list of strings, as the command line spells them "
                        f"(args = [\"--n\", \"4096\"])")
    return PlannedRun(number, suite, tuple(args))
