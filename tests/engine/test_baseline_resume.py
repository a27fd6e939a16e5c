"""`kbench run --save-baseline NAME` (an atomic write under results/baselines/, names that cannot escape
it) and `kbench run --resume` (continue an interrupted or killed run without re-running what it recorded)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kbench import results, runner
from kbench.errors import UserError
from kbench.registry import variants
from kbench.suite import Case

from fake_records import KEY, fake_record

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


# --- baseline names ---------------------------------------------------------------------------

@pytest.mark.parametrize("name,expected", [("main", "main.jsonl"), ("main.jsonl", "main.jsonl"),
                                           ("pr-123_h200.v2", "pr-123_h200.v2.jsonl"), ("_x", "_x.jsonl")])
def test_baseline_path_for_plain_names(name, expected):
    assert results.baseline_path(name) == Path("results") / "baselines" / expected


@pytest.mark.parametrize("name", ["../x", "../../etc/passwd", "a/b", "/etc/passwd", "/tmp/x", "..", ".", ".hidden",
                                  "", "x\x00y", "a\\b", "x y", "~/x", "-rf", "a" * 200, "ma\nin"])
def test_baseline_names_that_could_escape_are_refused(name):
    with pytest.raises(UserError, match="--save-baseline: .* is not a plain name"):
        results.baseline_path(name)


def test_cli_refuses_an_escaping_baseline_name_before_running(cli, tmp_path, monkeypatch, flat_text):
    from kbench import runner as runner_module

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(runner_module, "run", lambda *a, **k: pytest.fail("the run must not start"))
    out = tmp_path / "r.jsonl"
    result = cli("run", "attention", "--impl", "naive", "--out", out, "--save-baseline", "../escape")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "--save-baseline: '../escape' is not a plain name" in flat_text(result.stderr)
    assert not out.exists() and not (tmp_path / "escape.jsonl").exists() and not (tmp_path / "results").exists()


# --- the atomic write ---------------------------------------------------------------------------

def test_write_atomic_writes_every_record(tmp_path):
    path = tmp_path / "baselines" / "main.jsonl"  # the folder is created
    recs = [fake_record("naive"), fake_record("sdpa", "SKIP")]
    results.write_atomic(path, recs)
    assert results.read(path) == recs
    assert list(path.parent.iterdir()) == [path]  # no temporary file left
    assert path.stat().st_mode & 0o777 == 0o666 & ~_umask()  # an ordinary file, not mkstemp's 0600


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_write_atomic_syncs_before_the_rename(tmp_path, monkeypatch):
    path = tmp_path / "main.jsonl"
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.path.isdir(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src, dst):
        # The data is complete in the temporary file, in the same folder, when it is renamed.
        assert Path(src).parent == Path(dst).parent == tmp_path
        assert results.read(Path(src)) == [fake_record("naive")]
        events.append(("replace", Path(dst).name))
        real_replace(src, dst)

    monkeypatch.setattr(results.os, "fsync", fsync)
    monkeypatch.setattr(results.os, "replace", replace)
    results.write_atomic(path, [fake_record("naive")])
    # The file's data, then the rename, then the folder (so the rename itself survives a crash).
    assert events == [("fsync", False), ("replace", "main.jsonl"), ("fsync", True)]


def test_failed_write_keeps_the_old_baseline_and_leaves_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "main.jsonl"
    results.write_atomic(path, [fake_record("old")])
    before = path.read_text()

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(results.os, "replace", broken_replace)
    with pytest.raises(UserError, match="cannot write .*main.jsonl.*No space left on device"):
        results.write_atomic(path, [fake_record("new")])
    assert path.read_text() == before
    assert list(tmp_path.iterdir()) == [path]


def test_interrupted_write_keeps_the_old_baseline(tmp_path, monkeypatch):
    path = tmp_path / "main.jsonl"
    results.write_atomic(path, [fake_record("old")])
    before = path.read_text()
    real_dumps = results.dumps
    calls = []

    def dumps_then_interrupt(record, **kw):
        calls.append(record)
        if len(calls) == 2:
            raise KeyboardInterrupt  # Ctrl-C halfway through the records
        return real_dumps(record, **kw)

    monkeypatch.setattr(results, "dumps", dumps_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        results.write_atomic(path, [fake_record("a"), fake_record("b"), fake_record("c")])
    assert path.read_text() == before
    assert list(tmp_path.iterdir()) == [path]


# --- --save-baseline through the command, with the runner replaced ---------------------------------

def _fake_runner(monkeypatch, calls, interrupt_after=None):
    def fake_run(registry, request, out, on_start, on_record, done=None):
        calls.append({"done": dict(done or {}), "ran": []})
        for variant in request.variants:
            for case in request.cases:
                if (request.suite, variant.label, case.key) in (done or {}):
                    continue
                if interrupt_after is not None and len(calls[-1]["ran"]) == interrupt_after:
                    raise KeyboardInterrupt
                on_start(variant, case)
                record = fake_record(variant.impl.name, case_key=case.key)
                calls[-1]["ran"].append((variant.label, case.key))
                out.append(record)
                on_record(record)

    monkeypatch.setattr(runner, "run", fake_run)


def test_save_baseline_writes_the_runs_records(cli, tmp_path, monkeypatch, jsonl, flat_text):
    monkeypatch.chdir(tmp_path)
    _fake_runner(monkeypatch, [])
    result = cli("run", "attention", "--impl", "naive,sdpa", "--n", "16,32", "--out", "cur.jsonl",
                 "--save-baseline", "main")
    assert result.exit_code == 0, result.output
    baseline = tmp_path / "results" / "baselines" / "main.jsonl"
    assert jsonl(baseline) == jsonl(tmp_path / "cur.jsonl")
    assert [r["impl"] for r in jsonl(baseline)] == ["naive", "naive", "sdpa", "sdpa"]
    assert f"baseline: {Path('results/baselines/main.jsonl')} (4 records)" in flat_text(result.stderr)
    # Saved again: replaced whole, not appended to.
    assert cli("run", "attention", "--impl", "naive", "--n", "16", "--out", "cur2.jsonl",
               "--save-baseline", "main.jsonl").exit_code == 0
    assert len(jsonl(baseline)) == 1


def test_interrupted_run_does_not_touch_the_baseline(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    baseline = tmp_path / "results" / "baselines" / "main.jsonl"
    results.write_atomic(baseline, [fake_record("old")])
    before = baseline.read_text()
    _fake_runner(monkeypatch, [], interrupt_after=1)
    result = cli("run", "attention", "--impl", "naive,sdpa", "--out", "cur.jsonl", "--save-baseline", "main")
    assert result.exit_code == 130, result.output
    assert baseline.read_text() == before
    assert "--resume --out cur.jsonl continues" in result.stderr


# --- --resume through the command, with the runner replaced -------------------------------------

def test_resume_needs_out(cli, flat_text):
    result = cli("run", "attention", "--impl", "naive", "--resume")
    assert result.exit_code == 2
    assert "--resume needs --out FILE: the results file of the run to continue" in flat_text(result.stderr)


def test_resume_skips_recorded_keys_and_reports_the_whole_run(cli, tmp_path, monkeypatch, flat_text):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run.jsonl"
    case16 = "n=16,d=128,batch=1,heads=1,dtype=fp16,causal=False"
    case32 = case16.replace("n=16", "n=32")
    other_suite = fake_record("naive", case_key=case32)
    other_suite.suite = "matmul"
    recorded = [fake_record("naive", case_key=case16), fake_record("sdpa", "FAIL", case_key=case16), other_suite]
    out.write_text("".join(json.dumps(r.to_json()) + "\n" for r in recorded)
                   + '{"schema": 1, "suite": "attention", "sta')
    calls = []
    _fake_runner(monkeypatch, calls)
    result = cli("run", "attention", "--impl", "naive,sdpa", "--n", "16,32", "--out", out, "--resume",
                 "--format", "json", "--save-baseline", "resumed")
    # sdpa's recorded FAIL is final: not re-run, and still fails the run.
    assert result.exit_code == 1, result.output
    (call,) = calls
    assert set(call["done"]) == {("attention", "naive", case16), ("attention", "sdpa", case16)}
    assert call["ran"] == [("naive", case32), ("sdpa", case32)]  # the torn line and the matmul record: not done
    assert "resuming" in result.stderr and "2 of 4 already recorded, 2 to run" in flat_text(result.stderr)
    shown = json.loads(result.stdout)
    assert [(r["impl"], r["case_key"]) for r in shown] == [("naive", case16), ("sdpa", case16),
                                                           ("naive", case32), ("sdpa", case32)]
    on_file = results.read_strict(out)  # the torn line was removed, the new records appended
    assert len(on_file) == 5
    baseline = results.read(tmp_path / "results" / "baselines" / "resumed.jsonl")  # the whole run
    assert [(r.impl, r.case_key) for r in baseline] == [(r["impl"], r["case_key"]) for r in shown]


def test_resume_of_a_missing_file_runs_everything(cli, tmp_path, monkeypatch):
    calls = []
    _fake_runner(monkeypatch, calls)
    result = cli("run", "attention", "--impl", "naive", "--out", tmp_path / "new.jsonl", "--resume")
    assert result.exit_code == 0, result.output
    assert calls[0]["done"] == {} and len(calls[0]["ran"]) == 1


# --- the runner: skips what is done, speedups from the recorded baseline -----------------------------

def test_runner_skips_done_keys_and_uses_the_recorded_baseline_time(registry, tmp_path):
    """Real workers: naive's record is already there (a fabricated 1 s median, kept as the baseline for
    the speedup); only sdpa-math runs."""
    case = Case({"n": 8, "d": 16, "batch": 1, "heads": 1, "dtype": "fp32", "causal": False})
    chosen = variants(registry.select("attention", ["naive", "sdpa-math"]), {})
    done = {("attention", "naive", case.key): fake_record("naive", case_key=case.key, median=1000.0)}
    request = runner.RunRequest(suite="attention", variants=chosen, cases=[case], baseline="naive", trials=1,
                                stop={"max_time": 0.05, "min_time": 0.0}, timeout=120, device="cpu")
    started = []
    out = results.ResultsFile(tmp_path / "r.jsonl")
    try:
        new = runner.run(registry, request, out, on_start=lambda v, c: started.append(v.label), done=done)
    finally:
        out.close()
    assert started == ["sdpa-math"]
    (record,) = new
    assert record.impl == "sdpa-math" and record.status == "OK", record.reason
    assert record.speedup == pytest.approx(1000.0 / record.median)


# --- end to end: resume after a killed run -------------------------------------------------------

def _wait_for(predicate, proc, timeout=120.0, what=""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        if proc.poll() is not None:
            return predicate()
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def test_resume_after_a_killed_run(cli, tmp_path, proc_env, jsonl):
    """kbench is SIGKILLed (no clean-up at all) while the second implementation hangs; a run killed
    mid-write also leaves a torn line. `--resume` runs only what has no record: the hanging kernel
    (now with a short --timeout), never the one already measured."""
    markers = tmp_path / "markers"
    markers.mkdir()
    out = tmp_path / "killed.jsonl"
    args = ["run", "attention", "--n", "16", "--d", "16", "--max-time", "0.1", "--kernels", FIXTURES / "interrupt",
            "--impl", "fast,hang", "--baseline", "fast", "--out", out]
    with open(tmp_path / "stderr.txt", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "kbench", *map(str, args), "--timeout", "300"], cwd=tmp_path,
                                env=proc_env(KBENCH_TEST_MARKERS=str(markers), TMPDIR=str(tmp_path)),
                                stdout=subprocess.DEVNULL, stderr=err)
    worker = None
    try:
        _wait_for(lambda: (markers / "hang.started").exists(), proc, what="the hanging job")
        worker = int((markers / "hang.started").read_text())
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    try:
        assert [(r["impl"], r["status"]) for r in jsonl(out)] == [("fast", "OK")]
        with open(out, "a") as fh:
            fh.write('{"schema": 1, "suite": "attention", "impl": "hang", "label": "hang", "sta')  # torn
        first = results.read(out)[0]

        result = cli(*args, "--timeout", "2", "--resume")
        assert result.exit_code == 1, result.output  # hang is a TIMEOUT now
        records = results.read(out)
        assert [(r.impl, r.status) for r in records] == [("fast", "OK"), ("hang", "TIMEOUT")]
        assert records[0] == first  # fast was not measured again
        assert "1 of 2 already recorded, 1 to run" in " ".join(result.stderr.split())
        for record in records:
            if record.log:
                Path(record.log).unlink(missing_ok=True)
    finally:
        if worker is not None and _alive(worker):  # the killed run's worker ends itself; make sure
            os.kill(worker, signal.SIGKILL)


# --- the engine's parts: the baselines added to a selection, the records a resumed run keeps ---------

def test_selection_adds_the_missing_baselines_in_front(registry):
    from kbench import selection

    suite = registry.suite("attention")
    cases = [Case({"n": 16, "d": 16, "batch": 1, "heads": 1, "dtype": "fp32", "causal": False})]
    chosen = selection.select(registry, suite, cases, ["sdpa"], [], None)
    assert [v.label for v in chosen.variants] == ["naive", "sdpa"] and chosen.added_baselines == ["naive"]
    chosen = selection.select(registry, suite, cases, ["sdpa", "naive"], [], None)  # asked for: not added
    assert [v.label for v in chosen.variants] == ["sdpa", "naive"] and chosen.added_baselines == []
    chosen = selection.select(registry, suite, cases, ["naive"], [], "sdpa")
    assert [v.label for v in chosen.variants] == ["sdpa", "naive"] and chosen.added_baselines == ["sdpa"]
    with pytest.raises(UserError, match="--baseline: unknown implementation 'sdp'; did you mean 'sdpa'"):
        selection.select(registry, suite, cases, ["naive"], [], "sdp")


def test_recorded_keeps_the_wanted_records_after_cutting_a_torn_line(tmp_path):
    from kbench import resume

    path = tmp_path / "r.jsonl"
    assert resume.recorded(path, {("attention", "naive", KEY)}) == resume.Recorded()  # no file: nothing done
    old, new = fake_record("naive", median=2.0), fake_record("naive", median=3.0)
    torn = '{"schema": 1, "suite": "att'
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in (old, fake_record("sdpa"), new)) + torn)
    state = resume.recorded(path, {("attention", "naive", KEY), ("attention", "other", KEY)})
    assert state.done == {("attention", "naive", KEY): new}  # the last record of a key wins; sdpa not wanted
    assert state.torn_bytes == len(torn) and path.read_text().endswith(json.dumps(new.to_json()) + "\n")
