"""Workers started ahead (kbench/worker_starter.py): the next implementation's worker starts while the
current one measures, never more than the run will take, and none is left behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kbench import worker_starter
from kbench.isolation import WorkerProcess
from kbench.worker_starter import WorkerStarter


class FakeWorker:
    started: list = []

    def __init__(self, kernel_dirs, device, suite=None, wait=True):
        self.suite, self.ready, self.alive, self.busy = suite, False, True, False
        self.released = self.closed = self.killed = False
        FakeWorker.started.append(self)

    def wait_ready(self):
        self.ready = True

    def release(self):
        self.released = True

    def kill(self):
        self.killed, self.alive = True, False

    def close(self):
        self.closed, self.alive = True, False


def _starter(needed, ahead):
    FakeWorker.started = []
    return WorkerStarter((), "cpu", "attention", needed=needed, ahead=ahead, start=FakeWorker)


def test_the_next_worker_starts_before_the_first_is_waited_for():
    starter = _starter(needed=3, ahead=1)
    first = starter.take()
    assert first.ready and first.suite == "attention"
    assert len(FakeWorker.started) == 2 and not FakeWorker.started[1].ready  # starting, not yet waited for
    second = starter.take()
    assert second is FakeWorker.started[1] and len(FakeWorker.started) == 3
    third = starter.take()
    assert third is FakeWorker.started[2] and len(FakeWorker.started) == 3  # the run takes no fourth


def test_no_worker_starts_for_a_run_that_needs_none_and_spares_are_killed():
    starter = _starter(needed=0, ahead=2)
    starter.top_up()
    assert FakeWorker.started == []
    starter = _starter(needed=3, ahead=2)
    used = starter.take()
    starter.release(used)
    spares = list(starter.spares)
    assert len(spares) == 2
    starter.close()
    assert used.released and used.closed
    assert all(w.killed and w.closed for w in spares) and not starter.spares


def test_a_crashed_worker_is_replaced_even_past_the_count():
    starter = _starter(needed=1, ahead=1)
    starter.take()
    again = starter.take()  # the first one crashed: its implementation's next job needs a fresh worker
    assert again.ready and len(FakeWorker.started) == 2


def test_how_many_start_ahead():
    assert worker_starter.workers_ahead(2) == 1 and worker_starter.workers_ahead(16) == 2


def test_a_real_worker_started_without_waiting_becomes_ready(proc_env, monkeypatch):
    for key, value in proc_env().items():
        monkeypatch.setenv(key, value)
    worker = WorkerProcess((), device="cpu", suite="attention", wait=False)
    try:
        assert not worker.ready
        worker.wait_ready()
        assert worker.ready and worker.device == "cpu" and worker.env["device"] == "cpu"
        worker.release()  # ends on its own once its stdin is closed
        worker.process.wait(timeout=60)
        assert not worker.alive
    finally:
        worker.close()
    assert not os.path.exists(worker.log.name)


class ForkedFake(FakeWorker):
    """A worker forked (``server`` given) or started as a new Python; a forked one of a GPU run that
    cannot use the GPU reports the CPU, as kbench.worker does where torch sees no CUDA device."""

    def __init__(self, kernel_dirs, device, suite=None, wait=True, server=None):
        super().__init__(kernel_dirs, device, suite, wait)
        self.forked = server is not None
        self.device = None

    def wait_ready(self):
        self.ready = True
        self.device = "cpu" if self.forked else "cuda"


class FakeServer:
    def __init__(self, *args):
        self.closed = False

    def close(self):
        self.closed = True


def test_a_gpu_run_whose_forked_worker_sees_no_gpu_starts_new_pythons_instead(monkeypatch):
    monkeypatch.setattr(worker_starter.forkserver, "available", lambda: True)
    monkeypatch.setattr(worker_starter.forkserver, "ForkServer", FakeServer)
    FakeWorker.started = []
    starter = WorkerStarter((), "auto", "attention", needed=3, ahead=1, start=ForkedFake, fork_device="cuda")
    first = starter.take()
    assert first.device == "cuda" and not first.forked  # a new Python in the forked one's place
    forked = [w for w in FakeWorker.started if w.forked]
    assert forked and all(w.closed for w in forked)  # the forked ones (taken and spare) are gone
    assert starter.server is None and not starter.fork
    second, third = starter.take(), starter.take()
    assert not second.forked and not third.forked and second.device == third.device == "cuda"
    starter.close()


def test_a_cpu_run_keeps_its_forked_workers(monkeypatch):
    monkeypatch.setattr(worker_starter.forkserver, "available", lambda: True)
    monkeypatch.setattr(worker_starter.forkserver, "ForkServer", FakeServer)
    FakeWorker.started = []
    starter = WorkerStarter((), "cpu", "attention", needed=2, ahead=1, start=ForkedFake, fork_device="cpu")
    assert starter.take().forked and starter.take().forked
    starter.close()


@pytest.fixture
def servers(monkeypatch):
    """Fork servers as the starter would start them, recorded (with their arguments), none of them real."""
    started = []

    class Server(FakeServer):
        def __init__(self, *args):
            super().__init__()
            self.args = args
            started.append(self)

    monkeypatch.setattr(worker_starter.forkserver, "available", lambda: True)
    monkeypatch.setattr(worker_starter.forkserver, "ForkServer", Server)
    return started


def test_a_fork_server_started_early_is_taken_by_the_run_and_an_untaken_one_closed(servers):
    """kbench run starts its fork server before loading the kernels itself, so the server's imports overlap
    that loading; the run's starter forks from it rather than starting another."""
    started = servers
    FakeWorker.started = []
    with worker_starter.fork_server_started_early((), "cpu", "attention"):
        assert len(started) == 1
        starter = WorkerStarter((), "cpu", "attention", needed=1, ahead=0, start=ForkedFake, fork_device="cpu")
        assert starter.take().forked and starter.server is started[0] and len(started) == 1
        starter.close()
    assert started[0].closed  # by the starter that took it
    with worker_starter.fork_server_started_early((), "cpu", "matmul"):
        pass  # a run that needed no worker (or ended on a mistake)
    assert len(started) == 2 and started[1].closed and worker_starter._early == []


def test_a_released_worker_has_ended_before_the_next_one_is_handed_out():
    """Its exit frees a CUDA context on the GPU: that must not run beside the next worker's samples."""
    starter = _starter(needed=2, ahead=1)
    first = starter.take()
    starter.release(first)
    assert first.released and not first.closed
    second = starter.take()
    assert first.closed and second.ready and not second.closed
    starter.close()


def test_workers_ahead_can_be_set_in_the_environment(monkeypatch):
    monkeypatch.setenv("KBENCH_WORKERS_AHEAD", "4")
    assert worker_starter.workers_ahead(2) == 4
    monkeypatch.setenv("KBENCH_WORKERS_AHEAD", "0")
    assert worker_starter.workers_ahead(2) == 1
    monkeypatch.setenv("KBENCH_WORKERS_AHEAD", "many")
    assert worker_starter.workers_ahead(16) == 2


@pytest.mark.parametrize("argv, key", [
    (["run", "attention", "--n", "256", "--device", "cpu"], ((), "cpu", "attention")),
    (["run", "matmul", "--device=cpu", "--kernels", "mine", "--kernels=more/k.py"],
     ((Path("mine"), Path("more/k.py")), "cpu", "matmul")),
])
def test_kbench_run_starts_its_fork_server_before_parsing_and_the_run_takes_it(servers, argv, key):
    """The server's imports (torch, the kernels) overlap kbench's own start-up from the first line of main:
    the suite, --device and --kernels are read off the arguments, and the run's starter forks from that
    server rather than starting another."""
    from kbench import cli

    started = servers
    cli._start_run_early(argv)
    assert len(started) == 1 and started[0].args[:3] == key
    with worker_starter.fork_server_started_early(*key):  # as run_suite does: no second server
        FakeWorker.started = []
        starter = WorkerStarter(key[0], "cpu", key[2], needed=1, ahead=0, start=ForkedFake, fork_device="cpu")
        assert starter.take().forked and starter.server is started[0]
        starter.close()
    assert len(started) == 1 and worker_starter._early == []


@pytest.mark.parametrize("argv", [["run", "--help"], ["run", "attention", "-h"], ["list"], ["run"], ["compare", "a", "b"]])
def test_only_a_run_starts_a_fork_server_early(servers, argv):
    from kbench import cli

    cli._start_run_early(argv)
    assert servers == [] and worker_starter._early == []


def test_an_early_fork_server_no_run_took_is_closed(servers):
    from kbench import cli

    cli._start_run_early(["run", "attention", "--device", "cpu", "--n", "oops"])
    worker_starter.close_unclaimed()  # what exit does when the command line was refused
    assert servers[0].closed and worker_starter._early == []
