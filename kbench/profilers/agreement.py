"""Does a profiler's kernel time per call agree with kbench's CUDA-event median of the same case?

A `kbench profile` summary (results/profiles/NAME.json) against the records of a `kbench run`: per
implementation, the profiler's time per call and the run's event median, within a tolerance (5 %).
Where the profiler reports cycles and the run recorded its SM clock, the profiler's time is taken at
the run's clock (its cycles over the run's median clock) before the two are compared: a profiled
single call runs at full clock, sustained sampling often at the power limit's lower one. Calls under
``min_us`` are listed but not checked (launch gaps dominate them), and so is a pair whose recorded
configurations differ (e.g. two autotuner choices: not the same kernel).

Used by ``kbench profile --against RUN.jsonl`` (right after profiling) and ``kbench profile agreement
NAME.json RUN.jsonl`` (an earlier profile). Exit codes: see :func:`exit_code`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from kbench.errors import UserError

if TYPE_CHECKING:  # annotations only: `kbench --help` imports this module for its defaults
    from kbench.record import Record

TOLERANCE = 0.05
MIN_US = 50.0


def check_limits(tolerance: float, min_us: float) -> None:
    """UserError unless the tolerance is a positive fraction and ``min_us`` a finite number of microseconds."""
    if not (math.isfinite(tolerance) and tolerance > 0):
        raise UserError(f"--tolerance must be a positive fraction, e.g. 0.05 for 5 % (got {tolerance})")
    if not (math.isfinite(min_us) and min_us >= 0):
        raise UserError(f"--min-us must be a finite number of microseconds, 0 or more (got {min_us})")


def read_summary(path: Path) -> dict:
    """A `kbench profile` summary, checked to be one; UserError (one line) otherwise."""
    path = Path(path)
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text (a kbench profile summary is JSON)") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON: {exc.msg} (line {exc.lineno})") from None
    outcomes = summary.get("implementations") if isinstance(summary, dict) else None
    if not isinstance(outcomes, list) or not all(isinstance(o, dict) and isinstance(o.get("label"), str)
                                                 for o in outcomes):
        raise UserError(f"{path}: not a kbench profile summary (results/profiles/NAME.json: a list of "
                        "implementations, each with its label)")
    return summary


def read_run(path: Path) -> list[dict]:
    """The records of a `kbench run` results file (JSONL or a JSON array), checked as `kbench compare` checks them."""
    from kbench.results import read_strict

    return [record for _, record in read_strict(Path(path))]


def check_case(records: list[Record], case_key: str, path: Path) -> None:
    """UserError unless the run timed ``case_key``: ``--against`` checks it before anything is profiled."""
    if not any(record.case_key == case_key and _event_median(record) is not None for record in records):
        cases = sorted({record.case_key for record in records})
        raise UserError(f"--against: {path} has no timed record of case {case_key} "
                        f"(its cases: {'; '.join(cases[:3])}{'; ...' if len(cases) > 3 else ''})")


def agreement(profiled_us: float | None, event_ms: float | None, tolerance: float = TOLERANCE,
              min_us: float = MIN_US) -> dict:
    """Does a profiler's kernel time per call agree with kbench's event median?

    ``checked`` is False under ``min_us`` (launch overhead dominates short calls) or without both figures.
    """
    if profiled_us is None or event_ms is None:
        return {"checked": False, "ok": None, "diff": None, "why": "missing figure"}
    event_us = event_ms * 1e3
    diff = (profiled_us - event_us) / event_us
    if event_us < min_us:
        return {"checked": False, "ok": None, "diff": diff, "why": f"under {min_us:g} us"}
    return {"checked": True, "ok": abs(diff) <= tolerance, "diff": diff, "why": ""}


def _measured(key: str) -> bool:
    """A config entry that is a measurement of the process, not a description of the kernel that ran:
    the autotuner's tuning time and whether it tuned (tuning_seconds, tuned_here) and its timings of
    each candidate (candidates_ms), which differ between two processes running the same kernel."""
    return "tun" in key or key.endswith("_ms")


def _event_median(record: Record) -> float | None:
    """The record's event median in ms, if it has one."""
    median = record.median
    return median if isinstance(median, (int, float)) and median > 0 else None


def agreement_rows(summary: dict, records: list[Record], tolerance: float = TOLERANCE,
                   min_us: float = MIN_US) -> list[dict]:
    """Per implementation of a ``kbench profile`` summary (results/profiles/NAME.json): its kernel time per
    call against the event median of the same implementation and case in ``records`` (a kbench run)."""
    timed = {}
    for record in records:
        if record.case_key == summary.get("case_key") and _event_median(record) is not None:
            timed[record.name] = record
    rows = []
    for outcome in summary.get("implementations", []):
        profiled = (outcome.get("per_call") or {}).get("time_us")
        record = timed.get(outcome["label"])
        event_ms = _event_median(record) if record else None
        verdict = agreement(profiled, event_ms, tolerance, min_us)
        ran, profiled_config = record.config if record else None, outcome.get("config")
        if verdict["checked"] and ran and profiled_config and ran != profiled_config:
            # e.g. an autotuner that chose another tile shape in the profiled process: not the same kernel
            differ = sorted(k for k in set(ran) | set(profiled_config)
                            if ran.get(k) != profiled_config.get(k) and not _measured(k))
            if differ:
                verdict = {**verdict, "checked": False, "ok": None,
                           "why": "another configuration ran: " + ", ".join(
                               f"{k} {ran.get(k)} vs {profiled_config.get(k)}" for k in differ[:4])}
        row = {"label": outcome["label"], "profiled_us": profiled,
               "event_us": event_ms * 1e3 if event_ms is not None else None, **verdict}
        at_clock = same_clock(outcome.get("per_call") or {}, record)
        if verdict["checked"] and at_clock is not None:
            # The profiler's call and the run's samples ran at different SM clocks (a single call at
            # full clock; sustained sampling at the power limit): compare the profiler's time at the
            # run's clock, i.e. its cycles over the run's median clock.
            profiled_at_run_clock, run_mhz, profiled_mhz = at_clock
            judged = agreement(profiled_at_run_clock, event_ms, tolerance, min_us)
            row.update(judged, profiled_us_at_run_clock=profiled_at_run_clock, run_mhz=run_mhz,
                       profiled_mhz=profiled_mhz)
        rows.append(row)
    return rows


def same_clock(per_call: dict, record: Record | None) -> tuple[float, float, float] | None:
    """(the profiled time per call at the run's SM clock in us, the run's clock, the profiled clock) where
    the profiler gave cycles and the run recorded its clock; None otherwise."""
    cycles, time_us = per_call.get("cycles"), per_call.get("time_us")
    clock = record.timing.clock if record and record.timing else None
    run_mhz = clock.sm_mhz_median if clock else None
    if not cycles or not time_us or not run_mhz:
        return None
    return cycles / run_mhz, run_mhz, cycles / time_us


def exit_code(rows: list[dict]) -> int:
    """0 when every checked implementation agrees, 1 when one does not, 2 when none could be checked."""
    checked = [row for row in rows if row["checked"]]
    if not checked:
        return 2
    return 0 if all(row["ok"] for row in checked) else 1
