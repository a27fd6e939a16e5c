"""kbench.profilers.capture without a profiler: the checked settings, the plan, the exit code and --compare's
figures. The whole run, with fake ncu and nsys executables, is tests/cli/test_profile_cli.py's."""

from __future__ import annotations

import pytest

from kbench import loader
from kbench.errors import UserError
from kbench.profilers import capture, common
from kbench.suite import Case

CASE = Case({"n": 256, "d": 128, "batch": 1, "heads": 1, "dtype": "fp16", "causal": False})
OPTIONS = dict(calls=None, set_name="kbench", metrics=None, kernel_name=None, launch_count=20, clock_control="none",
               name="t", timeout=60.0, seed=0, trials=1, kernels=None, device="cpu", cuda_graph=False)


@pytest.fixture(scope="module")
def registry():
    return loader.load()


def test_settings_defaults_per_tool(registry):
    suite = registry.suites["attention"]
    settings = capture.settings(suite, CASE, tool="torch-profiler", **OPTIONS)
    assert settings.calls == 5 and settings.executable is None and settings.static_device == "cpu"
    assert settings.run_name == "t"
    assert capture.settings(suite, CASE, tool="torch-profiler", **{**OPTIONS, "calls": 2}).calls == 2


@pytest.mark.parametrize("change, message", [
    ({"timeout": float("nan")}, "--timeout must be a finite number"),
    ({"calls": 0}, "must be positive"),
    ({"set_name": "full"}, "are Nsight Compute's"),
    ({"name": "../x"}, "is not a plain name"),
])
def test_settings_refuse_bad_options(registry, change, message):
    with pytest.raises(UserError, match=message):
        capture.settings(registry.suites["attention"], CASE, tool="torch-profiler", **{**OPTIONS, **change})


def test_ncu_on_the_cpu_is_refused_before_anything_runs(registry, monkeypatch):
    monkeypatch.setenv("KBENCH_NCU", "/bin/true")  # found, so the device check is what refuses
    with pytest.raises(UserError, match="--device cpu: ncu profiles CUDA kernels"):
        capture.settings(registry.suites["attention"], CASE, tool="ncu", **OPTIONS)


def test_plan_chooses_the_compared_pair_and_their_files(registry, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    settings = capture.settings(registry.suites["attention"], CASE, tool="torch-profiler", **OPTIONS)
    plan = capture.plan(settings, registry, None, ["config=1"], ("naive", "triton-fa2[config=1]"))
    assert [v.label for v in plan.variants] == ["naive", "triton-fa2[config=1]"]
    assert plan.stems["triton-fa2[config=1]"] == common.PROFILES_DIR / "t-triton-fa2_config_1"
    with pytest.raises(UserError, match="--compare: 'sdpa' is not among the profiled implementations"):
        capture.plan(settings, registry, ["naive"], None, ("naive", "sdpa"))


@pytest.mark.parametrize("statuses, code", [
    (["OK", "SKIP"], 0),
    (["OK", capture.NO_KERNELS], 4),
    (["CRASH", capture.NO_KERNELS], 1),  # a failure outranks an empty capture
    (["FAIL"], 1),
    ([], 0),
])
def test_exit_code(statuses, code):
    assert capture.exit_code([{"status": s} for s in statuses]) == code


def test_compare_rows_in_the_titles_units():
    a = {"time_us": 2781.0, "kernels_per_call": 4, "dram_bytes": 6.5798e9, "smem": 197_632, "registers": 0}
    b = {"time_us": 629.2, "kernels_per_call": 1, "dram_bytes": 1.426e8, "registers": 232}
    rows = {row.title: row for row in capture.compare_rows(a, b)}
    assert rows["time per call (us)"].ratio == pytest.approx(629.2 / 2781.0)
    assert rows["DRAM bytes per call (MB)"].a == pytest.approx(6579.8) and rows["DRAM bytes per call (MB)"].digits == 1
    assert rows["shared memory per block (max, KB)"].b is None and rows["shared memory per block (max, KB)"].ratio is None
    assert rows["registers per thread (max)"].b == 232 and rows["registers per thread (max)"].ratio is None  # A is 0
    assert "L2 hit rate % (time-weighted)" not in rows  # neither side has it


def test_compare_outcomes_without_figures():
    ok = {"label": "naive", "status": "OK", "per_call": {"time_us": 1.0}}
    skipped = {"label": "sdpa-cudnn", "status": "SKIP"}
    assert capture.compare_outcomes([ok, skipped], ("naive", "sdpa-cudnn")) == (None, ["sdpa-cudnn"])
    rows, missing = capture.compare_outcomes([ok, {**ok, "label": "x"}], ("naive", "x"))
    assert missing == [] and [row.title for row in rows] == ["time per call (us)"]
