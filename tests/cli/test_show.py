"""`kbench show`: stored results as tables, JSON or CSV."""

import csv
import io
import json

from kbench.loader import PROJECT_ROOT

H200_RUN = PROJECT_ROOT / "tests" / "fixtures" / "h200" / "attention-n4096.jsonl"


def test_show_a_recorded_run(cli):
    result = cli("show", H200_RUN)
    assert result.exit_code == 0, result.output
    for impl in ("naive", "sdpa", "sdpa-cudnn", "triton-fa2", "cupy-fa2"):
        assert impl in result.output
    assert "NVIDIA H200" in result.output


def test_show_json_and_csv(cli):
    records = json.loads(cli("show", H200_RUN, "--format", "json").stdout)
    assert len(records) == len(H200_RUN.read_text().splitlines())
    rows = list(csv.DictReader(io.StringIO(cli("show", H200_RUN, "--format", "csv").stdout)))
    assert {row["impl"] for row in rows} >= {"naive", "sdpa"} and all(row["status"] == "OK" for row in rows)


def test_show_bad_input(cli, tmp_path):
    assert cli("show", tmp_path / "missing.jsonl").exit_code == 2
    assert cli("show", H200_RUN, "--format", "xml").exit_code == 2
    torn = tmp_path / "torn.jsonl"
    torn.write_text('{"schema": 1, "suite"\n')
    result = cli("show", torn)
    assert result.exit_code == 2 and "torn.jsonl" in result.output


def test_git_commit_from_the_environment_wins(monkeypatch):
    """A remote copy of the tree may carry a stale .git: the commit the user names is recorded."""
    from kbench import envinfo

    monkeypatch.setenv("KBENCH_GIT_COMMIT", "abc1234")
    assert envinfo.git_state() == {"commit": "abc1234", "dirty": None}
    monkeypatch.delenv("KBENCH_GIT_COMMIT")
    assert envinfo.git_state()["commit"] != "abc1234"
