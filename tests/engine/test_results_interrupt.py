"""The results file: appended and fsync'ed record by record, so an interrupted run keeps what it measured."""

from __future__ import annotations

import json
import os
import re
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
from fake_records import fake_record

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


# --- ResultsFile and read() ---------------------------------------------------------

def test_append_writes_one_line_per_record_and_fsyncs(tmp_path, monkeypatch):
    path = tmp_path / "sub" / "r.jsonl"  # parent folders are created
    synced = []

    def fake_fsync(fd):
        # By the time fsync is asked for, the line has left Python's buffer.
        synced.append((fd, path.read_text()))

    monkeypatch.setattr(results.os, "fsync", fake_fsync)
    a, b = fake_record("a"), fake_record("b", "SKIP")
    b.config = {"nested": {"x": [1, 2]}}
    out = results.ResultsFile(path)
    out.append(a)
    out.append(b)
    out.close()
    line_a, line_b = json.dumps(a.to_json()) + "\n", json.dumps(b.to_json()) + "\n"
    assert '"config": {"nested": {"x": [1, 2]}}' in line_b
    assert [text for _, text in synced] == [line_a, line_a + line_b]
    assert synced[0][0] == synced[1][0]
    assert results.read(path) == [a, b]


def test_append_keeps_existing_records(tmp_path):
    path = tmp_path / "r.jsonl"
    first = results.ResultsFile(path)
    first.append(fake_record("run1"))
    first.close()
    second = results.ResultsFile(path)
    second.append(fake_record("run2"))
    second.close()
    assert results.read(path) == [fake_record("run1"), fake_record("run2")]


def _line(impl: str) -> str:
    return json.dumps(fake_record(impl).to_json()) + "\n"


def test_read_ignores_torn_last_line_and_blank_lines(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(_line("i0") + "\n" + _line("i1") + _line("i2")[:40])
    assert results.read(path) == [fake_record("i0"), fake_record("i1")]


@pytest.mark.parametrize("bad,why", [
    ('{"i": 1}\n', "unknown schema version None"),
    ('[1, 2]\n', "expected a JSON object (a record), got list"),
    ('{"schema": 2, "suite": "attention"}\n', "schema version 2 is newer than this kbench reads (1)"),
    ('{"schema": 1, "suite": "attention", "impl": "x", "case_key": "n=1", "status": "GREAT"}\n',
     "unknown status 'GREAT'"),
])
def test_read_refuses_a_json_line_that_is_not_a_record_naming_it(tmp_path, bad, why):
    path = tmp_path / "r.jsonl"
    path.write_text(_line("i0") + bad + _line("i2"))
    with pytest.raises(UserError, match=f"^{re.escape(str(path))}:2: {re.escape(why)}"):
        results.read(path)


def test_append_after_torn_last_line_keeps_the_new_record(tmp_path):
    """A run killed mid-write leaves a torn last line with no newline. The next run appending to
    the same file must not glue its first record onto that fragment (which would lose it too)."""
    path = tmp_path / "r.jsonl"
    path.write_text(_line("i0") + _line("i1")[:40])
    out = results.ResultsFile(path)
    out.append(fake_record("i2"))
    out.close()
    assert results.read(path) == [fake_record("i0"), fake_record("i2")]


def test_unwritable_path_is_a_user_error(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(UserError, match="cannot write results to"):
        results.ResultsFile(tmp_path / "file" / "r.jsonl")


def test_default_path():
    path = results.default_path("attention")
    assert path.parent == Path("results")
    assert path.name.startswith("attention-") and path.suffix == ".jsonl"
    assert len(path.stem) == len("attention-20240101-120000")


def test_statuses():
    assert results.STATUSES == ("OK", "FAIL", "SKIP", "CRASH", "TIMEOUT")
    assert results.now().endswith("+00:00")


# --- runner.run writes each record before the next job starts ---------------------------

def test_runner_writes_each_record_before_the_next_job(registry, tmp_path):
    path = tmp_path / "run.jsonl"
    out = results.ResultsFile(path)
    impls = registry.select("attention", ["sdpa-cudnn", "naive"])  # baseline listed last: still runs first
    cases = [Case({"n": n, "d": 16, "batch": 1, "heads": 1, "dtype": "fp32", "causal": False}) for n in (8, 12)]
    request = runner.RunRequest(suite="attention", variants=variants(impls, {}), cases=cases, baseline="naive", trials=1,
                                stop={"max_time": 0.05, "min_time": 0.0}, timeout=120, device="cpu",
                                command="test")
    events = []

    def on_start(variant, case):
        lines = path.read_text().count("\n")
        events.append(("start", variant.impl.name, case.n, lines))

    def on_record(record):
        events.append(("record", record.impl, record.case["n"], path.read_text().count("\n")))

    try:
        returned = runner.run(registry, request, out, on_start=on_start, on_record=on_record)
    finally:
        out.close()
    assert events == [  # case by case, the baseline first
        ("start", "naive", 8, 0), ("record", "naive", 8, 1),
        ("start", "sdpa-cudnn", 8, 1), ("record", "sdpa-cudnn", 8, 2),
        ("start", "naive", 12, 2), ("record", "naive", 12, 3),
        ("start", "sdpa-cudnn", 12, 3), ("record", "sdpa-cudnn", 12, 4),
    ]
    on_file = results.read(path)
    assert on_file == returned
    assert [(r.impl, r.status) for r in on_file] == [("naive", "OK"), ("sdpa-cudnn", "SKIP"),
                                                     ("naive", "OK"), ("sdpa-cudnn", "SKIP")]
    assert on_file[0].speedup == pytest.approx(1.0)
    assert on_file[1].reason == "needs a CUDA device"
    assert all(r.env["device"] == "cpu" for r in on_file)
    assert all(r.command == "test" for r in on_file)
    assert [r.case_key for r in on_file[::2]] == [c.key for c in cases]


# --- SIGINT end to end --------------------------------------------------------------------

def _wait_for(predicate, proc, timeout=120.0, what=""):
    """Poll (no fixed sleeps decide anything) until predicate() is true; fail if the process ends first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            return predicate()
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _complete_lines(path: Path) -> int:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return 0
    return text.count("\n")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _interruptible() -> None:
    """In the child before kbench starts: Ctrl-C's default action. A shell that starts pytest in the
    background (`cmd &` without job control) ignores SIGINT, and an ignored SIGINT stays ignored in
    every child: kbench would never see the test's Ctrl-C (as in a terminal's background job)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def interrupted_run(tmp_path, proc_env):
    """Start `kbench run attention` over the fast and the hanging kernel; yields (proc, out, markers)."""
    markers = tmp_path / "markers"
    markers.mkdir()
    out = tmp_path / "interrupted.jsonl"
    stdout = open(tmp_path / "stdout.txt", "w")
    stderr = open(tmp_path / "stderr.txt", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kbench", "run", "attention", "--n", "16", "--d", "16", "--max-time", "0.1",
         "--kernels", str(FIXTURES / "interrupt"), "--impl", "fast,hang", "--baseline", "fast",
         "--timeout", "300", "--out", str(out)],
        cwd=tmp_path, env=proc_env(KBENCH_TEST_MARKERS=str(markers), TMPDIR=str(tmp_path)),  # worker logs here
        stdout=stdout, stderr=stderr, preexec_fn=_interruptible,
    )
    worker_pids = []
    try:
        yield proc, out, markers, worker_pids
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stdout.close()
        stderr.close()
        for pid in worker_pids:  # a worker kbench failed to end: end it here, by its pid
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_sigint_keeps_complete_records_and_exits_130(interrupted_run, tmp_path):
    proc, out, markers, worker_pids = interrupted_run
    _wait_for(lambda: _complete_lines(out) >= 1, proc, what="the first record")
    started = _wait_for(lambda: (markers / "hang.started").exists(), proc, what="the hanging job")
    assert started, "the hanging kernel never ran"
    worker = int((markers / "hang.started").read_text())
    worker_pids.append(worker)

    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=120)
    err = (tmp_path / "stderr.txt").read_text()
    assert code == 130, err
    assert "Traceback" not in err
    assert f"interrupted: 1 records kept in {out}" in err

    text = out.read_text()
    assert text.endswith("\n")
    records = [json.loads(line) for line in text.splitlines()]  # every line complete and valid
    assert [(r["impl"], r["status"]) for r in records] == [("fast", "OK")]
    assert records[0]["correctness"]["ok"] is True
    assert not _alive(worker), "the hanging worker outlived kbench"


def test_second_sigint_while_ending_workers_leaves_no_orphan(interrupted_run, tmp_path):
    """Ctrl-C twice (the first one seems slow: kbench waits up to 10 s for the hung worker to exit).
    The second must not skip killing the worker: it runs in its own process group, so no terminal signal
    reaches it, and it would hang (or hold a GPU) forever."""
    proc, out, markers, worker_pids = interrupted_run
    _wait_for(lambda: (markers / "hang.started").exists(), proc, what="the hanging job")
    worker = int((markers / "hang.started").read_text())
    worker_pids.append(worker)

    proc.send_signal(signal.SIGINT)
    # kbench closes the worker's stdin to end it, then waits for it: interrupt it there.
    _wait_for(lambda: (markers / "hang.stdin-closed").exists() or not _alive(worker), proc,
              what="kbench to start ending the worker")
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=120)
    err = (tmp_path / "stderr.txt").read_text()
    # Either kbench exits 130 itself, or the second SIGINT ends it (Popen: -2; a shell shows 130).
    assert code in (130, -signal.SIGINT), err
    assert "Traceback" not in err
    assert [r.impl for r in results.read(out)] == ["fast"]
    assert not _alive(worker), f"worker {worker} was left running after kbench exited"


def test_sigterm_does_not_leave_the_worker_running(interrupted_run, tmp_path):
    """SIGTERM is how `timeout`, CI cancellation, `docker stop` and systemd end a program. Workers run
    in their own process group, so nothing reaches them unless kbench passes it on:
    a worker stuck in a kernel must not outlive kbench."""
    proc, out, markers, worker_pids = interrupted_run
    _wait_for(lambda: (markers / "hang.started").exists(), proc, what="the hanging job")
    worker = int((markers / "hang.started").read_text())
    worker_pids.append(worker)

    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=120)
    assert [r.impl for r in results.read(out)] == ["fast"]  # what was measured is kept
    # Then kbench ends by the signal itself, as it would have without its handler (a shell shows 143).
    assert code == -signal.SIGTERM, (tmp_path / "stderr.txt").read_text()
    # The worker may take a moment to notice that kbench is gone: poll, bounded.
    assert not _still_alive_after(worker, 10.0), f"worker {worker} was left running after kbench was terminated"


def _still_alive_after(pid: int, timeout: float) -> bool:
    """False as soon as pid has ended; True if it is still running after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return False
        time.sleep(0.1)
    return _alive(pid)


def test_sigterm_reaches_the_handler_that_was_there_before():
    """kbench run in-process (a pytest test, a notebook) under ``timeout``: once the records are kept,
    SIGTERM goes on to the program's own handler instead of becoming an ordinary exit code."""
    import typer

    from kbench.cli.run_cmd import _end_as_terminated

    seen = []
    before = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(typer.Exit) as ended:
            _end_as_terminated(lambda signum, frame: seen.append(signum))
    finally:
        signal.signal(signal.SIGTERM, before)
    assert seen == [signal.SIGTERM]
    assert ended.value.exit_code == 143
