"""Results over time: each case's runs in order of measurement, and each implementation's changes from
one run to the next, decided exactly as `kbench compare` decides a pair (kbench.compare).

A case's history is kept per GPU (times of two GPUs are not a change). Its records are ordered by
``created_at``; a new run starts where the commit changes or an implementation comes again, so the
records one `kbench run` measured together (or several runs of one commit, each of other
implementations) make one run. Each implementation's consecutive records are a step, judged from the
raw samples with compare's test and threshold: a "slower" step is a regression.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from kbench import compare
from kbench.record import Record

NO_GPU = "no GPU (CPU)"  # the group of records measured without one


def gpu_name(record: Record) -> str:
    return record.gpu.get("name") or NO_GPU


def commit_of(record: Record) -> str | None:
    return ((record.env or {}).get("git") or {}).get("commit")


@dataclass
class Run:
    """The records of one case measured together: one commit, each implementation once."""

    records: list[Record]

    @property
    def commit(self) -> str | None:
        return commit_of(self.records[0])

    @property
    def created_at(self) -> str | None:
        return self.records[0].created_at

    @property
    def label(self) -> str:
        """The short commit and the date and time (UTC) the run began: "3b0c0f7 2026-12-01 05:08"."""
        when = (self.created_at or "")[:16].replace("T", " ")
        return " ".join(part for part in ((self.commit or "")[:7], when) if part) or "run"


@dataclass
class Step:
    """One implementation from its previous record to the next (run ``run`` of the history), as compare's Pair."""

    pair: compare.Pair
    run: int

    @property
    def label(self) -> str:
        return self.pair.label


@dataclass
class CaseHistory:
    gpu: str
    suite: str
    case_key: str
    runs: list[Run] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)

    @property
    def latest(self) -> Run:
        return self.runs[-1]

    @property
    def regressions(self) -> list[Step]:
        return [s for s in self.steps if s.pair.decision == "slower"]

    def step(self, label: str, run: int) -> Step | None:
        """The step that ends at ``label``'s record in run ``run``, if it has an earlier one."""
        return next((s for s in self.steps if s.label == label and s.run == run), None)


def split_runs(records: list[Record]) -> list[Run]:
    """One case's records (of one GPU) as runs, oldest first."""
    runs: list[Run] = []
    for r in sorted(records, key=lambda r: r.created_at or ""):  # stable: undated records keep their order
        current = runs[-1].records if runs else None
        if current is None or commit_of(r) != commit_of(current[0]) or r.name in {c.name for c in current}:
            runs.append(Run([r]))
        else:
            current.append(r)
    return runs


def histories(records: list[Record], threshold_of: Callable[[str], float], alpha: float) -> list[CaseHistory]:
    """Every (GPU, suite, case)'s history, in the order the records first name them, its steps judged."""
    groups: dict[tuple[str, str, str], list[Record]] = {}
    for r in records:
        groups.setdefault((gpu_name(r), r.suite, r.case_key), []).append(r)
    found = []
    for (gpu, suite, case_key), rows in groups.items():
        history = CaseHistory(gpu, suite, case_key, split_runs(rows))
        previous: dict[str, tuple[Run, Record]] = {}  # label -> its latest run and record so far
        for i, run in enumerate(history.runs):
            for r in run.records:
                if r.name in previous:
                    before_run, before = previous[r.name]
                    pair = compare.Pair(r.key, compare.Located(before, before_run.label), compare.Located(r, run.label))
                    history.steps.append(Step(pair, i))
                previous[r.name] = (run, r)
        compare.judge([s.pair for s in history.steps], threshold_of, alpha)
        found.append(history)
    return found
