"""kbench.profilers.agreement: a `kbench profile` summary's kernel time per call against a `kbench run`'s
event medians, and the two commands that show it: `kbench profile agreement SUMMARY RUN` and
`kbench profile ... --against RUN`.

The per-call figures come from the synthetic ncu CSVs (tests/fixtures/profile/synthetic/) and, in the
recorded tests, from tests/fixtures/profile/h200-n4096-pinned/ (an H200's profile summary and the
`kbench run` records of the same case, as they came back).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbench.errors import UserError
from kbench.profilers import agreement, ncu
from kbench.record import Clock, Record

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "profile"
SYNTHETIC = FIXTURES / "synthetic"
PINNED = FIXTURES / "h200-n4096-pinned"
CASE = "n=4096,d=128,batch=2,heads=16,dtype=fp16,causal=False"
MIN_BYTES = 4 * 2 * 16 * 4096 * 128 * 2  # attention's fewest bytes at that case: Q, K, V in, O out, fp16
# kbench's event medians for this case on the H200 (docs/performance.md), in ms
EVENT_MS = {"naive": 2.7969, "sdpa": 0.8124, "triton-fa2": 0.6365}


def synthetic(impl: str) -> str:
    return (SYNTHETIC / f"ncu_raw_{impl}.csv").read_text()


# --- the arithmetic ---------------------------------------------------------------------------

def test_agreement_with_the_event_medians():
    for impl, event_ms in EVENT_MS.items():
        per = ncu.summarize(synthetic(impl), 1, MIN_BYTES)["per_call"]
        verdict = agreement.agreement(per["time_us"], event_ms)
        assert verdict["checked"] and verdict["ok"], (impl, verdict)
    assert agreement.agreement(900.0, 0.8)["ok"] is False  # 12.5 % off
    assert agreement.agreement(30.0, 0.020) == {"checked": False, "ok": None, "diff": 0.5, "why": "under 50 us"}
    assert agreement.agreement(None, 1.0)["checked"] is False


def _summary_and_run():
    outcomes = [{"label": impl, "per_call": ncu.summarize(synthetic(impl), 1, MIN_BYTES)["per_call"]}
                for impl in ("naive", "sdpa", "triton-fa2")]
    outcomes.append({"label": "sdpa-cudnn", "status": "SKIP"})
    summary = {"tool": "ncu", "case_key": CASE, "implementations": outcomes}
    records = [_run_record(CASE, impl, ms) for impl, ms in EVENT_MS.items()]
    records.append(_run_record("n=256", "naive", 9.0))
    return summary, records


def _run_record(case_key: str, impl: str, median_ms: float) -> Record:
    return Record.from_json({"schema": 1, "suite": "attention", "case_key": case_key, "label": impl, "impl": impl,
                             "status": "OK", "timing": {"stats": {"median": median_ms}}})


def test_agreement_rows():
    summary, records = _summary_and_run()
    rows = {row["label"]: row for row in agreement.agreement_rows(summary, records)}
    assert rows["naive"]["ok"] and rows["naive"]["diff"] == pytest.approx(2780.992 / 2796.9 - 1)
    assert rows["sdpa"]["ok"] and rows["triton-fa2"]["ok"]
    assert rows["sdpa-cudnn"]["checked"] is False
    records[0].timing.stats.median = 3.2  # naive's events now 15 % slower than ncu's kernels
    assert agreement.agreement_rows(summary, records)[0]["ok"] is False


def test_agreement_needs_the_same_configuration():
    """Seen on the H200: the run's autotuner chose 128x64 (604.6 us), the profiled process's 128x128
    (566.9 us): -6.2 %, two different kernels, so not a disagreement of the two clocks."""
    summary, records = _summary_and_run()
    fa2 = next(o for o in summary["implementations"] if o["label"] == "triton-fa2")
    fa2["config"] = {"BLOCK_N": 128, "num_stages": 3, "tuning_seconds": 1.5}
    records[2].config = {"BLOCK_N": 64, "num_stages": 4, "tuning_seconds": 11.2}
    row = agreement.agreement_rows(summary, records)[2]
    assert row["checked"] is False and "BLOCK_N 64 vs 128" in row["why"] and "num_stages 4 vs 3" in row["why"]
    records[2].config = {"BLOCK_N": 128, "num_stages": 3, "tuning_seconds": 0.0}  # tuning time alone differs
    assert agreement.agreement_rows(summary, records)[2]["checked"] is True
    # the autotuner's own timings of each candidate differ from process to process too (a cold Triton cache)
    fa2["config"]["candidates_ms"] = {"0": 0.6252, "1": 0.5802}
    records[2].config["candidates_ms"] = {"0": 0.6264, "1": 0.5842}
    assert agreement.agreement_rows(summary, records)[2]["checked"] is True


def test_agreement_at_the_runs_sm_clock():
    """Where the profiler gave cycles and the run recorded its median SM clock, the profiled time is taken
    at the run's clock (cycles / MHz) before the two are compared: a profiled call at 1980 MHz and the
    same kernel sampled at 1700 MHz differ by the clocks, not by the kernel."""
    summary, records = _summary_and_run()
    naive = next(o for o in summary["implementations"] if o["label"] == "naive")
    cycles = 2796.9 * 1700  # the event median's duration at 1700 MHz
    naive["per_call"] = {**naive["per_call"], "cycles": cycles, "time_us": cycles / 1980}
    assert agreement.agreement_rows(summary, records)[0]["ok"] is False  # no run clock yet: 14 % apart
    records[0].timing.clock = Clock(sm_mhz_median=1700)
    row = agreement.agreement_rows(summary, records)[0]
    assert row["checked"] and row["ok"] and row["diff"] == pytest.approx(0.0, abs=1e-9)
    assert row["profiled_us_at_run_clock"] == pytest.approx(2796.9)
    assert row["run_mhz"] == 1700 and row["profiled_mhz"] == pytest.approx(1980)


def test_recorded_agreement_with_the_tile_shape_pinned():
    """The H200 check that profile and run agree (at commit 3351a2a):
    triton-fa2 pinned to config=1 in both processes. The profile summary and the `kbench run` records as they
    came back."""
    summary = agreement.read_summary(PINNED / "profile.json")
    rows = {r["label"]: r for r in agreement.agreement_rows(summary, agreement.read_run(PINNED / "run.jsonl"))}
    expected = {"naive": (2782.3, 2795.5), "sdpa": (786.2, 811.1), "triton-fa2[config=1]": (582.9, 586.5)}
    assert set(rows) == set(expected)
    for label, (profiled_us, event_us) in expected.items():
        row = rows[label]
        assert row["checked"] and row["ok"], row
        assert row["profiled_us"] == pytest.approx(profiled_us, abs=0.05)
        assert row["event_us"] == pytest.approx(event_us, abs=0.05)
    assert rows["triton-fa2[config=1]"]["diff"] == pytest.approx(-0.006, abs=0.001)


def test_exit_code():
    summary, records = _summary_and_run()
    assert agreement.exit_code(agreement.agreement_rows(summary, records)) == 0
    records[0].timing.stats.median = 3.2
    assert agreement.exit_code(agreement.agreement_rows(summary, records)) == 1
    assert agreement.exit_code(agreement.agreement_rows(summary, records, min_us=1e6)) == 2  # all under min_us
    assert agreement.exit_code(agreement.agreement_rows(summary, [])) == 2  # no run records


def test_records_without_a_median_are_not_compared():
    summary, records = _summary_and_run()
    records[0].timing.stats.median = None  # a record that carries no median
    row = agreement.agreement_rows(summary, records)[0]
    assert row["checked"] is False and row["why"] == "missing figure"


# --- reading the two files --------------------------------------------------------------------

def test_read_summary_refuses_what_is_not_a_summary(tmp_path):
    for text, message in [("{", "not valid JSON"), ("[]", "not a kbench profile summary"),
                          ('{"implementations": [{"status": "OK"}]}', "not a kbench profile summary")]:
        (tmp_path / "s.json").write_text(text)
        with pytest.raises(UserError, match=message):
            agreement.read_summary(tmp_path / "s.json")
    with pytest.raises(UserError, match="cannot read"):
        agreement.read_summary(tmp_path / "missing.json")


def test_check_case_names_the_runs_cases():
    records = agreement.read_run(PINNED / "run.jsonl")
    agreement.check_case(records, CASE, Path("run.jsonl"))
    with pytest.raises(UserError, match=r"no timed record of case n=256.*its cases: n=4096,d=128"):
        agreement.check_case(records, "n=256", Path("run.jsonl"))


@pytest.mark.parametrize("tolerance, min_us", [(0.0, 50.0), (float("nan"), 50.0), (-0.1, 50.0), (0.05, -1.0),
                                               (0.05, float("inf"))])
def test_check_limits(tolerance, min_us):
    with pytest.raises(UserError):
        agreement.check_limits(tolerance, min_us)


# --- kbench profile agreement SUMMARY RUN -----------------------------------------------------

def _rows(output: str) -> dict[str, str]:
    """The agreement table's rows by implementation, each a line of text."""
    return {cells[0].strip(): line for line in output.splitlines()
            if len(cells := line.strip("│ ").split("│")) == 7}


def test_agreement_command_on_the_recorded_profile(cli, wide_console):
    result = cli("profile", "agreement", str(PINNED / "profile.json"), str(PINNED / "run.jsonl"))
    assert result.exit_code == 0, result.output
    assert f"ncu kernel time per call vs kbench's event median, {CASE} (tolerance 5 %" in result.output
    rows = _rows(result.output)
    assert set(rows) - {"implementation"} == {"naive", "sdpa", "triton-fa2[config=1]"}
    fa2 = rows["triton-fa2[config=1]"]
    assert "582.9" in fa2 and "586.5" in fa2 and "-0.6%" in fa2 and "agrees" in fa2


def test_agreement_command_exit_codes(cli, wide_console, tmp_path):
    records = [json.loads(line) for line in (PINNED / "run.jsonl").read_text().splitlines()]
    records[2]["timing"]["stats"]["median"] = 0.5  # triton-fa2 now 17 % faster in the run than profiled
    (tmp_path / "run.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    result = cli("profile", "agreement", str(PINNED / "profile.json"), str(tmp_path / "run.jsonl"))
    assert result.exit_code == 1
    assert "DISAGREES" in _rows(result.output)["triton-fa2[config=1]"]
    loose = cli("profile", "agreement", str(PINNED / "profile.json"), str(tmp_path / "run.jsonl"),
                "--tolerance", "0.2")
    assert loose.exit_code == 0, loose.output
    none = cli("profile", "agreement", str(PINNED / "profile.json"), str(tmp_path / "run.jsonl"),
               "--min-us", "10000")
    assert none.exit_code == 2 and "no implementation was checked" in none.output
    assert "not checked (under 10000 us)" in _rows(none.output)["naive"]


@pytest.mark.parametrize("args, message", [
    (["missing.json", str(PINNED / "run.jsonl")], "cannot read 'missing.json'"),
    ([str(PINNED / "run.jsonl"), str(PINNED / "run.jsonl")], "not valid JSON"),
    ([str(PINNED / "profile.json"), "not-a-run.jsonl"], "not-a-run.jsonl:1: unknown schema version"),
    ([str(PINNED / "profile.json"), str(PINNED / "run.jsonl"), "--tolerance", "0"], "--tolerance must be"),
])
def test_agreement_command_bad_input(cli, args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "not-a-run.jsonl").write_text('{"label": "naive"}\n')  # JSON, but not a kbench record
    result = cli("profile", "agreement", *args)
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if "kbench: error:" in line]
    assert len(errors) == 1 and message in errors[0], result.output
    assert "Traceback" not in result.output


def test_the_performance_reports_check(cli, wide_console):
    """docs/performance.md's "kbench profile agrees with kbench run": its command on its committed files
    gives its table's figures (at the run's clock, so the clocks column is filled)."""
    h200 = Path(__file__).resolve().parents[1] / "fixtures" / "h200"
    result = cli("profile", "agreement", h200 / "attention-n4096-b4h16-ncu.json",
                 h200 / "attention-n4096-b4h16-interleaved.jsonl")
    assert result.exit_code == 0, result.output
    rows = _rows(result.output)
    for label, figures in {"naive": ("5,566.1", "5,769.1", "5,768.8", "1,891, 1,824"),
                           "triton-fa2": ("984.8", "990.1", "989.5", "1,628, 1,619"),
                           "cupy-fa2": ("1,753.7", "1,763.6", "1,762.2", "1,796, 1,786")}.items():
        assert all(figure in rows[label] for figure in figures) and "agrees" in rows[label], rows[label]
