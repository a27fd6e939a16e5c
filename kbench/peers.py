"""Each kernel against its peer, from the raw samples of both rows: the summary of a benchmark plan.

A record's peer is the implementation its run measured speedups against for its case (the record's
``baseline``), measured in the same run. The ratio is median(peer) / median(kernel), above 1 when the
kernel is faster, with its distribution-free 95 % interval (kbench.stats.speedup_interval), as the
run tables and docs/performance.md give it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kbench.record import Record, comparable


@dataclass(frozen=True)
class PeerRatio:
    suite: str
    case_key: str
    label: str
    status: str
    median: float | None  # ms; None unless OK
    peer: str
    peer_median: float | None
    ratio: float | None
    interval: tuple[float | None, float | None] | None  # a bound the samples cannot set is None
    basis: str = ""  # "eager": the ratio of eager times (one of the two rows graph-timed; record.comparable)


def _timed(record: Record | None) -> Record | None:
    return record if record is not None and record.median else None


def peer_row(rows: list[Record], peer: str) -> Record | None:
    """The peer's record among one case's rows: its run without --param first (a suite's own
    comparisons, the patterns lessons', take the same row)."""
    candidates = [r for r in rows if r.impl == peer]
    candidates.sort(key=lambda r: r.name != r.impl)
    return candidates[0] if candidates else None


def peer_ratios(records: list[Record]) -> list[PeerRatio]:
    """A row per record other than its peer, case by case in the order the records come; a case that
    measured nothing but its peer gets the peer's own row, without a ratio."""
    from kbench.stats import speedup_interval  # scipy: only when a summary is made

    by_case: dict[tuple[str, str], list[Record]] = {}
    for record in records:
        by_case.setdefault((record.suite, record.case_key), []).append(record)
    out = []
    for (suite, case_key), rows in by_case.items():
        for record in rows:
            peer = record.baseline or ""
            peers_row = peer_row(rows, peer)
            if record is peers_row and len(rows) > 1:
                continue
            mine, theirs = _timed(record), _timed(peers_row)
            ratio = interval = None
            basis = ""
            if mine and theirs and record is not peers_row:
                peer_timing, my_timing, basis = comparable(theirs.timing, mine.timing)  # like with like
                ratio = peer_timing.stats.median / my_timing.stats.median
                if my_timing.samples and peer_timing.samples:
                    interval = tuple(v if math.isfinite(v) and v > 0 else None
                                     for v in speedup_interval(peer_timing.samples, my_timing.samples))
            out.append(PeerRatio(suite, case_key, record.name, record.status, mine.median if mine else None, peer,
                                 theirs.median if theirs else None, ratio, interval, basis))
    return out
