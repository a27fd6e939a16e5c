"""Workers started ahead of their turn, so that their start-up overlaps the measurement before them.

A worker's start-up (importing torch, making its CUDA context, loading its suite's kernels) takes
seconds, and a run used to pay it once per implementation, in turn. A :class:`WorkerStarter` keeps
workers starting while others check and measure: the next implementation takes one that is ready, or
about to be. Starting early never means measuring early: the workers take turns on the GPU
(kbench.gpu_quiet), one timing at a time. Every worker stays isolated as before (a crash or a hang
costs only its row), and :meth:`WorkerStarter.close` kills the spares and reaps the released ones, on
Ctrl-C too.

The workers are forked from a fork server (kbench.forkserver) that has imported torch and the suite's
kernels once: each is still a process of its own, ready in milliseconds on the CPU, and on a GPU once
it has made its own CUDA context. Where the server cannot start, will not fork (something loaded the
CUDA driver in it), or a worker forked for a GPU run cannot use the GPU, the workers start as new
Pythons instead, as they would without it.
"""

from __future__ import annotations

import atexit
import os
import tempfile
from collections import deque
from contextlib import contextmanager
from pathlib import Path

from kbench import forkserver, gpu_quiet
from kbench.isolation import WorkerGone, WorkerProcess


# A fork server started before the run that will fork from it: (kernel_dirs, device, suite, server, log).
_early: list = []


def start_fork_server_early(kernel_dirs, device: str, suite: str) -> None:
    """Start the fork server of a run of ``suite`` now, so that its imports (torch, the suite's kernels:
    seconds) overlap what kbench does before its first worker is needed (parsing the command line,
    loading the kernels itself to choose the run's variants); the run's WorkerStarter takes it over.
    Nothing happens where one for the same kernels, device and suite is started already, or forking
    is not available. One no run takes is closed at exit (:func:`close_unclaimed`)."""
    from kbench.runner import host_has_gpu

    gpu_quiet.share()  # before the server starts: it and its workers inherit the lock's name
    if not forkserver.available() or device not in ("auto", "cpu", "cuda"):  # another is refused later
        return
    on_gpu = device == "cuda" or (device == "auto" and host_has_gpu())
    key = _server_key(kernel_dirs, device if on_gpu else "cpu", suite)
    if any(entry[:3] == key for entry in _early):
        return
    started = _start_server(*key)
    if started is not None:
        _early.append((*key, *started))


def _server_key(kernel_dirs, device: str, suite: str) -> tuple:
    """What a fork server serves: its kernel folders (as paths), its device and its suite."""
    return tuple(Path(p) for p in kernel_dirs), device, suite


def _start_server(kernel_dirs, device: str, suite: str) -> tuple | None:
    """A new fork server and the path of its log, or None where it could not start."""
    log = tempfile.NamedTemporaryFile(prefix="kbench-forkserver-", suffix=".log", delete=False)
    log.close()
    try:
        return forkserver.ForkServer(kernel_dirs, device, suite, log.name), log.name
    except OSError:
        os.unlink(log.name)
        return None


def close_unclaimed() -> None:
    """Close the fork servers started early that no run took (the command line was wrong, the run
    stopped before its first worker)."""
    while _early:
        entry = _early.pop()
        entry[3].close()
        try:
            os.unlink(entry[4])
        except OSError:
            pass


atexit.register(close_unclaimed)


@contextmanager
def fork_server_started_early(kernel_dirs, device: str, suite: str):
    """:func:`start_fork_server_early` for the block: a server no run took is closed when it ends, on
    an error too."""
    start_fork_server_early(kernel_dirs, device, suite)
    try:
        yield
    finally:
        close_unclaimed()


def _take_early(kernel_dirs, device: str, suite: str):
    """The (server, log) started early for these kernels, device and suite, or None."""
    for entry in _early:
        if entry[:3] == _server_key(kernel_dirs, device, suite):
            _early.remove(entry)
            return entry[3], entry[4]
    return None


def workers_ahead(cpus: int | None = None) -> int:
    """How many workers start ahead: $KBENCH_WORKERS_AHEAD where set (at least 1), else one on a small
    machine (each start-up takes a core for seconds), two from eight cores up."""
    try:
        return max(1, int(os.environ["KBENCH_WORKERS_AHEAD"]))
    except (KeyError, ValueError):
        pass
    cpus = cpus or os.cpu_count() or 1
    return 2 if cpus >= 8 else 1


class WorkerStarter:
    """Hands out workers for one run: ``needed`` is how many the run expects to take (a worker per
    implementation that has a job to run), ``ahead`` how many may start before they are taken."""

    def __init__(self, kernel_dirs, device: str, suite: str, needed: int, ahead: int | None = None,
                 start=WorkerProcess, fork_device: str | None = None):
        """``fork_device``: fork the workers from one fork server (kbench.forkserver) that imports torch and
        the kernels once for that device ("cpu" or "cuda"), where forking is available; None: each worker
        is a new Python."""
        self.kernel_dirs, self.device, self.suite = tuple(kernel_dirs), device, suite
        gpu_quiet.share()  # the workers take turns on the GPU (kbench.gpu_quiet)
        self.left = needed
        self._start = start  # a seam for tests
        self.fork_device = fork_device
        self.fork = fork_device is not None and needed > 0 and forkserver.available()
        # A forked worker is ready in milliseconds and costs a core for no longer: all of them start at
        # once, so the run can draw every implementation's trials side by side. A new Python takes a
        # core for seconds: only a few start ahead.
        if ahead is None:
            ahead = needed if self.fork else workers_ahead()
        self.ahead = ahead
        self.server = None
        self.server_log: str | None = None
        self.spares: deque = deque()
        self.released: list = []

    def _server(self):
        """The fork server, started at the first worker; None where it could not start (then workers are
        started as new Pythons, as without it)."""
        if self.fork and self.server is None:
            # The workers of a GPU run pick their device as asked (the server's spec is theirs).
            device = "cpu" if self.fork_device == "cpu" else self.device
            started = _take_early(self.kernel_dirs, device, self.suite) or _start_server(self.kernel_dirs, device,
                                                                                          self.suite)
            if started is None:
                self.fork = False
            else:
                self.server, self.server_log = started
        return self.server

    def _new(self):
        server = self._server()
        if server is not None:
            try:
                return self._start(self.kernel_dirs, self.device, suite=self.suite, wait=False, server=server)
            except RuntimeError:  # the server did not start or answer: new Pythons from here on
                self._stop_server(keep_log=True)
                self.fork = False
        return self._start(self.kernel_dirs, self.device, suite=self.suite, wait=False)

    def _stop_server(self, keep_log: bool = False) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
        if self.server_log and not keep_log:
            try:
                os.unlink(self.server_log)
            except OSError:
                pass
            self.server_log = None

    def top_up(self) -> None:
        """Start workers until ``ahead`` of them wait, but no more than the run will still take."""
        while len(self.spares) < min(self.ahead, self.left):
            self.spares.append(self._new())

    def take(self):
        """A ready worker: a spare if one was started (waiting for it to be ready), else a new one. The
        next ones start before this one is waited for, so they start up while it measures."""
        worker = self.spares.popleft() if self.spares else self._new()
        self.left -= 1
        self.top_up()
        try:
            ready = self._ready(worker)
        except BaseException:
            worker.close()
            raise
        self._settle_released()
        return ready

    def _settle_released(self) -> None:
        """Wait for the released workers to end before the next one measures: a process's exit frees its
        CUDA context, work on the GPU that would run beside the next worker's samples."""
        for worker in self.released:
            worker.close()
        self.released.clear()

    def _ready(self, worker):
        """``worker`` once ready; for a GPU run, a new Python in place of a forked worker that died on its
        way up or sees no GPU (a fork the server's check let through): forking stops for the rest of
        the run, and the spares forked so far are started again as new Pythons."""
        gpu_fork = getattr(worker, "forked", False) and self.fork_device == "cuda"
        try:
            worker.wait_ready()
        except WorkerGone:
            if not gpu_fork:
                raise
        else:
            if not gpu_fork or worker.device == "cuda":
                return worker
        worker.close()
        self._stop_server(keep_log=True)
        self.fork = False
        forked = [spare for spare in self.spares if getattr(spare, "forked", False)]
        for spare in forked:
            spare.kill()
            spare.close()
        self.spares = deque(spare for spare in self.spares if spare not in forked)
        self.top_up()
        replacement = self._new()
        replacement.wait_ready()
        return replacement

    def release(self, worker) -> None:
        """A worker whose jobs are done: it ends on its own, reaped at :meth:`close`."""
        worker.release()
        self.released.append(worker)

    def close(self) -> None:
        """Kill the spares (still starting, or waiting for a job that will not come) and reap the rest."""
        for worker in self.spares:
            worker.kill()
            worker.close()
        for worker in self.released:
            worker.close()
        self.spares.clear()
        self.released.clear()
        self._stop_server()
