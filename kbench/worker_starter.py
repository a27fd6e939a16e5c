"""Workers started ahead of their turn, so that their start-up overlaps the measurement before them.

A worker's start-up (importing torch, making its CUDA context, loading its suite's kernels) takes
seconds, and a run used to pay it once per implementation, in turn. A :class:`WorkerStarter` keeps a
few workers starting while the current one measures: the next implementation takes one that is
ready, or about to be. A worker that has started only waits: it gets no job before its turn, so no two
implementations ever measure at once. Every worker stays isolated as before (a crash or a hang costs
only its row), and :meth:`WorkerStarter.close` kills the spares and reaps the released ones, on
Ctrl-C too.
"""

from __future__ import annotations

import os
from collections import deque

from kbench.isolation import WorkerProcess


def workers_ahead(cpus: int | None = None) -> int:
    """How many workers start ahead: one on a small machine (each start-up takes a core for seconds),
    two from eight cores up."""
    cpus = cpus or os.cpu_count() or 1
    return 2 if cpus >= 8 else 1


class WorkerStarter:
    """Hands out workers for one run: ``needed`` is how many the run expects to take (a worker per
    implementation that has a job to run), ``ahead`` how many may start before they are taken."""

    def __init__(self, kernel_dirs, device: str, suite: str, needed: int, ahead: int | None = None,
                 start=WorkerProcess):
        self.kernel_dirs, self.device, self.suite = tuple(kernel_dirs), device, suite
        self.left = needed
        self.ahead = workers_ahead() if ahead is None else ahead
        self._start = start  # a seam for tests
        self.spares: deque = deque()
        self.released: list = []

    def _new(self):
        return self._start(self.kernel_dirs, self.device, suite=self.suite, wait=False)

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
            worker.wait_ready()
        except BaseException:
            worker.close()
            raise
        return worker

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
