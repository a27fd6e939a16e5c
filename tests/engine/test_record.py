"""Typed records: every committed baseline reads and writes back unchanged, keys kbench does not know
survive, absent parts stay absent, and what is not a record (or is of a newer version) is one clear line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kbench import results
from kbench.record import SCHEMA, Clock, Record, RecordError, Stats, Timing

BASELINES = Path(__file__).resolve().parents[2] / "results" / "baselines"
EXPERIMENTS = BASELINES.parent / "experiments"  # the performance report's one-off comparisons
H200_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "h200"  # older record shapes among them
RECORD_FILES = (sorted(BASELINES.glob("*.jsonl")) + sorted(EXPERIMENTS.glob("*.jsonl"))
                + sorted(H200_FIXTURES.glob("*.jsonl")))


def _ok(**changes) -> dict:
    data = {"schema": 1, "created_at": "2026-11-29T12:00:00+00:00", "suite": "attention", "impl": "naive",
            "label": "naive", "params": {}, "backend": "torch", "case": {"n": 16}, "case_key": "n=16",
            "status": "OK", "reason": "", "baseline": "naive", "flops": 1.0, "min_bytes": 2.0,
            "timing": {"method": "cpu-wall-clock", "unit": "ms", "samples": [1.0, 1.1], "stats": {"median": 1.05},
                       "stop_reason": "max time", "warnings": []},
            "config": {}, "env": {"device": "cpu", "gpu": None}, "command": "kbench run attention"}
    data.update(changes)
    return data


# --- the committed baselines ----------------------------------------------------------------------

def test_there_are_baselines_to_read():
    assert len(RECORD_FILES) >= 10


@pytest.mark.parametrize("path", RECORD_FILES, ids=lambda p: p.stem)
def test_every_baseline_reads_and_writes_back_byte_for_byte(path):
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    records = results.read_strict(path)
    assert len(records) == len(lines)
    for line, (_, record) in zip(lines, records):
        assert json.dumps(record.to_json()) == json.dumps(json.loads(line))


@pytest.mark.parametrize("path", RECORD_FILES, ids=lambda p: p.stem)
def test_every_baseline_shows_and_compares(cli, path):
    shown = cli("show", path, "--format", "csv")
    assert shown.exit_code == 0, shown.output
    assert len(shown.stdout.splitlines()) == 1 + len(results.read_strict(path))
    failed = any(record.status in results.FAILED for _, record in results.read_strict(path))
    compared = cli("compare", path, path)
    assert compared.exit_code == (1 if failed else 0), compared.output  # a failure in CURRENT fails the gate
    assert ("FAILED:" if failed else "passed:") in compared.stdout


def test_the_records_of_a_baseline_have_their_fields():
    (_, first), *_ = results.read_strict(H200_FIXTURES / "attention-n4096-b4h16-interleaved.jsonl")
    assert first.ok and first.suite == "attention" and first.name == first.label
    assert first.timing.stats.median == first.median > 0
    assert first.timing.clock.sm_mhz_median > 1000
    assert first.gpu["name"] == "NVIDIA H200"
    assert first.metrics.tflops > 0 and first.roof.gpu == "h200"
    assert len(first.speedup_interval) == 2


def test_a_profile_summary_is_refused_as_not_a_results_file(cli, flat_text):
    summary = H200_FIXTURES / "attention-n4096-b4h16-ncu.json"
    result = cli("show", summary)
    assert result.exit_code == 2
    assert flat_text(result.stderr) == (f"kbench: error: {summary}:1: not a results file: one JSON object over "
                                        "several lines (kbench run writes one record a line)")


# --- what kbench does not know survives ------------------------------------------------------------

def test_unknown_keys_survive_a_round_trip_through_a_file(tmp_path):
    data = _ok(notes="rerun after a driver update", extra={"anything": [1, 2]},
               config={"tile": 64, "implementation_specific": {"ratio": 0.5}})
    data["timing"]["future_field"] = {"x": 1}
    data["timing"]["stats"]["p99"] = 1.2
    data["env"]["rack"] = "b7"
    record = Record.from_json(data)
    assert record.extra == {"notes": "rerun after a driver update", "extra": {"anything": [1, 2]}}
    assert record.timing.extra == {"future_field": {"x": 1}} and record.timing.stats.extra == {"p99": 1.2}
    out = results.ResultsFile(tmp_path / "r.jsonl")
    out.append(record)
    out.close()
    (again,) = results.read(tmp_path / "r.jsonl")
    assert again == record
    assert json.loads((tmp_path / "r.jsonl").read_text()) == data


def test_keys_keep_the_order_they_were_read_in():
    """Older kbench wrote the clock's keys in another order; a record read is written as it was."""
    data = _ok()
    data["timing"]["clock"] = {"sm_mhz_min": 1755, "sm_mhz_median": 1980, "sm_mhz_max_rated": 1980}
    assert list(Record.from_json(data).to_json()["timing"]["clock"]) == ["sm_mhz_min", "sm_mhz_median",
                                                                         "sm_mhz_max_rated"]
    built = Timing(stats=Stats(median=1.0), clock=Clock(sm_mhz_median=1980, sm_mhz_max_rated=1980))
    assert list(built.to_json()["clock"]) == ["sm_mhz_max_rated", "sm_mhz_median"]  # the fields' order


def test_a_record_read_writes_back_the_keys_it_had_and_the_fields_set_since():
    skip = {"schema": 1, "suite": "attention", "impl": "cupy-fa2", "case_key": "n=16", "status": "SKIP",
            "speedup": None, "figures": {}}
    record = Record.from_json(skip)
    assert record.timing is None and record.median is None and record.config == {} and record.gpu == {}
    assert record.to_json() == skip
    record.reason = "needs cupy"
    assert record.to_json() == {**skip, "reason": "needs cupy"}


def test_a_record_built_here_leaves_out_what_it_lacks():
    skip = Record(suite="attention", impl="cupy-fa2", case_key="n=16", status="SKIP", reason="needs cupy")
    assert skip.to_json() == {"schema": SCHEMA, "suite": "attention", "impl": "cupy-fa2", "params": {}, "case": {},
                              "case_key": "n=16", "status": "SKIP", "reason": "needs cupy"}
    timed = Record(suite="attention", impl="naive", case_key="n=16", status="OK",
                   timing=Timing(stats=Stats(median=1.0)))
    assert timed.to_json()["config"] == {}  # a measurement records what it ran with, if only {}
    assert "speedup" not in timed.to_json() and "figures" not in timed.to_json()
    timed.speedup = 1.5
    assert timed.to_json()["speedup"] == 1.5


def test_a_null_free_form_part_reads_as_empty():
    """An implementation's `run.config = None` was recorded as null: readers get {} to look into."""
    record = Record.from_json(_ok(config=None, figures=None))
    assert record.config == {} and record.figures == {}
    assert record.to_json()["config"] == {} and record.to_json()["figures"] == {}


def test_a_record_without_a_label_is_named_by_its_implementation():
    data = _ok()
    del data["label"]
    record = Record.from_json(data)
    assert record.name == "naive" and record.key == ("attention", "naive", "n=16")
    assert "label" not in record.to_json()


# --- what is not a record ---------------------------------------------------------------------------

@pytest.mark.parametrize("data,message", [
    (_ok(schema=SCHEMA + 1), f"schema version {SCHEMA + 1} is newer than this kbench reads ({SCHEMA})"),
    (_ok(schema="1"), "unknown schema version '1'"),
    (_ok(schema=True), "unknown schema version True"),
    (_ok(schema=1.0), "unknown schema version 1.0"),
    ([_ok()], "expected a JSON object (a record), got list"),
    (_ok(timing=[1.0]), "timing is not a JSON object (got list)"),
    (_ok(timing={"stats": 1.05}), "timing.stats is not a JSON object (got float)"),
    (_ok(timing={"method": "cpu-wall-clock"}), "an OK record without timing.stats"),
    (_ok(config=[64]), "config is not a JSON object (got list)"),
    (_ok(impl=""), "field 'impl' is missing or not a string"),
])
def test_what_is_not_a_record_says_why(data, message):
    with pytest.raises(RecordError, match=f"^{re.escape(message)}"):
        Record.from_json(data)


@pytest.mark.parametrize("command", ["show", "compare"])
def test_a_newer_file_is_one_line_naming_file_and_line(cli, tmp_path, flat_text, command):
    newer = tmp_path / "newer.jsonl"
    newer.write_text(json.dumps(_ok()) + "\n" + json.dumps(_ok(schema=SCHEMA + 1, case_key="n=32")) + "\n")
    result = cli(command, newer, newer) if command == "compare" else cli(command, newer)
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert flat_text(result.stderr) == (f"kbench: error: {newer}:2: schema version {SCHEMA + 1} is newer than "
                                        f"this kbench reads ({SCHEMA}): read it with the kbench that wrote it, "
                                        "or a newer one")


def test_a_line_that_is_not_a_record_is_one_line_naming_file_and_line(cli, tmp_path, flat_text):
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(json.dumps(_ok()) + "\n" + json.dumps({"gpu": "H200", "note": "not a record"}) + "\n")
    result = cli("show", mixed)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert flat_text(result.stderr) == f"kbench: error: {mixed}:2: unknown schema version None (this kbench " \
                                       f"reads version {SCHEMA})"
