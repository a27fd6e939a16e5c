"""The Python API (kbench/api.py): kbench.load and kbench.run give records and a pandas DataFrame, with
kbench run's options and messages, and `import kbench` stays light."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import kbench
from kbench import results
from kbench.errors import UserError

REPO = Path(__file__).resolve().parents[2]
BASELINES = REPO / "results" / "baselines"


def test_load_gives_one_row_per_record_with_the_case_axes_as_columns():
    loaded = kbench.load(BASELINES)
    records = [r for f in results.results_files(BASELINES) for _, r in results.read_strict(f)]
    assert len(loaded) == len(records) > 0
    frame = loaded.to_pandas()
    assert len(frame) == len(records)
    row = frame[(frame.suite == "attention") & (frame.impl == "triton-fa2")].iloc[0]
    record = next(r for r in loaded if r.suite == "attention" and r.impl == "triton-fa2")
    assert (row["n"], row["d"], row["dtype"]) == (record.case["n"], record.case["d"], record.case["dtype"])
    assert row.median_ms == record.median and row.speedup == record.speedup
    assert [row.speedup_low, row.speedup_high] == record.speedup_interval
    assert row.sm_mhz == record.timing.clock.sm_mhz_median and row.gpu == "NVIDIA H200"
    assert len(loaded.where(suite="scan")) == len(frame[frame.suite == "scan"]) > 0


def test_loaded_records_know_their_file_and_line_for_compare():
    """kbench compare reads each side through kbench.load: a record's file:line, kept through where()."""
    loaded = kbench.load(BASELINES).where(suite="scan")
    first_scan = next((f, line) for f in results.results_files(BASELINES) for line, r in results.read_strict(f)
                      if r.suite == "scan")
    record, file, line = next(loaded.located())
    assert (file, line) == first_scan and record is loaded[0]
    assert [located[0] for located in loaded.located()] == loaded.records


def test_run_measures_as_the_command_line_does(tmp_path):
    out = tmp_path / "r.jsonl"
    measured = kbench.run("attention", impl="naive,sdpa", n=[32, 48], d=16, max_time=0.05, device="cpu", out=out)
    assert [(r.impl, r.case["n"], r.status) for r in measured] == [  # case by case, the baseline first
        ("naive", 32, "OK"), ("sdpa", 32, "OK"), ("naive", 48, "OK"), ("sdpa", 48, "OK")]
    assert [r.key for r in results.read(out)] == [r.key for r in measured]  # the records went to the file
    assert measured[0].command == f"kbench run attention --impl naive,sdpa --n 32,48 --d 16 --max-time 0.05 " \
                                  f"--device cpu --out {out}"
    frame = measured.to_pandas()
    assert list(frame.n) == [32, 32, 48, 48] and (frame.speedup > 0).all()
    again = kbench.run("attention", impl="naive,sdpa", n=[32, 48], d=16, max_time=0.05, device="cpu", out=out,
                       resume=True)  # nothing left to measure: the same records back, none appended
    assert [r.key for r in again] == [r.key for r in measured] and len(results.read(out)) == 4


def test_run_flags_take_bools(tmp_path):
    (record,) = kbench.run("attention", impl="naive", n=16, d=16, causal=True, max_time=0.02, device="cpu",
                           out=tmp_path / "r.jsonl")
    assert record.case["causal"] is True and "--causal" in record.command


@pytest.mark.parametrize("suite, options, message", [
    ("atention", {}, "unknown suite 'atention'; did you mean 'attention'?"),
    ("attention", {"nn": 3}, "unknown option 'nn'"),
    ("attention", {"n": "abc"}, "--n: 'abc' is not an integer"),
    ("attention", {"impl": "nope"}, "unknown implementation 'nope'"),
])
def test_run_refuses_bad_options_with_kbench_runs_messages(suite, options, message):
    with pytest.raises(UserError, match=message.replace("?", r"\?").replace("(", r"\(")):
        kbench.run(suite, **options)


def test_load_refuses_what_is_not_a_results_file(tmp_path):
    (tmp_path / "x.jsonl").write_text('{"not": "a record"}\n')
    with pytest.raises(UserError, match="x.jsonl"):
        kbench.load(tmp_path / "x.jsonl")


def test_import_kbench_loads_neither_pandas_nor_torch():
    code = "import sys, kbench; kbench.ResultSet; print('pandas' in sys.modules, 'torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["False", "False"], done.stderr


def test_the_example_script_runs():
    done = subprocess.run([sys.executable, str(REPO / "docs" / "examples" / "results_in_pandas.py")],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert "triton-fa2" in done.stdout and "sdpa" in done.stdout
