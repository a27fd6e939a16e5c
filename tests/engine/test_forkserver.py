"""The fork server (kbench/forkserver.py): CPU runs fork their workers from one process that imported
torch and the kernels once. Each worker is still a process of its own (the isolation tests run through
it: abort, segfault, hang and exception each cost only their row); here, what is the server's alone:
whose child a worker is, how its end is reported, that nothing outlives the run, and the fall-back to
new Pythons where the server cannot start."""

from __future__ import annotations

import os
import signal
import time

import pytest

from kbench import forkserver
from kbench.isolation import WorkerGone, WorkerProcess
from kbench.worker_starter import WorkerStarter

pytestmark = pytest.mark.skipif(not forkserver.available(), reason="the fork server needs Linux")


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def server(tmp_path):
    s = forkserver.ForkServer((), "cpu", "attention", str(tmp_path / "server.log"))
    yield s
    s.close()


def _job(n=16):
    return {"suite": "attention", "impl": "sdpa-math", "label": "sdpa-math", "params": {},
            "case": {"n": n, "d": 16, "batch": 1, "heads": 1, "dtype": "fp32", "causal": False},
            "seed": 0, "trials": 1, "stop": {"max_time": 0.05}, "flush_l2": False, "cuda_graph": False}


def test_a_forked_worker_answers_jobs_and_is_the_servers_child(server):
    worker = WorkerProcess((), device="cpu", suite="attention", server=server)
    try:
        assert worker.device == "cpu"
        with open(f"/proc/{worker.process.pid}/stat") as stat:
            parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        assert parent == server.process.pid  # forked by the server, not started by kbench
        assert os.getpgid(worker.process.pid) == worker.process.pid  # a group of its own, for the kill
        record = worker.run(_job(), timeout=60)
        assert record["status"] == "OK", record
        assert worker.run(_job(24), timeout=60)["status"] == "OK"  # several jobs, like a spawned worker
    finally:
        worker.close()
    assert worker.process.returncode == 0  # it ended when its stdin closed, and the server said so


def test_a_killed_worker_is_reported_by_the_server(server):
    worker = WorkerProcess((), device="cpu", suite="attention", server=server)
    os.kill(worker.process.pid, signal.SIGSEGV)
    with pytest.raises(WorkerGone, match="worker killed by SIGSEGV"):
        worker.run(_job(), timeout=60)
    worker.close()
    other = WorkerProcess((), device="cpu", suite="attention", server=server)  # the server goes on forking
    try:
        assert other.run(_job(), timeout=60)["status"] == "OK"
    finally:
        other.close()


def test_closing_the_server_ends_it_and_a_worker_left_running(server):
    worker = WorkerProcess((), device="cpu", suite="attention", server=server)
    pid, server_pid = worker.process.pid, server.process.pid
    server.close()
    assert _gone(server_pid)
    assert _gone(pid)  # its parent watch saw the server go
    worker.close()


def test_the_starter_forks_on_the_cpu_and_leaves_nothing(tmp_path):
    starter = WorkerStarter((), "cpu", "attention", needed=2, ahead=1, fork_device="cpu")
    first = starter.take()
    second = starter.take()
    server_pid = starter.server.process.pid
    pids = [first.process.pid, second.process.pid]
    assert first.run(_job(), timeout=60)["status"] == "OK"
    starter.release(first)
    starter.release(second)
    starter.close()
    assert starter.server is None and all(_gone(pid) for pid in [*pids, server_pid])


def test_a_server_that_cannot_start_leaves_workers_to_new_pythons(monkeypatch):
    class Broken:
        def __init__(self, *args, **kwargs):
            raise OSError("no fork server here")

    monkeypatch.setattr(forkserver, "ForkServer", Broken)
    starter = WorkerStarter((), "cpu", "attention", needed=1, ahead=0, fork_device="cpu")
    worker = starter.take()
    try:
        assert not starter.fork and starter.server is None
        assert worker.run(_job(), timeout=60)["status"] == "OK"
    finally:
        starter.release(worker)
        starter.close()


def test_gpu_runs_spawn_their_workers():
    starter = WorkerStarter((), "auto", "attention", needed=1, fork_device=None)
    assert not starter.fork
    starter.close()


def test_a_server_for_a_gpu_run_refuses_to_fork_once_the_cuda_driver_is_loaded(tmp_path):
    """A child forked after the driver is initialised cannot use the GPU: the driver library mapped into
    the server is taken as the sign (and torch's own CUDA state)."""
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/libc.so.6\n")
    assert forkserver.gpu_untouched(str(maps)) == ""
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04\n")
    # The library is not mapped into this test's process: the driver cannot be asked, so the server refuses.
    assert "cannot say it is not initialised" in forkserver.gpu_untouched(str(maps))
    assert "cannot read" in forkserver.gpu_untouched(str(tmp_path / "absent"))


def test_a_server_forks_while_the_loaded_driver_is_not_initialised(tmp_path, monkeypatch):
    """Importing CuPy maps libcuda without initialising it: a child forked then makes its own context.
    The driver's own answer decides (cuDeviceGetCount: not initialised before cuInit)."""
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libcuda.so.1\n")
    answers = {}
    monkeypatch.setattr(forkserver, "driver_state", lambda path: answers.setdefault(path, state))
    state = forkserver.CUDA_ERROR_NOT_INITIALIZED
    assert forkserver.gpu_untouched(str(maps)) == ""
    assert answers == {"/usr/lib/x86_64-linux-gnu/libcuda.so.1": state}
    answers.clear()
    state = 0  # cuInit has run
    assert "initialised" in forkserver.gpu_untouched(str(maps))


def test_a_refusing_servers_hello_is_the_error_the_starter_falls_back_on(tmp_path, monkeypatch):
    """WorkerStarter starts new Pythons on a RuntimeError from the server (test_worker_starter)."""
    server = forkserver.ForkServer((), "cpu", "attention", str(tmp_path / "server.log"))
    try:
        monkeypatch.setattr(server, "_expect", lambda kind, timeout: {"type": "hello", "refuses": "libcuda loaded"})
        with pytest.raises(RuntimeError, match="forks no workers: libcuda loaded"):
            server.wait_ready(5)
    finally:
        server.close()
