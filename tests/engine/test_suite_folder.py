"""A suite is a folder: one defined outside kbench (tests/fixtures/suite_folder/scale, found through
$KBENCH_SUITES, its kernels through $KBENCH_KERNELS) runs, and what it adds to kbench's output through
the Suite hooks shows up, with no edit to kbench itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SUITES = FIXTURES / "suite_folder"
KERNELS = FIXTURES / "suite_folder_kernels"


@pytest.fixture
def env(proc_env):
    return proc_env(KBENCH_SUITES=str(SUITES), KBENCH_KERNELS=str(KERNELS), COLUMNS="200")


@pytest.fixture
def flat(flat_text):
    return flat_text


def test_a_suite_folder_adds_its_column_and_lines_to_the_table(kbench_proc, env, flat, tmp_path):
    out = tmp_path / "scale.jsonl"
    done = kbench_proc("run", "scale", "--n", "1000", "--max-time", "0.05", "--out", out, env=env)
    assert done.returncode == 0, done.stderr
    text = flat(done.stdout)
    assert "parity" in text  # the column's header
    # a row's name carries a * where a footnote (high noise on a busy CPU, say) is under the table
    assert re.search(r"loop\*? OK", text) and re.search(r"twice\*? OK", text)
    assert "scale: 2 rows, 2 OK" in text  # the summary line under the table
    shown = kbench_proc("show", out, env=env)  # a stored file gets the same additions
    assert shown.returncode == 0, shown.stderr
    assert "parity" in flat(shown.stdout) and "scale: 2 rows, 2 OK" in flat(shown.stdout)


def test_a_suite_folder_adds_its_plot_metric_and_explain_command(kbench_proc, env, flat, tmp_path):
    out = tmp_path / "scale.jsonl"
    assert kbench_proc("run", "scale", "--n", "1000", "--max-time", "0.05", "--out", out, env=env).returncode == 0
    plot = kbench_proc("plot", out, "--metric", "elements-per-ns", "--out", tmp_path / "p.png", env=env)
    assert plot.returncode == 0, plot.stderr
    assert (tmp_path / "p.txt").read_text() == "elements-per-ns: 2 records\n"
    wrong = kbench_proc("plot", out, "--metric", "busbw", env=env)
    assert wrong.returncode != 0 and "Traceback" not in wrong.stderr
    assert "one of scale's: elements-per-ns" in flat(wrong.stderr)
    walk = kbench_proc("explain", "scale-walk", env=env)
    assert walk.returncode == 0, walk.stderr
    assert "one element a thread" in walk.stdout


def test_a_missing_suite_folder_is_one_line(kbench_proc, proc_env, tmp_path):
    done = kbench_proc("list", env=proc_env(KBENCH_SUITES=str(tmp_path / "nowhere")))
    assert done.returncode != 0
    assert "KBENCH_SUITES" in done.stderr and "is not a folder" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_broken_or_clashing_suite_costs_only_itself(kbench_proc, proc_env, flat, tmp_path):
    """A suite folder whose definition raises, and one that reuses a built-in suite's name, are each one
    warning line naming the file; the built-in suites still list and run."""
    broken, clash = tmp_path / "suites" / "broken", tmp_path / "suites" / "clash"
    broken.mkdir(parents=True)
    clash.mkdir()
    (broken / "suite.py").write_text('raise RuntimeError("boom")\n')
    (clash / "suite.py").write_text("from kbench.registry import suite\nfrom kbench.suite import Suite\n\n\n"
                                    "@suite\nclass Attention(Suite):\n    name = 'attention'\n")
    env = proc_env(KBENCH_SUITES=str(tmp_path / "suites"))
    done = kbench_proc("run", "attention", "--n", "16", "--d", "16", "--impl", "naive", "--max-time", "0.02",
                       "--out", tmp_path / "r.jsonl", env=env)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    warnings = flat(done.stderr)  # rich wraps long lines
    assert f"could not load {broken / 'suite.py'}: RuntimeError: boom" in warnings
    assert f"could not load {clash / 'suite.py'}: ValueError: suite 'attention' is defined twice" in warnings
    assert "naive" in done.stdout and "OK" in done.stdout  # the built-in attention, not the clashing one
