"""Records built by hand for tests that need a results file without running anything: an attention
row of the case n=1 (importable from any test folder: tests/ is on sys.path beside conftest.py)."""

from __future__ import annotations

from kbench.record import Record

KEY = "n=1"


def fake_record(impl: str, status: str = "OK", case_key: str = KEY, median: float = 1.0) -> Record:
    rec = {"schema": 1, "suite": "attention", "impl": impl, "label": impl, "backend": "torch", "case": {},
           "case_key": case_key, "status": status, "reason": "" if status == "OK" else f"why {status}",
           "baseline": "naive", "env": {"device": "cpu"}}
    if status == "OK":
        rec["timing"] = {"method": "cpu-wall-clock", "samples": [median] * 3,
                         "stats": {"median": median, "p20": median, "p80": median, "n": 3}, "warnings": []}
    return Record.from_json(rec)
