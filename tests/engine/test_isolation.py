"""Worker isolation: a crash, a hang or an exception costs only its own row, in one run that finishes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
IMPLS = ["iso-ok", "iso-abort", "iso-segv", "iso-hang", "iso-raise", "iso-unwritten"]
TIMEOUT_S = 6


@pytest.fixture(scope="module")
def isolation_run(tmp_path_factory):
    """One CLI run of every misbehaving kernel over n=16 (where they misbehave) and n=24."""
    from typer.testing import CliRunner

    from kbench.cli import app

    folder = tmp_path_factory.mktemp("isolation")
    out = folder / "iso.jsonl"
    result = CliRunner().invoke(app, [
        "run", "attention", "--n", "16,24", "--d", "16", "--dtype", "fp32", "--max-time", "0.1",
        "--kernels", str(FIXTURES / "isolation"), "--impl", ",".join(IMPLS), "--baseline", "iso-ok",
        "--timeout", str(TIMEOUT_S), "--format", "json", "--out", str(out),
    ])
    file_records = [json.loads(line) for line in out.read_text().splitlines()]
    yield result, file_records
    for record in file_records:  # logs kept for the user: tidy up after the test
        if record.get("log"):
            Path(record["log"]).unlink(missing_ok=True)


def _rows(records, n):
    return {r["impl"]: r for r in records if r["case"]["n"] == n}


def test_run_finishes_with_every_row(isolation_run):
    result, records = isolation_run
    assert "Traceback" not in result.output
    assert [(r["impl"], r["case"]["n"]) for r in records] == [(i, n) for n in (16, 24) for i in IMPLS]
    assert json.loads(result.stdout) == records  # --format json prints what the file holds


def test_exit_code_is_1_when_rows_fail(isolation_run):
    result, _ = isolation_run
    assert result.exit_code == 1


def test_statuses_and_reasons(isolation_run):
    _, records = isolation_run
    bad = _rows(records, 16)
    assert bad["iso-ok"]["status"] == "OK"

    assert bad["iso-abort"]["status"] == "CRASH"
    assert bad["iso-abort"]["reason"].startswith("worker killed by SIGABRT")
    assert bad["iso-segv"]["status"] == "CRASH"
    assert bad["iso-segv"]["reason"].startswith("worker killed by SIGSEGV")

    assert bad["iso-hang"]["status"] == "TIMEOUT"
    assert bad["iso-hang"]["reason"] == f"no answer within {TIMEOUT_S:g} s (job); worker killed"

    assert bad["iso-raise"]["status"] == "CRASH"
    assert bad["iso-raise"]["reason"] == "raised ValueError: kaboom from iso-raise"

    assert bad["iso-unwritten"]["status"] == "FAIL"
    assert "outputs are NaN/Inf (unwritten" in bad["iso-unwritten"]["reason"]
    assert bad["iso-unwritten"]["correctness"]["ok"] is False


def test_every_implementation_recovers_on_the_next_case(isolation_run):
    """After a crash or a hang the next job gets a fresh worker; after an exception the same one goes on."""
    _, records = isolation_run
    good = _rows(records, 24)
    for name in ("iso-ok", "iso-abort", "iso-segv", "iso-hang", "iso-raise"):
        assert good[name]["status"] == "OK", (name, good[name].get("reason"))
        assert good[name]["env"]["device"] == "cpu"
    assert good["iso-unwritten"]["status"] == "FAIL"


def test_speedups_against_the_user_baseline(isolation_run):
    _, records = isolation_run
    for r in records:
        if r["status"] == "OK":
            assert r["speedup"] > 0
        else:
            assert "speedup" not in r and "metrics" not in r
    assert _rows(records, 24)["iso-ok"]["speedup"] == pytest.approx(1.0)


def test_crash_and_timeout_logs_are_kept(isolation_run):
    _, records = isolation_run
    bad = _rows(records, 16)
    abort_log = Path(bad["iso-abort"]["log"]).read_text()
    assert "Fatal Python error: Aborted" in abort_log
    assert "misbehaving_kernels.py" in abort_log  # faulthandler's stack names the kernel
    assert os.path.exists(bad["iso-hang"]["log"])


def test_crash_reason_names_where_it_crashed(isolation_run):
    """log_tail promises 'the last informative line' of the worker's log. After a fatal signal the
    last line is faulthandler's 'Extension modules: numpy..., torch._C, ...' list, which says nothing
    about the crash; the reason should carry the fatal error or the kernel's frame instead."""
    _, records = isolation_run
    for name in ("iso-abort", "iso-segv"):
        reason = _rows(records, 16)[name]["reason"]
        assert "Extension modules" not in reason, reason
        assert "Fatal Python error" in reason or "misbehaving_kernels.py" in reason, reason


def test_exception_traceback_is_kept_for_the_user(isolation_run):
    """worker.execute prints the kernel's full traceback 'to the worker's log', but the parent deletes
    a log whose worker did not crash or hang, so a CRASH by exception leaves no way to see where it
    raised. The record should point at a kept log holding the traceback, as CRASH-by-signal rows do."""
    _, records = isolation_run
    record = _rows(records, 16)["iso-raise"]
    assert record.get("log"), "no log recorded for a CRASH row"
    text = Path(record["log"]).read_text()
    assert "Traceback" in text and "kaboom from iso-raise" in text
    assert "misbehaving_kernels.py" in text


def test_json_output_is_strict_json(isolation_run):
    """--format json is for machines: NaN (the max error of a FAIL row) is not JSON (RFC 8259),
    so jq / JavaScript reject the whole output. Non-finite numbers should become null."""
    result, records = isolation_run
    # A FAIL on NaN output has no measurable error: null, not NaN.
    assert any(r["correctness"]["max_abs_err"] is None for r in records if r["status"] == "FAIL")

    def reject(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    json.loads(result.stdout, parse_constant=reject)


def test_compiler_errors_reads_one_jobs_share_of_the_log(tmp_path):
    from kbench.isolation import compiler_errors

    log = tmp_path / "worker.log"
    earlier = "old.py:1:1: error: an earlier job's failure\n"
    log.write_text(earlier + "Traceback (most recent call last):\n"
                   "ptxas error   : Entry function 'k' uses too much shared data (0x40000 bytes)\n"
                   "RuntimeError: PassManager::run failed\n"
                   "kernel.py:9:3: error: second\nkernel.py:10:3: error: third, past the two kept\n")
    said = compiler_errors(str(log), len(earlier))
    assert said == ("ptxas error   : Entry function 'k' uses too much shared data (0x40000 bytes) | "
                    "kernel.py:9:3: error: second")
    assert compiler_errors(str(log), log.stat().st_size) == ""  # nothing written since
    assert compiler_errors(str(tmp_path / "missing.log"), 0) == ""
