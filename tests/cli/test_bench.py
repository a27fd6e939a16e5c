"""`kbench bench PLAN.toml`: a plan's runs into one results file, the summary of each kernel against its
peer, continuing a file, and one line for every kind of bad plan."""

from __future__ import annotations

import datetime as dt
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kbench import bench_plan, loader, results, runner
from kbench.peers import peer_ratios
from kbench.record import Record
from kbench.stats import speedup_interval

CPU = ["--device", "cpu", "--trials", "1", "--max-time", "0.1", "--min-time", "0.02"]
ATTENTION = ["--n", "64", "--d", "32", "--impl", "naive,sdpa", *CPU]
ATTENTION_CASE = "n=64,d=32,batch=1,heads=1,dtype=fp16,causal=False"
MATMUL = ["--m", "32", "--n", "32", "--k", "32", "--dtype", "fp32", "--impl", "cublas", *CPU]
PLANS = loader.PROJECT_ROOT / "results" / "plans"


def toml_list(args) -> str:
    return "[" + ", ".join(f'"{arg}"' for arg in args) + "]"


def write_plan(folder: Path, *runs, title="tiny set", name="tiny.toml") -> Path:
    """A plan of (suite, args) runs."""
    text = f'title = "{title}"\n' + "".join(f'\n[[run]]\nsuite = "{suite}"\nargs = {toml_list(args)}\n'
                                            for suite, args in runs)
    path = folder / name
    path.write_text(text)
    return path


# --- a real plan on the CPU ----------------------------------------------------------------------

def test_a_plan_runs_every_entry_into_one_file_and_sums_up(cli, tmp_path, jsonl, flat_text, wide_console):
    plan = write_plan(tmp_path, ("attention", ATTENTION), ("matmul", MATMUL))
    out = tmp_path / "all.jsonl"
    result = cli("bench", plan, "--out", out)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    records = jsonl(out)
    assert [(r["suite"], r["impl"], r["status"]) for r in records] == [
        ("attention", "naive", "OK"), ("attention", "sdpa", "OK"), ("matmul", "cublas", "OK")]
    # Each record says which run made it, as kbench run would have.
    assert records[0]["command"] == "kbench run attention " + " ".join(ATTENTION)
    assert records[2]["command"] == "kbench run matmul " + " ".join(MATMUL)
    text, err = flat_text(result.stdout), flat_text(result.stderr)
    # Each run's table, as kbench run prints it, then the summary.
    assert f"attention: {ATTENTION_CASE}" in text and "matmul: m=32,n=32,k=32,dtype=fp32,tf32=False" in text
    assert text.index("matmul: m=32") < text.index("tiny set: each kernel against its peer")
    naive, sdpa = records[0]["timing"], records[1]["timing"]
    ratio = naive["stats"]["median"] / sdpa["stats"]["median"]
    low, high = speedup_interval(naive["samples"], sdpa["samples"])
    summary = text[text.index("each kernel against its peer"):]
    assert f"attention {ATTENTION_CASE} sdpa OK" in summary
    cell = f"{ratio:.2f}x" + (f" [{low:.2f}-{high:.2f}]" if 0 < low <= high < math.inf else "")  # few samples: no bound
    assert f"naive {results_time(naive)} {cell}" in summary
    assert "matmul m=32,n=32,k=32,dtype=fp32,tf32=False cublas OK" in summary  # the peer alone: its own row
    assert "run 1 of 2: kbench run attention" in err and "run 2 of 2: kbench run matmul" in err
    assert f"results: {out} (3 records)" in err

    again = cli("bench", plan, "--out", out)  # the same file: every job is recorded, nothing runs
    assert again.exit_code == 0, again.output
    assert jsonl(out) == records
    assert "3 of 3 jobs already recorded, 0 to run" in flat_text(again.stderr)
    assert f"results: {out} (0 records, 3 from before)" in flat_text(again.stderr)
    assert f"naive {results_time(naive)} {cell}" in flat_text(again.stdout)  # the summary of the whole plan


def results_time(timing: dict) -> str:
    from kbench.report import format_time

    return format_time(timing["stats"]["median"])


# --- continuing a file, with the runner replaced -------------------------------------------------------

def fake_record(suite, label, case_key, baseline, median=1.0, status="OK", **fields) -> Record:
    record = {"schema": 1, "suite": suite, "impl": label, "label": label, "backend": "torch", "case": {},
              "case_key": case_key, "status": status, "reason": "", "baseline": baseline, "env": {"device": "cpu"}}
    if status == "OK":
        record["timing"] = {"method": "cpu-wall-clock", "samples": [median * (1 + i / 100) for i in range(9)],
                            "stats": {"median": median * 1.04, "p20": median, "p80": median, "n": 9},
                            "warnings": []}
    return Record.from_json({**record, **fields})


@pytest.fixture
def fake_runner(monkeypatch):
    """Replaces runner.run: each job not done gets a record at once; returns the jobs each call ran."""
    calls = []

    def run(registry, request, out, on_start, on_record, done=None):
        calls.append([])
        for variant in request.variants:
            for case in request.cases:
                if (request.suite, variant.label, case.key) in (done or {}):
                    continue
                on_start(variant, case)
                record = fake_record(request.suite, variant.label, case.key, request.baseline or variant.label)
                calls[-1].append((request.suite, variant.label))
                out.append(record)
                on_record(record)
        return []

    monkeypatch.setattr(runner, "run", run)
    return calls


def test_a_crash_costs_only_its_rows(cli, tmp_path, fake_runner, flat_text):
    """A plan killed while writing its last record: run again with the same --out, the torn line is
    cut off and only the jobs without a record run."""
    plan = write_plan(tmp_path, ("attention", ATTENTION), ("matmul", MATMUL))
    out = tmp_path / "r.jsonl"
    assert cli("bench", plan, "--out", out).exit_code == 0
    assert fake_runner == [[("attention", "naive"), ("attention", "sdpa")], [("matmul", "cublas")]]
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:2]) + lines[2][: len(lines[2]) // 2])  # matmul's record torn by a kill
    result = cli("bench", plan, "--out", out)
    assert result.exit_code == 0, result.output
    assert fake_runner[2:] == [[], [("matmul", "cublas")]]
    assert "removed its torn last line" in flat_text(result.stderr)
    assert "2 of 3 jobs already recorded, 1 to run" in flat_text(result.stderr)
    assert [(r.suite, r.label) for _, r in results.read_strict(out)] == [
        ("attention", "naive"), ("attention", "sdpa"), ("matmul", "cublas")]


def test_the_default_file_is_named_from_the_plan_and_the_date(cli, tmp_path, fake_runner, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan = write_plan(tmp_path, ("matmul", MATMUL), name="nightly.toml")
    assert cli("bench", plan).exit_code == 0
    expected = tmp_path / "results" / f"nightly-{dt.date.today():%Y%m%d}.jsonl"
    assert [r.label for r in results.read(expected)] == ["cublas"]


def test_a_failed_row_fails_the_plan(cli, tmp_path, monkeypatch):
    def run(registry, request, out, on_start, on_record, done=None):
        for variant in request.variants:
            record = fake_record(request.suite, variant.label, request.cases[0].key, "cublas", status="CRASH")
            out.append(record)
            on_record(record)

    monkeypatch.setattr(runner, "run", run)
    result = cli("bench", write_plan(tmp_path, ("matmul", MATMUL)), "--out", tmp_path / "r.jsonl")
    assert result.exit_code == 1, result.output


# --- bad plans: one line, exit 2, nothing run ------------------------------------------------------------

BAD_PLANS = {
    "toml": ('[[run]\nsuite = "attention"\n', "not valid TOML: "),
    "no runs": ('title = "x"\n', "no runs: add a [[run]] table"),
    "plan key": ('titel = "x"\n[[run]]\nsuite = "attention"\n', "unknown key 'titel' (a plan has title, run)"),
    "run key": ('[[run]]\nsuite = "attention"\narg = ["--n", "64"]\n', "run 1: unknown key 'arg'"),
    "no suite": ('[[run]]\nargs = ["--n", "64"]\n', "run 1: suite must name a suite"),
    "args text": ('[[run]]\nsuite = "attention"\nargs = "--n 64"\n', "run 1 (attention): args must be a list of strings"),
    "suite": ('[[run]]\nsuite = "attenton"\n', "run 1: unknown suite 'attenton'; did you mean 'attention'?"),
    "option": ('[[run]]\nsuite = "matmul"\nargs = ["--mm", "64"]\n', "run 1 (matmul): No such option: --mm"),
    "value": ('[[run]]\nsuite = "matmul"\nargs = ["--m", "0"]\n', "run 1 (matmul): --m must be positive"),
    "impl": ('[[run]]\nsuite = "matmul"\nargs = ["--impl", "cublass"]\n',
             "run 1 (matmul): unknown implementation 'cublass' for suite 'matmul'; did you mean 'cublas'?"),
    "extra": ('[[run]]\nsuite = "matmul"\nargs = ["--m", "64", "64"]\n', "run 1 (matmul): Got unexpected extra argument"),
    "out": ('[[run]]\nsuite = "matmul"\nargs = ["--out", "x.jsonl"]\n',
            "run 1 (matmul): --out is not for a plan's run"),
    "format": ('[[run]]\nsuite = "matmul"\nargs = ["--format", "json"]\n',
               "run 1 (matmul): --format is not for a plan's run"),
}


@pytest.mark.parametrize("kind", BAD_PLANS)
def test_a_bad_plan_is_one_line_and_nothing_runs(kind, kbench_proc, tmp_path):
    text, fragment = BAD_PLANS[kind]
    # A good run first: every run is checked before any starts.
    plan = tmp_path / "plan.toml"
    plan.write_text(text if kind in ("toml", "no runs", "plan key")
                    else f'[[run]]\nsuite = "matmul"\nargs = {toml_list(MATMUL)}\n' + text.replace("run 1", "run 2"))
    out = tmp_path / "r.jsonl"
    proc = kbench_proc("bench", plan, "--out", out, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    fragment = fragment if kind in ("toml", "no runs", "plan key") else fragment.replace("run 1", "run 2")
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"kbench: error: {plan}: ") and fragment in line, line
    assert not out.exists()


def test_a_missing_plan_file_is_one_line(cli, tmp_path, flat_text):
    result = cli("bench", tmp_path / "nope.toml")
    assert result.exit_code == 2
    assert flat_text(result.stderr) == f"kbench: error: cannot read plan '{tmp_path / 'nope.toml'}': No such file or directory"


def test_a_job_in_two_runs_is_refused(cli, tmp_path, fake_runner, flat_text):
    """One results file holds each job once: that is how a continued plan knows what is done."""
    plan = write_plan(tmp_path, ("attention", ATTENTION), ("attention", [*ATTENTION[:4], "--impl", "sdpa", *CPU]))
    result = cli("bench", plan, "--out", tmp_path / "r.jsonl")
    assert result.exit_code == 2
    assert (f"run 2 (attention) measures naive (the baseline its speedups need) at {ATTENTION_CASE}, as run 1 "
            "does: a plan measures each job once" in flat_text(result.stderr))
    assert fake_runner == []


def test_bench_help_does_not_import_torch(proc_env, tmp_path):
    script = textwrap.dedent("""
        import sys
        from typer.testing import CliRunner
        from kbench.cli import app
        result = CliRunner().invoke(app, ["bench", "--help"])
        assert result.exit_code == 0 and "PLAN.toml" in result.output, result.output
        print('torch' in sys.modules, 'numpy' in sys.modules)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=proc_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False"]


# --- the summary's rows ------------------------------------------------------------------------------

def test_peer_ratios_from_the_raw_samples_of_both_rows():
    peer = fake_record("scan", "torch-cumsum", "n=1", "torch-cumsum", median=2.0)
    fast = fake_record("scan", "blelloch", "n=1", "torch-cumsum", median=1.0)
    broken = fake_record("scan", "cupy-cumsum", "n=1", "torch-cumsum", status="FAIL")
    alone = fake_record("p2p", "copy", "bytes=1", "copy", median=3.0)
    rows = peer_ratios([peer, fast, broken, alone])
    assert [(r.suite, r.label, r.peer) for r in rows] == [("scan", "blelloch", "torch-cumsum"),
                                                         ("scan", "cupy-cumsum", "torch-cumsum"), ("p2p", "copy", "copy")]
    assert rows[0].ratio == pytest.approx(2.0)
    assert rows[0].interval == pytest.approx(speedup_interval(peer.timing.samples, fast.timing.samples))
    assert rows[0].median == fast.median and rows[0].peer_median == peer.median
    assert (rows[1].status, rows[1].ratio, rows[1].median) == ("FAIL", None, None)
    assert (rows[2].ratio, rows[2].median) == (None, alone.median)  # no ratio with itself


def test_a_peer_run_with_parameters_is_not_the_peer():
    """The peer is its run without --param, as the lesson verdicts take it."""
    plain = fake_record("matmul", "cublas", "m=1", "cublas", median=2.0)
    tuned = fake_record("matmul", "cublas", "m=1", "cublas", median=4.0)
    tuned.label = "cublas[x=1]"
    (row,) = peer_ratios([tuned, plain])
    assert row.label == "cublas[x=1]" and row.ratio == pytest.approx(0.5)


# --- the plans for the reference GPUs ----------------------------------------------------------------

def test_the_h200_plans_are_valid_and_cover_the_suites():
    from kbench.cli import bench_cmd

    single = bench_plan.read(PLANS / "h200.toml")
    double = bench_plan.read(PLANS / "h200x2.toml")
    assert {run.suite for run in single.runs} == {"attention", "matmul", "reduction", "scan", "streams", "patterns"}
    assert {run.suite for run in double.runs} == {"allreduce", "p2p"}
    prepared = bench_cmd.prepare_plan(single)  # every option parses and names what is loaded
    lessons = [run.cases[0].values["lesson"] for run in prepared if run.request.suite == "patterns"]
    assert sorted(lessons) == sorted(("transpose", "access", "divergence", "constant", "ptx"))
    bench_cmd.prepare_plan(double)


@pytest.mark.parametrize("path", sorted(PLANS.glob("*.toml")), ids=lambda p: p.name)
def test_every_plan_in_the_repository_is_ready_to_run(path):
    """Every option parses, every implementation and --param value exists, no job is measured twice."""
    from kbench.cli import bench_cmd

    assert bench_cmd.prepare_plan(bench_plan.read(path))


def test_ctrl_c_keeps_the_records_and_says_how_to_continue(cli, tmp_path, monkeypatch, flat_text):
    def run(registry, request, out, on_start, on_record, done=None):
        if request.suite == "matmul":
            raise KeyboardInterrupt
        for variant in request.variants:
            record = fake_record(request.suite, variant.label, request.cases[0].key, "naive")
            out.append(record)
            on_record(record)

    monkeypatch.setattr(runner, "run", run)
    plan = write_plan(tmp_path, ("attention", ATTENTION), ("matmul", MATMUL))
    out = tmp_path / "r.jsonl"
    result = cli("bench", plan, "--out", out)
    assert result.exit_code == 130, result.output
    assert [r.label for r in results.read(out)] == ["naive", "sdpa"]
    assert f"kbench bench {plan} --out {out} continues" in flat_text(result.stderr)
