"""Compare a baseline's results with a current run's: match, check the environments, decide.

Records are matched by (suite, label, case_key) (``label`` is the implementation
plus its ``--param`` values; older records without one use ``impl``). Where a
key appears more than once, the last record wins (a run appended to a file after
a FAIL, a crash or a SKIP of the same case), except that two OK records of one
key in one file are refused: which of the two timings is the measurement is
not for compare to guess (``--resume`` never runs a recorded case again, so it
makes no such pair; running twice into one ``--out`` does). Each matched pair
of OK records is decided from the raw samples (of the medians' timings; where one
side's median is graph replay, a launch-bound case timed again as replays, and the
other's is not, of the eager timing each side has: ``Pair.basis``, record.comparable):

- ``ratio`` = median(CURRENT) / median(BASE);
- ``p``: the two-sided Mann-Whitney U test of the two sets of samples;
- a distribution-free interval for the ratio at confidence 1 - alpha, from the
  order statistics of each set (a binomial interval for each median, at
  1 - alpha/2 each, combined at the extremes);
- **slower** if ratio > 1 + threshold and p < alpha; **faster** if ratio <
  1 / (1 + threshold) and p < alpha: a change must be both beyond the threshold
  and significant (asv's rule);
- **same** if the whole interval lies within [1 / (1 + threshold), 1 + threshold];
- **undecided** otherwise: too noisy, or too few samples, to say either.

Pairs that cannot be timed: **failed** (CURRENT is FAIL, CRASH or TIMEOUT),
**missing** (BASE has a measurement CURRENT lacks: no record, a SKIP, or one timed another way,
CUDA graph or not, L2 flushed or not: no timing of CURRENT's compares with BASE's),
**new** (CURRENT has a measurement BASE lacks), **skipped** (neither measured).

Nothing here prints or exits: :mod:`kbench.cli.compare_cmd` does. numpy and
scipy are imported where the statistics need them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from kbench import results
from kbench.record import Record, comparable
from kbench.stats import median_interval, ratio_interval  # noqa: F401 - median_interval: part of this API
from kbench.errors import UserError
from kbench.timing import L2_FLUSH, ZEROING_FLUSH

DECISIONS = ("slower", "faster", "same", "undecided", "failed", "missing", "new", "skipped")
# What must agree for two timings to be comparable: the device, its driver and
# CUDA runtime, and the versions of the libraries that compile or run the kernels.
ENV_FIELDS = ("device", "gpu.name", "gpu.driver", "gpu.cuda_runtime", "packages.torch", "packages.triton",
              "packages.cupy-cuda13x", "packages.cupy-cuda12x")


@dataclass
class Located:
    record: Record
    where: str  # "file:line", for messages


@dataclass
class Pair:
    key: tuple[str, str, str]
    base: Located | None
    current: Located | None
    decision: str = ""
    note: str = ""
    threshold: float | None = None
    ratio: float | None = None
    low: float | None = None  # interval of the ratio
    high: float | None = None
    p_value: float | None = None
    env_diff: list[tuple[str, object, object]] = field(default_factory=list)
    # "eager": the two sides' eager timings were compared, one side's median being graph replay and the
    # other's not (record.comparable), e.g. a launch-bound case against a baseline from before auto graphs.
    basis: str = ""

    @property
    def suite(self) -> str:
        return self.key[0]

    @property
    def label(self) -> str:
        return self.key[1]

    @property
    def case_key(self) -> str:
        return self.key[2]

    def median(self, side: str) -> float | None:
        located = getattr(self, side)
        if located is None:
            return None
        record = located.record
        if self.basis == "eager" and record.ok and record.timing.eager is not None:
            return record.timing.eager.stats.median  # the median this pair's ratio compares
        return record.median


# --- reading -----------------------------------------------------------------------------

def by_key(located: Iterable[tuple[Record, Path, int]]) -> dict[tuple, Located]:
    """Records read from results files (``kbench.load(...).located()``), by key: the last one wins; two
    OK records of one key in one file are a UserError naming both lines."""
    by_key: dict[tuple, Located] = {}
    ok_lines: dict[tuple[Path, tuple], int] = {}  # (file, key) -> line of that file's OK record
    for record, file, line in located:
        key = record.key
        if record.ok:
            first = ok_lines.get((file, key))
            if first is not None:
                raise UserError(f"{file}: lines {first} and {line} both hold an OK record of "
                                f"{describe_key(key)} (two runs into one file?): keep one of them")
            ok_lines[(file, key)] = line
        by_key[key] = Located(record, f"{file}:{line}")
    return by_key


# --- environments ----------------------------------------------------------------------------

def _get(data, dotted: str):
    for part in dotted.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def env_differences(base: Record, current: Record) -> list[tuple[str, object, object]]:
    """(field, base value, current value) for each field that makes two timings incomparable."""
    diffs = []
    if base.env is None or current.env is None:
        diffs.append(("env", "recorded" if base.env is not None else None,
                      "recorded" if current.env is not None else None))
    else:
        for name in ENV_FIELDS:
            a, b = _get(base.env, name), _get(current.env, name)
            if a != b:
                diffs.append((name, a, b))
    a, b = _method(base), _method(current)
    if base.timing and current.timing:  # what a pair compares: eager with eager where one side is graph-timed
        compared = comparable(base.timing, current.timing)
        a, b = compared[0].method, compared[1].method
    if a != b:  # CUDA graph or not, L2 flushed or not, CPU wall clock
        diffs.append(("timing.method", a, b))
    return diffs


# --- statistics --------------------------------------------------------------------------------

def p_value(base, current) -> float:
    """Two-sided Mann-Whitney U: could both sets of samples come from one distribution?"""
    if len(base) < 2 or len(current) < 2:
        return 1.0
    from scipy.stats import mannwhitneyu

    p = float(mannwhitneyu(base, current, alternative="two-sided").pvalue)
    return 1.0 if math.isnan(p) else p


@dataclass(frozen=True)
class Decision:
    decision: str
    ratio: float
    low: float
    high: float
    p_value: float


def decide(base, current, threshold: float, alpha: float) -> Decision:
    """Slower, faster, same or undecided, from two sets of samples (see the module's text)."""
    import numpy as np

    ratio = float(np.median(current) / np.median(base))
    low, high = ratio_interval(base, current, alpha)
    p = p_value(base, current)
    up, down = 1 + threshold, 1 / (1 + threshold)
    if ratio > up and p < alpha:
        verdict = "slower"
    elif ratio < down and p < alpha:
        verdict = "faster"
    elif down <= low and high <= up:
        verdict = "same"
    else:
        verdict = "undecided"
    return Decision(verdict, ratio, low, high, p)


# --- pairs -----------------------------------------------------------------------------------

def pair_up(base: dict[tuple, Located], current: dict[tuple, Located]) -> list[Pair]:
    """Every key of either side, BASE's order first; no decisions yet."""
    keys = list(base) + [key for key in current if key not in base]
    return [Pair(key, base.get(key), current.get(key)) for key in keys]


def timed_differently(base_method: str | None, current_method: str | None) -> str:
    """Why a pair timed two ways is not compared; where one side's L2 flush zeroed its buffer (a record
    from before the flush read it), what that cost and what to do."""
    note = f"timed differently: {base_method} in BASE, {current_method} in CURRENT"
    for side, method, other in (("BASE", base_method, current_method), ("CURRENT", current_method, base_method)):
        if (method or "").endswith(ZEROING_FLUSH) and (other or "").endswith(L2_FLUSH):
            note += (f"; {side}'s L2 flush zeroed its buffer, and a memory-bound call paid for the write-back "
                     f"of its dirty lines: time {side} again to compare")
    return note


def _method(record: Record) -> str | None:
    return record.timing.method if record.timing else None


def judge(pairs: list[Pair], threshold_of: Callable[[str], float], alpha: float) -> list[Pair]:
    """Decide every pair (in place) and return them."""
    for pair in pairs:
        b = pair.base.record if pair.base else None
        c = pair.current.record if pair.current else None
        b_ok = b is not None and b.ok
        c_ok = c is not None and c.ok
        if c is not None and c.status in results.FAILED:
            pair.decision, pair.note = "failed", f"{c.status}: {c.reason}".rstrip(": ")
        elif c is None:
            pair.decision, pair.note = "missing", "no record in CURRENT"
        elif b is None:
            pair.decision, pair.note = "new", "no record in BASE"
        elif b_ok and not c_ok:
            pair.decision, pair.note = "missing", f"CURRENT is {c.status}: {c.reason}".rstrip(": ")
        elif c_ok and not b_ok:
            pair.decision, pair.note = "new", f"BASE is {b.status}: {b.reason}".rstrip(": ")
        elif not b_ok and not c_ok:
            pair.decision, pair.note = "skipped", c.reason
        else:
            pair.env_diff = env_differences(b, c)
            if [name for name, _, _ in pair.env_diff] == ["timing.method"]:  # the same machine, timed another way
                _, base_method, current_method = pair.env_diff[0]
                pair.env_diff = []
                pair.decision = "missing"
                pair.note = timed_differently(base_method, current_method)
                continue
            pair.threshold = threshold_of(pair.suite)
            base_timing, current_timing, pair.basis = comparable(b.timing, c.timing)
            notes = [param_differences(b.params, c.params)]
            if pair.basis:
                notes.append("eager times compared (one side's median is graph replay, the other's is not)")
            pair.note = "; ".join(note for note in notes if note)
            base_samples, current_samples = list(base_timing.samples or []), list(current_timing.samples or [])
            if not base_samples or not current_samples:
                pair.decision, pair.note = "undecided", "no raw samples to test"
                pair.ratio = current_timing.stats.median / base_timing.stats.median
                continue
            verdict = decide(base_samples, current_samples, pair.threshold, alpha)
            pair.decision = verdict.decision
            pair.ratio, pair.low, pair.high, pair.p_value = verdict.ratio, verdict.low, verdict.high, verdict.p_value
    return pairs


def param_differences(base: dict, current: dict) -> str:
    """The parameters two records of one label ran with, where they differ (an implementation's default
    changed between the runs: the pair is still compared, and says so), or ""."""
    names = [name for name in {**base, **current} if base.get(name) != current.get(name)]
    if not names:
        return ""
    return "parameters differ: " + ", ".join(f"{name} {base.get(name)} in BASE, {current.get(name)} in CURRENT"
                                             for name in names)


def describe_key(key: tuple) -> str:
    suite, label, case_key = key
    return f"{suite}/{label} [{case_key}]"


def describe_env_diff(diffs: list[tuple[str, object, object]]) -> str:
    return ", ".join(f"{name} is {a!r} in BASE but {b!r} in CURRENT" for name, a, b in diffs)


def counts(pairs: list[Pair]) -> dict[str, int]:
    tally = {decision: 0 for decision in DECISIONS}
    for pair in pairs:
        tally[pair.decision] += 1
    return tally


def exit_code(pairs: list[Pair]) -> int:
    """1 on any regression or any failure in CURRENT, else 0."""
    return 1 if any(p.decision in ("slower", "failed") for p in pairs) else 0
