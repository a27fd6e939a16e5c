"""`kbench compare`: decisions on recorded fixtures, exit codes, environments, missing cases, config,
markdown, and every malformed results file. The fixtures are records with synthetic samples drawn
from seeded generators: no test here depends on a real timing."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kbench
from kbench import compare, compare_thresholds, results
from kbench.errors import UserError
from kbench.record import Record


def load_keyed(path):
    """A results file's records by key, as kbench compare reads each side."""
    return compare.by_key(kbench.load(path).located())


ENV = {"kbench": "0.1.0", "device": "cuda",
       "gpu": {"name": "NVIDIA H200", "uuid": "GPU-1", "driver": "580.159.03", "cuda_runtime": "13.0"},
       "packages": {"torch": "2.11.0", "triton": "3.6.0", "cupy-cuda13x": "14.2.0", "numpy": "2.5.2"}}
CASE = "n=4096,d=128,batch=1,heads=1,dtype=fp16,causal=False"
CASE2 = "n=1024,d=128,batch=1,heads=1,dtype=fp16,causal=False"


def samples(median: float = 1.0, noise: float = 0.01, n: int = 200, seed: int = 0) -> list[float]:
    """Timing-like samples: a median, a relative spread and a long right tail (lognormal)."""
    rng = np.random.default_rng(seed)
    return [round(float(x), 6) for x in median * np.exp(noise * rng.standard_normal(n))]


def record(times=None, label="cupy-fa2", case_key=CASE, suite="attention", status="OK", env=ENV, reason="",
           method="cuda-events+l2-flush", impl=None) -> dict:
    rec = {"schema": 1, "created_at": "2026-11-29T12:00:00+00:00", "suite": suite, "impl": impl or label.split("[")[0],
           "label": label, "params": {}, "backend": "cupy", "case": {}, "case_key": case_key, "status": status,
           "reason": reason, "baseline": "naive", "env": env, "command": "kbench run attention"}
    if status == "OK":
        times = samples() if times is None else times
        rec["timing"] = {"method": method, "unit": "ms", "samples": times,
                         "stats": {"median": float(np.median(times)), "n": len(times)}, "warnings": []}
    return rec


def typed(**changes) -> Record:
    """record(**changes) as the readers get it."""
    return Record.from_json(record(**changes))


def write(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture
def base_file(tmp_path):
    """A baseline: two implementations on two cases."""
    return write(tmp_path / "base.jsonl", [
        record(samples(seed=1), label="cupy-fa2"),
        record(samples(2.0, seed=2), label="sdpa"),
        record(samples(0.3, seed=3), label="cupy-fa2", case_key=CASE2),
        record(samples(0.5, seed=4), label="sdpa", case_key=CASE2),
    ])


def current_like(tmp_path, changes: dict | None = None, name="current.jsonl", drop=(), extra=()) -> Path:
    """The baseline's four records with new draws (other seeds); ``changes`` maps (label, case) -> record."""
    recs = {("cupy-fa2", CASE): record(samples(seed=11), label="cupy-fa2"),
            ("sdpa", CASE): record(samples(2.0, seed=12), label="sdpa"),
            ("cupy-fa2", CASE2): record(samples(0.3, seed=13), label="cupy-fa2", case_key=CASE2),
            ("sdpa", CASE2): record(samples(0.5, seed=14), label="sdpa", case_key=CASE2)}
    recs.update(changes or {})
    for key in drop:
        recs.pop(key)
    return write(tmp_path / name, [*recs.values(), *extra])


# --- the decision rule on synthetic samples -------------------------------------------------

def test_same_distribution_is_same():
    d = compare.decide(samples(seed=1), samples(seed=2), threshold=0.05, alpha=0.01)
    assert d.decision == "same"
    assert d.ratio == pytest.approx(1.0, abs=0.01)
    assert 1 / 1.05 <= d.low <= d.ratio <= d.high <= 1.05


def test_clearly_slower_by_20_percent():
    d = compare.decide(samples(seed=1), samples(1.2, seed=2), threshold=0.05, alpha=0.01)
    assert d.decision == "slower"
    assert d.ratio == pytest.approx(1.2, rel=0.01)
    assert d.p_value < 1e-6
    assert d.low > 1.05


def test_clearly_faster_by_20_percent():
    d = compare.decide(samples(seed=1), samples(0.8, seed=2), threshold=0.05, alpha=0.01)
    assert d.decision == "faster"
    assert d.ratio == pytest.approx(0.8, rel=0.01) and d.p_value < 1e-6


def test_noisy_samples_are_undecided():
    """8 samples with a 30 % spread: the medians differ by ~10 %, but nothing can be concluded."""
    d = compare.decide(samples(noise=0.3, n=8, seed=5), samples(1.1, noise=0.3, n=8, seed=6), 0.05, 0.01)
    assert d.decision == "undecided"
    assert d.p_value >= 0.01
    assert d.low < 1 / 1.05 or d.high > 1.05


def test_beyond_threshold_but_not_significant_is_undecided():
    """Three samples each cannot reach p < 0.01 with Mann-Whitney U, however far apart."""
    d = compare.decide([1.0, 1.01, 0.99], [1.5, 1.52, 1.49], threshold=0.05, alpha=0.01)
    assert d.ratio > 1.4
    assert d.decision == "undecided" and d.p_value > 0.01


def test_significant_but_within_threshold_is_same():
    """asv's rule: a 2 % change, however certain, is not a regression at a 5 % threshold."""
    d = compare.decide(samples(noise=0.002, n=500, seed=1), samples(1.02, noise=0.002, n=500, seed=2), 0.05, 0.01)
    assert d.p_value < 1e-10
    assert d.decision == "same"


def test_threshold_decides_a_moderate_change():
    base, cur = samples(noise=0.005, seed=1), samples(1.08, noise=0.005, seed=2)
    assert compare.decide(base, cur, threshold=0.05, alpha=0.01).decision == "slower"
    assert compare.decide(base, cur, threshold=0.10, alpha=0.01).decision == "same"


def test_median_interval_small_and_large_samples():
    assert compare.median_interval([1.0, 2.0], 0.01) == (0.0, float("inf"))  # too few to say anything
    x = samples(noise=0.05, n=1000, seed=3)
    low, high = compare.median_interval(x, 0.01)
    assert low < float(np.median(x)) < high
    assert high / low < 1.02
    assert compare.p_value([1.0], [2.0]) == 1.0
    assert compare.p_value([1.0, 1.0, 1.0], [1.0, 1.0, 1.0]) == 1.0  # all ties: no evidence


# --- environments -------------------------------------------------------------------------------

@pytest.mark.parametrize("path,value", [
    ("gpu.name", "NVIDIA H100 80GB HBM3"), ("gpu.driver", "570.86.15"), ("gpu.cuda_runtime", "12.8"),
    ("packages.torch", "2.13.0"), ("packages.triton", "3.8.0"), ("packages.cupy-cuda13x", "13.6.0"),
    ("device", "cpu"),
])
def test_env_difference_names_the_field(path, value):
    env = json.loads(json.dumps(ENV))
    target = env
    *parents, last = path.split(".")
    for part in parents:
        target = target[part]
    old = target[last]
    target[last] = value
    assert compare.env_differences(typed(env=ENV), typed(env=env)) == [(path, old, value)]


def test_env_ignores_what_does_not_change_timings():
    env = json.loads(json.dumps(ENV))
    env["gpu"]["uuid"] = "GPU-2"  # another H200 of the same pool
    env["packages"]["numpy"] = "1.26"
    env["kbench"] = "0.2.0"
    assert compare.env_differences(typed(env=ENV), typed(env=env)) == []


def test_timing_method_and_missing_env_are_differences():
    diffs = compare.env_differences(typed(), typed(method="cuda-graph-replay+l2-flush"))
    assert diffs == [("timing.method", "cuda-events+l2-flush", "cuda-graph-replay+l2-flush")]
    assert compare.env_differences(typed(), typed(env=None))[0] == ("env", "recorded", None)


# --- the command: decisions and exit codes ------------------------------------------------------

def run_compare(cli, *args):
    return cli("compare", *args)


def test_same_exits_0(cli, tmp_path, base_file, flat_text, wide_console):
    result = run_compare(cli, base_file, current_like(tmp_path))
    assert result.exit_code == 0, result.output
    text = flat_text(result.stdout)
    assert "passed: 4 same" in text
    assert f"attention: {CASE}" in text and f"attention: {CASE2}" in text


def test_clearly_slower_exits_1(cli, tmp_path, base_file, flat_text, wide_console):
    cur = current_like(tmp_path, {("sdpa", CASE2): record(samples(0.6, seed=14), label="sdpa", case_key=CASE2)})
    result = run_compare(cli, base_file, cur)
    assert result.exit_code == 1, result.output
    text = flat_text(result.stdout)
    assert "FAILED: 1 slower, 3 same" in text
    assert "sdpa 500.0 us" in text and "+20.0%" in text and "slower" in text


def test_clearly_faster_exits_0(cli, tmp_path, base_file, flat_text, wide_console):
    cur = current_like(tmp_path, {("cupy-fa2", CASE): record(samples(0.8, seed=11), label="cupy-fa2")})
    result = run_compare(cli, base_file, cur)
    assert result.exit_code == 0, result.output
    assert "passed: 1 faster, 3 same" in flat_text(result.stdout)


def test_noisy_undecided_exits_0_and_says_so(cli, tmp_path, flat_text, wide_console):
    base = write(tmp_path / "b.jsonl", [record(samples(noise=0.3, n=8, seed=5))])
    cur = write(tmp_path / "c.jsonl", [record(samples(1.1, noise=0.3, n=8, seed=6))])
    result = run_compare(cli, base, cur)
    assert result.exit_code == 0, result.output
    assert "passed: 1 undecided" in flat_text(result.stdout)


def test_correctness_failure_in_current_exits_1(cli, tmp_path, base_file, flat_text, wide_console):
    failed = record(label="sdpa", status="FAIL", reason="trial 1 (seed 0): 12 of 512 outputs outside atol")
    cur = current_like(tmp_path, {("sdpa", CASE): failed})
    result = run_compare(cli, base_file, cur)
    assert result.exit_code == 1, result.output
    text = flat_text(result.stdout)
    assert "FAILED: 3 same, 1 failed" in text
    assert "FAIL: trial 1 (seed 0): 12 of 512 outputs outside atol" in text


@pytest.mark.parametrize("status", ["CRASH", "TIMEOUT"])
def test_crash_or_timeout_in_current_exits_1_even_without_a_baseline(cli, tmp_path, base_file, status):
    extra = record(label="new-kernel", status=status, reason="worker killed by SIGSEGV")
    result = run_compare(cli, base_file, current_like(tmp_path, extra=[extra]))
    assert result.exit_code == 1, result.output


def test_failure_in_base_only_is_no_baseline(cli, tmp_path, flat_text, wide_console):
    base = write(tmp_path / "b.jsonl", [record(status="FAIL", reason="wrong")])
    cur = write(tmp_path / "c.jsonl", [record()])
    result = run_compare(cli, base, cur)
    assert result.exit_code == 2
    assert "BASE lacks 1 measurement(s)" in flat_text(result.stderr)
    result = run_compare(cli, base, cur, "--allow-missing")
    assert result.exit_code == 0, result.output
    assert "passed: 1 new" in flat_text(result.stdout)


def test_skipped_on_both_sides_is_fine(cli, tmp_path, flat_text, wide_console):
    skip = record(status="SKIP", reason="needs a CUDA device")
    result = run_compare(cli, write(tmp_path / "b.jsonl", [skip]), write(tmp_path / "c.jsonl", [skip]))
    assert result.exit_code == 0, result.output
    assert "passed: 1 skipped" in flat_text(result.stdout)


# --- environments, missing cases: fail closed ---------------------------------------------------

def _one_error_line(result, fragment, flat):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.stderr.count("kbench: error:") == 1, result.stderr
    assert fragment in flat(result.stderr), result.stderr
    assert result.stdout == ""


def test_mismatched_environment_is_refused_naming_the_field(cli, tmp_path, base_file, flat_text):
    other = json.loads(json.dumps(ENV))
    other["gpu"]["driver"] = "570.86.15"
    cur = write(tmp_path / "c.jsonl", [record(samples(seed=11), env=other)] +
                [record(samples(2.0, seed=12), label="sdpa", env=other)])
    result = run_compare(cli, base_file, cur, "--allow-missing")
    _one_error_line(result, "environments differ, so the times are not comparable: gpu.driver is '580.159.03' "
                            "in BASE but '570.86.15' in CURRENT", flat_text)
    assert f"{base_file}:1 vs {cur}:1; 2 of 2 timed pairs differ); --force compares anyway" in flat_text(result.stderr)


def test_force_compares_across_environments(cli, tmp_path, flat_text, wide_console):
    other = json.loads(json.dumps(ENV))
    other["packages"]["torch"] = "2.13.0"
    base = write(tmp_path / "b.jsonl", [record(samples(seed=1))])
    cur = write(tmp_path / "c.jsonl", [record(samples(seed=2), env=other)])
    result = run_compare(cli, base, cur, "--force")
    assert result.exit_code == 0, result.output
    text = flat_text(result.stdout)
    assert "passed: 1 same" in text
    assert "env differs: packages.torch" in text
    assert "--force: 1 pair(s) compared across different environments" in text


def test_a_baseline_timed_after_a_zeroing_flush_says_so(cli, tmp_path, flat_text, wide_console):
    """Records from a kbench whose L2 flush zeroed its buffer (method ...+l2-flush) against records timed
    after a flush that reads it (+l2-flush-read): not compared, and the note says why and what to do."""
    base = write(tmp_path / "base.jsonl", [record(samples(seed=1), label="cupy-fa2")])
    cur = write(tmp_path / "cur.jsonl", [record(samples(seed=2), label="cupy-fa2", method="cuda-events+l2-flush-read")])
    refused = run_compare(cli, base, cur)
    _one_error_line(refused, "timed differently: cuda-events+l2-flush in BASE, cuda-events+l2-flush-read in CURRENT; "
                             "BASE's L2 flush zeroed its buffer, and a memory-bound call paid for the write-back of "
                             "its dirty lines: time BASE again to compare", flat_text)


def test_a_pair_timed_another_way_is_missing_not_the_whole_comparison(cli, tmp_path, base_file, flat_text,
                                                                       wide_console):
    """Same machine, one row timed as graph replays in CURRENT only (kbench run --cuda-graph against a default
    run whose row stayed eager): that pair has no comparable time, the others are compared."""
    cur = current_like(tmp_path, changes={("sdpa", CASE2): record(samples(0.5, seed=14), label="sdpa", case_key=CASE2,
                                                                   method="cuda-graph-replay+l2-flush")})
    refused = run_compare(cli, base_file, cur)
    _one_error_line(refused, f"CURRENT lacks 1 measurement(s) that BASE has: attention/sdpa [{CASE2}] (timed "
                             "differently: cuda-events+l2-flush in BASE, cuda-graph-replay+l2-flush in CURRENT)",
                    flat_text)
    allowed = run_compare(cli, base_file, cur, "--allow-missing")
    assert allowed.exit_code == 0, allowed.output
    assert "passed: 3 same, 1 missing" in flat_text(allowed.stdout)


def test_a_pair_whose_parameters_differ_is_compared_and_says_so(tmp_path):
    """A default changed between the runs (cuda-fa3's block_n 128, then 176): one label, other parameters."""
    base = record(samples(seed=1), label="cuda-fa3")
    base["params"] = {"block_n": 128, "stages": 2}
    current = record(samples(0.95, seed=2), label="cuda-fa3")
    current["params"] = {"block_n": 176, "stages": 2}
    pairs = compare.pair_up(load_keyed(write(tmp_path / "b.jsonl", [base])),
                            load_keyed(write(tmp_path / "c.jsonl", [current])))
    (pair,) = compare.judge(pairs, lambda suite: 0.01, 0.01)
    assert pair.decision == "faster"
    assert pair.note == "parameters differ: block_n 128 in BASE, 176 in CURRENT"
    assert compare.param_differences({"a": 1}, {"a": 1}) == ""
    assert compare.param_differences({}, {"tma": 1}) == "parameters differ: tma None in BASE, 1 in CURRENT"


def test_missing_case_in_current_is_an_error(cli, tmp_path, base_file, flat_text):
    cur = current_like(tmp_path, drop=[("sdpa", CASE2)])
    result = run_compare(cli, base_file, cur)
    _one_error_line(result, f"CURRENT lacks 1 measurement(s) that BASE has: attention/sdpa [{CASE2}] "
                            "(no record in CURRENT) (--allow-missing compares the rest)", flat_text)


def test_missing_case_allowed(cli, tmp_path, base_file, flat_text, wide_console):
    cur = current_like(tmp_path, drop=[("sdpa", CASE2)])
    result = run_compare(cli, base_file, cur, "--allow-missing")
    assert result.exit_code == 0, result.output
    assert "passed: 3 same, 1 missing" in flat_text(result.stdout)


def test_skip_in_current_is_a_missing_measurement(cli, tmp_path, base_file, flat_text):
    skipped = record(label="cupy-fa2", status="SKIP", reason="needs cupy (not installed)")
    result = run_compare(cli, base_file, current_like(tmp_path, {("cupy-fa2", CASE): skipped}))
    _one_error_line(result, "(CURRENT is SKIP: needs cupy (not installed))", flat_text)


def test_new_case_without_baseline_is_an_error(cli, tmp_path, base_file, flat_text):
    extra = record(label="cupy-fa2[block_m=64]", impl="cupy-fa2")
    result = run_compare(cli, base_file, current_like(tmp_path, extra=[extra]))
    _one_error_line(result, f"BASE lacks 1 measurement(s) that CURRENT has (no baseline): "
                            f"attention/cupy-fa2[block_m=64] [{CASE}]", flat_text)
    assert run_compare(cli, base_file, current_like(tmp_path, extra=[extra]), "--allow-missing").exit_code == 0


def test_missing_baseline_file_is_an_error(cli, tmp_path, flat_text):
    result = run_compare(cli, tmp_path / "nope.jsonl", current_like(tmp_path))
    _one_error_line(result, f"cannot read '{tmp_path / 'nope.jsonl'}': No such file or directory", flat_text)


def test_missing_baseline_file_allowed_makes_every_case_new(cli, tmp_path, flat_text, wide_console):
    """A first run, before any baseline exists: with --allow-missing, reported, not fatal. A CURRENT that
    does not exist, or a BASE that is unreadable, stays an error."""
    cur = current_like(tmp_path)
    result = run_compare(cli, tmp_path / "nope.jsonl", cur, "--allow-missing")
    assert result.exit_code == 0, result.output
    assert "passed: 4 new" in flat_text(result.stdout)
    assert "no baseline at" in flat_text(result.stderr)
    _one_error_line(run_compare(cli, cur, tmp_path / "nope.jsonl", "--allow-missing"), "cannot read", flat_text)
    (tmp_path / "torn.jsonl").write_text('{"schema": 1, "sui')
    _one_error_line(run_compare(cli, tmp_path / "torn.jsonl", cur, "--allow-missing"), "not valid JSON", flat_text)


def test_many_missing_are_listed_briefly(cli, tmp_path, flat_text):
    base = write(tmp_path / "b.jsonl", [record(label=f"k{i}") for i in range(5)])
    cur = write(tmp_path / "c.jsonl", [record(label="k0")])
    result = run_compare(cli, base, cur)
    _one_error_line(result, "CURRENT lacks 4 measurement(s)", flat_text)
    assert "; and 1 more" in flat_text(result.stderr)


# --- matching ---------------------------------------------------------------------------------

def test_records_match_by_label_and_old_records_fall_back_to_impl(tmp_path):
    old = record(label="naive")
    del old["label"]
    base = load_keyed(write(tmp_path / "b.jsonl", [old, record(label="cupy-fa2[block_m=64]")]))
    assert set(base) == {("attention", "naive", CASE), ("attention", "cupy-fa2[block_m=64]", CASE)}


def test_last_record_of_a_key_wins(tmp_path):
    """A case that CRASHed, then was run again into the same file: the later record is the one compared."""
    first, second = record(status="CRASH", reason="worker killed by SIGSEGV"), record(samples(3.0, seed=2))
    loaded = load_keyed(write(tmp_path / "b.jsonl", [first, second]))
    (located,) = loaded.values()
    assert located.record.median == pytest.approx(3.0, rel=0.01)
    assert located.where == f"{tmp_path / 'b.jsonl'}:2"


def test_folders_of_results(cli, tmp_path, flat_text, wide_console):
    write(tmp_path / "base" / "a.jsonl", [record(samples(seed=1), label="x")])
    write(tmp_path / "base" / "b.jsonl", [record(samples(seed=2), label="y")])
    (tmp_path / "base" / "notes.txt").write_text("not results")
    write(tmp_path / "cur" / "all.jsonl", [record(samples(seed=3), label="x"), record(samples(seed=4), label="y")])
    result = run_compare(cli, tmp_path / "base", tmp_path / "cur")
    assert result.exit_code == 0, result.output
    assert "passed: 2 same" in flat_text(result.stdout)
    (tmp_path / "empty").mkdir()
    _one_error_line(run_compare(cli, tmp_path / "empty", tmp_path / "cur"), "no results files (*.jsonl)", flat_text)


def test_json_array_from_format_json_is_read(cli, tmp_path, flat_text, wide_console):
    base = tmp_path / "b.json"
    base.write_text(json.dumps([record(samples(seed=1))], indent=2))
    result = run_compare(cli, base, write(tmp_path / "c.jsonl", [record(samples(seed=2))]))
    assert result.exit_code == 0, result.output


# --- thresholds: option and pyproject.toml ---------------------------------------------------------

@pytest.mark.parametrize("text,value", [("5%", 0.05), ("0.05", 0.05), ("12.5%", 0.125), (0.03, 0.03)])
def test_parse_fraction(text, value):
    assert compare_thresholds.parse_fraction(text, "--threshold") == pytest.approx(value)


@pytest.mark.parametrize("text,fragment", [("5", "ambiguous"), ("abc", "not a fraction"), ("0", "more than 0"),
                                           ("150%", "less than 100%"), ("-1%", "more than 0"), ("nan", "more than 0"),
                                           (True, "not a fraction")])
def test_bad_threshold(text, fragment):
    with pytest.raises(UserError, match=fragment):
        compare_thresholds.parse_fraction(text, "--threshold")


def test_bad_threshold_option_is_exit_2(cli, tmp_path, base_file, flat_text):
    result = run_compare(cli, base_file, current_like(tmp_path), "--threshold", "5")
    _one_error_line(result, "--threshold: 5 is ambiguous: write a fraction (0.05) or a percentage (5%)", flat_text)


def _slower_by_8(tmp_path):
    base = write(tmp_path / "b.jsonl", [record(samples(noise=0.005, seed=1))])
    cur = write(tmp_path / "c.jsonl", [record(samples(1.08, noise=0.005, seed=2))])
    return base, cur


def test_threshold_option(cli, tmp_path):
    base, cur = _slower_by_8(tmp_path)
    assert run_compare(cli, base, cur).exit_code == 1  # default 5 %
    assert run_compare(cli, base, cur, "--threshold", "10%").exit_code == 0


def test_pyproject_threshold_and_per_suite_override(cli, tmp_path, monkeypatch, flat_text, wide_console):
    base, cur = _slower_by_8(tmp_path)
    project = tmp_path / "project"
    (project / "sub" / "dir").mkdir(parents=True)
    monkeypatch.chdir(project / "sub" / "dir")  # pyproject.toml is found upward
    (project / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.kbench]\nthreshold = "10%"\n')
    result = run_compare(cli, base, cur)
    assert result.exit_code == 0, result.output
    assert "thresholds: attention 0.1 ([tool.kbench] threshold)" in flat_text(result.stdout)

    (project / "pyproject.toml").write_text('[tool.kbench]\nthreshold = 0.10\n[tool.kbench.thresholds]\n'
                                            'attention = 0.03\nmatmul = "20%"\n')
    result = run_compare(cli, base, cur, "--threshold", "15%")
    assert result.exit_code == 1, result.output  # the suite's own threshold wins
    assert "thresholds: attention 0.03 ([tool.kbench.thresholds] attention)" in flat_text(result.stdout)
    assert compare_thresholds.load().thresholds == {"attention": 0.03, "matmul": 0.2}


def test_threshold_option_over_pyproject_default(cli, tmp_path, monkeypatch):
    base, cur = _slower_by_8(tmp_path)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.kbench]\nthreshold = 0.10\n")
    assert run_compare(cli, base, cur).exit_code == 0
    assert run_compare(cli, base, cur, "--threshold", "5%").exit_code == 1


@pytest.mark.parametrize("text,fragment", [
    ("[tool.kbench\n", "not valid TOML"),
    ("[tool.kbench]\nthreshold = 5\n", "threshold: 5 is ambiguous"),
    ("[tool.kbench]\nthresholds = 3\n", "thresholds must be a table"),
    ("[tool.kbench.thresholds]\nattention = 'fast'\n", "[tool.kbench.thresholds] attention: 'fast' is not a fraction"),
])
def test_bad_pyproject_is_exit_2_naming_the_file(cli, tmp_path, monkeypatch, base_file, flat_text, text, fragment):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text(text)
    result = run_compare(cli, base_file, current_like(tmp_path))
    _one_error_line(result, fragment, flat_text)
    assert str(tmp_path / "pyproject.toml") in flat_text(result.stderr)


def test_pyproject_without_a_toml_parser_is_a_note(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text("[tool.kbench]\nthreshold = 0.10\n")
    monkeypatch.setattr(compare_thresholds.toml_parser, "toml_loads", lambda: (None, None))
    loaded = compare_thresholds.load(tmp_path)
    assert loaded.threshold is None and "not read" in loaded.note


def test_pyproject_is_looked_for_upward_and_defaults_without_one(tmp_path):
    deep = tmp_path / "proj" / "a" / "b"
    deep.mkdir(parents=True)
    if compare_thresholds.find_pyproject(tmp_path) is None:  # no pyproject.toml above the temporary folder
        assert compare_thresholds.load(deep) == compare_thresholds.Config()
    (tmp_path / "proj" / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert compare_thresholds.find_pyproject(deep) == tmp_path / "proj" / "pyproject.toml"
    loaded = compare_thresholds.load(deep)  # found, but no [tool.kbench]: the defaults
    assert loaded.threshold is None and loaded.thresholds == {} and loaded.source == tmp_path / "proj" / "pyproject.toml"
    assert compare_thresholds.threshold_for("attention", loaded, None) == (0.05, "default")
    assert compare_thresholds.threshold_for("attention", loaded, 0.1) == (0.1, "--threshold")


# --- markdown -----------------------------------------------------------------------------------

def test_markdown_summary_is_appended(cli, tmp_path, base_file):
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    cur = current_like(tmp_path, {("sdpa", CASE2): record(samples(0.6, seed=14), label="sdpa", case_key=CASE2)})
    result = run_compare(cli, base_file, cur, "--markdown", summary)
    assert result.exit_code == 1
    text = summary.read_text()
    assert text.startswith("# earlier step\n## kbench compare\n")
    assert "**FAILED: 1 slower, 3 same**" in text
    assert "| suite | case | implementation | BASE | CURRENT | change | interval | p | threshold | decision | note |" \
        in text
    assert f"| attention | {CASE2} | sdpa | 500.0 us | 599.9 us | +20.0% |" in text
    assert "| **slower** |" in text
    run_compare(cli, base_file, current_like(tmp_path), "--markdown", summary)
    assert summary.read_text().count("## kbench compare") == 2


def test_markdown_says_why_there_is_no_comparison(cli, tmp_path, base_file):
    summary = tmp_path / "summary.md"
    result = run_compare(cli, base_file, current_like(tmp_path, drop=[("sdpa", CASE)]), "--markdown", summary)
    assert result.exit_code == 2
    text = summary.read_text()
    assert text.startswith("## kbench compare\n\n**could not compare (exit 2)**: CURRENT lacks 1 measurement(s)")


def test_threshold_column_keeps_fractions_of_a_percent(cli, tmp_path, base_file, flat_text, wide_console):
    result = run_compare(cli, base_file, current_like(tmp_path), "--threshold", "2.5%")
    assert result.exit_code == 0, result.output
    assert "2.5% same" in flat_text(result.stdout)


def test_markdown_escapes_pipes(tmp_path):
    from kbench.report import compare_markdown

    pair = compare.Pair(("attention", "a|b", CASE), None, None, decision="missing", note="x|y")
    text = compare_markdown([pair], "s")
    assert "a\\|b" in text and "x\\|y" in text


def test_markdown_unwritable_is_exit_2(cli, tmp_path, base_file, flat_text, wide_console):
    result = run_compare(cli, base_file, current_like(tmp_path), "--markdown", tmp_path)
    assert result.exit_code == 2
    assert "--markdown: cannot write" in flat_text(result.stderr)


# --- --format json -------------------------------------------------------------------------------

def _document(result) -> dict:
    """The JSON document compare printed: stdout must hold that and nothing else."""
    return json.loads(result.stdout)


def test_json_document_carries_each_pair_and_the_verdict(cli, tmp_path, base_file):
    cur = current_like(tmp_path, {("sdpa", CASE2): record(samples(0.6, seed=14), label="sdpa", case_key=CASE2)})
    result = run_compare(cli, base_file, cur, "--format", "json")
    assert result.exit_code == 1, result.output  # the same exit code as the table's
    doc = _document(result)
    assert doc["verdict"] == "FAILED: 1 slower, 3 same" and doc["passed"] is False and doc["exit_code"] == 1
    assert doc["counts"]["slower"] == 1 and doc["counts"]["same"] == 3 and doc["counts"]["failed"] == 0
    assert doc["alpha"] == compare_thresholds.DEFAULT_ALPHA
    assert doc["thresholds"] == {"attention": {"threshold": 0.05, "source": "default"}}
    by_key = {(p["implementation"], p["case_key"]): p for p in doc["pairs"]}
    assert len(by_key) == 4
    slower = by_key[("sdpa", CASE2)]
    assert slower["decision"] == "slower" and slower["suite"] == "attention"
    assert slower["base_median_ms"] == pytest.approx(float(np.median(samples(0.5, seed=4))))
    assert slower["current_median_ms"] == pytest.approx(float(np.median(samples(0.6, seed=14))))
    assert slower["change"] == pytest.approx(slower["current_median_ms"] / slower["base_median_ms"] - 1)
    low, high = slower["change_interval"]
    assert 0.05 < low <= slower["change"] <= high  # beyond the threshold, the whole interval
    assert slower["p_value"] < doc["alpha"] and slower["threshold"] == 0.05
    assert slower["base_record"] == f"{base_file}:4" and slower["current_record"] == f"{cur}:4"
    assert by_key[("cupy-fa2", CASE)]["decision"] == "same"


def test_json_numbers_are_the_ones_the_table_shows(cli, tmp_path, base_file, flat_text, wide_console):
    cur = current_like(tmp_path, {("cupy-fa2", CASE): record(samples(0.8, seed=11), label="cupy-fa2")})
    table = flat_text(run_compare(cli, base_file, cur).stdout)
    doc = _document(run_compare(cli, base_file, cur, "--format", "json"))
    for pair in doc["pairs"]:
        low, high = pair["change_interval"]
        shown = f"{pair['change']:+.1%} {low:+.1%} .. {high:+.1%} {pair['p_value']:.2g}"
        assert shown in table, (shown, table)
    assert doc["verdict"] in table


def test_json_names_what_was_not_compared(cli, tmp_path, base_file):
    failed = record(label="sdpa", status="FAIL", reason="wrong values")
    cur = current_like(tmp_path, {("sdpa", CASE): failed}, drop=[("cupy-fa2", CASE2)])
    result = run_compare(cli, base_file, cur, "--format", "json", "--allow-missing")
    assert result.exit_code == 1, result.output
    by_key = {(p["implementation"], p["case_key"]): p for p in _document(result)["pairs"]}
    assert by_key[("sdpa", CASE)]["decision"] == "failed" and by_key[("sdpa", CASE)]["note"] == "FAIL: wrong values"
    missing = by_key[("cupy-fa2", CASE2)]
    assert missing["decision"] == "missing" and missing["current_median_ms"] is None
    assert missing["base_median_ms"] == pytest.approx(0.3, rel=0.01) and missing["current_record"] is None
    assert missing["change"] is None and missing["change_interval"] is None and missing["p_value"] is None


def test_json_stdout_is_only_the_document_when_notes_are_printed(cli, tmp_path):
    cur = write(tmp_path / "c.jsonl", [record()])
    result = run_compare(cli, tmp_path / "no-baseline.jsonl", cur, "--format", "json", "--allow-missing")
    assert result.exit_code == 0, result.output
    assert "no baseline" in result.stderr
    doc = _document(result)
    assert doc["verdict"] == "passed: 1 new" and [p["decision"] for p in doc["pairs"]] == ["new"]


def test_json_lists_the_environment_differences_compared_anyway(cli, tmp_path):
    other = json.loads(json.dumps(ENV))
    other["packages"]["torch"] = "2.13.0"
    base = write(tmp_path / "b.jsonl", [record(samples(seed=1))])
    cur = write(tmp_path / "c.jsonl", [record(samples(seed=2), env=other)])
    (pair,) = _document(run_compare(cli, base, cur, "--force", "--format", "json"))["pairs"]
    assert pair["env_differences"] == [{"field": "packages.torch", "base": "2.11.0", "current": "2.13.0"}]


def test_unknown_compare_format_is_one_error_line(cli, tmp_path, base_file, flat_text):
    summary = tmp_path / "summary.md"
    result = run_compare(cli, base_file, current_like(tmp_path), "--format", "csv", "--markdown", summary)
    _one_error_line(result, "--format: unknown format 'csv' (choose from table, json)", flat_text)
    assert not summary.exists()  # refused before anything is compared


# --- files from elsewhere: every malformed file is one clear error ---------------------------------

GOOD = json.dumps(record(samples(n=5)))


def _with(**changes) -> str:
    rec = record(samples(n=5))
    for dotted, value in changes.items():
        target = rec
        *parents, last = dotted.split("__")
        for part in parents:
            target = target[part]
        if value is KeyError:
            del target[last]
        else:
            target[last] = value
    return json.dumps(rec)


MALFORMED = [
    # (id, file text, error fragment after "FILE:")
    ("torn-last-line", GOOD + "\n" + GOOD[:80], ":2: not valid JSON (a truncated line: the run was killed while writing?)"),
    ("torn-middle-line", GOOD[:80] + "\n" + GOOD + "\n", ":1: not valid JSON: "),
    ("nan-median", GOOD + "\n" + GOOD.replace('"median": 1', '"median": NaN', 1) + "\n",
     ":2: not valid JSON: NaN is not allowed (times must be finite numbers)"),
    ("infinity-sample", GOOD.replace('"samples": [', '"samples": [Infinity, ', 1) + "\n",
     ":1: not valid JSON: Infinity is not allowed"),
    ("minus-infinity", GOOD.replace('"samples": [', '"samples": [-Infinity, ', 1) + "\n",
     ":1: not valid JSON: -Infinity is not allowed"),
    ("null-sample", _with(timing__samples=[1.0, None, 1.0]) + "\n",
     ":1: timing.samples[1] is null (a NaN or Infinity time)"),
    ("null-median", _with(timing__stats__median=None) + "\n", ":1: timing.stats.median is null"),
    ("overflow-to-inf", GOOD.replace('"samples": [', '"samples": [1e999, ', 1) + "\n",
     ":1: timing.samples[0] is inf, not a finite number"),
    ("string-time", _with(timing__samples=["1.0"]) + "\n", ":1: timing.samples[0] is '1.0', not a finite number"),
    ("negative-time", _with(timing__samples=[-1.0]) + "\n", ":1: timing.samples[0] is not positive (-1.0)"),
    ("zero-median", _with(timing__stats__median=0) + "\n", ":1: timing.stats.median is not positive (0)"),
    ("schema-2", _with(schema=2) + "\n", ":1: schema version 2 is newer than this kbench reads (1): "
                                          "read it with the kbench that wrote it, or a newer one"),
    ("schema-0", _with(schema=0) + "\n", ":1: unknown schema version 0 (this kbench reads version 1)"),
    ("no-schema", _with(schema=KeyError) + "\n", ":1: unknown schema version None"),
    ("not-an-object", "[1, 2]\n", ": record 1: expected a JSON object (a record), got int"),
    ("string-line", GOOD + '\n"hello"\n', ":2: expected a JSON object (a record), got str"),
    ("no-suite", _with(suite=KeyError) + "\n", ":1: field 'suite' is missing or not a string"),
    ("no-case-key", _with(case_key=5) + "\n", ":1: field 'case_key' is missing or not a string"),
    ("unknown-status", _with(status="GREAT") + "\n", ":1: unknown status 'GREAT'"),
    ("ok-without-timing", _with(timing=KeyError) + "\n", ":1: an OK record without timing.stats"),
    ("empty", "", ": no records (empty file)"),
    ("blank", "\n\n  \n", ": no records (empty file)"),
]


@pytest.mark.parametrize("text,fragment", [pytest.param(t, f, id=i) for i, t, f in MALFORMED])
@pytest.mark.parametrize("side", ["BASE", "CURRENT"])
def test_malformed_file_is_one_clear_error(cli, tmp_path, flat_text, text, fragment, side):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(text)
    good = write(tmp_path / "good.jsonl", [record()])
    args = (bad, good) if side == "BASE" else (good, bad)
    result = run_compare(cli, *args)
    _one_error_line(result, f"{bad}{fragment}", flat_text)


def test_pickle_is_never_unpickled(cli, tmp_path, flat_text):
    """A results file from elsewhere is JSON only: a pickle (which could run code) is refused as text."""
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (Path.touch, (marker,))

    bad = tmp_path / "results.jsonl"
    bad.write_bytes(pickle.dumps(Evil()))
    result = run_compare(cli, bad, write(tmp_path / "good.jsonl", [record()]))
    _one_error_line(result, f"{bad}:1: not UTF-8 text (results files are JSON lines)", flat_text)
    assert not marker.exists()


def test_binary_garbage_names_its_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(GOOD.encode() + b"\n" + GOOD.encode() + b"\n\xff\xfe\n")
    with pytest.raises(UserError, match=r"bad.jsonl:3: not UTF-8 text"):
        results.read_strict(bad)


def test_unreadable_file(tmp_path, flat_text, cli, monkeypatch):
    locked = write(tmp_path / "locked.jsonl", [record()])
    real_read_bytes = Path.read_bytes

    def read_bytes(self):
        if self == locked:  # chmod 0 does not stop root: fail the read itself
            raise PermissionError(13, "Permission denied", str(self))
        return real_read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    result = run_compare(cli, locked, write(tmp_path / "good.jsonl", [record()]))
    _one_error_line(result, f"cannot read '{locked}': Permission denied", flat_text)


def test_strict_reader_gives_line_numbers_and_records(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(GOOD + "\n\n" + GOOD + "\n")
    assert [line for line, _ in results.read_strict(path)] == [1, 3]


# --- a real CPU run compared with itself, and help without heavy imports ---------------------------------

def test_compare_help_does_not_import_scipy_or_torch(proc_env, tmp_path):
    script = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from kbench.cli import app\n"
        "result = CliRunner().invoke(app, ['compare', '--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        "assert '--allow-missing' in result.output and '--markdown' in result.output\n"
        "print('torch' in sys.modules, 'scipy' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=proc_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False"]


def test_root_help_lists_compare(cli, flat_text):
    result = cli("--help")
    assert result.exit_code == 0
    assert " compare " in flat_text(result.stdout)
