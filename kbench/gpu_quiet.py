"""One run's workers take turns on the GPU: a lock file they all share. A worker holds it alone while it
times (its warm-up, its samples, its graph replays, its timed calls on new inputs after them); every
other use of the GPU holds it shared (a worker initialising the driver, drawing trials, checking its
implementation, giving memory back), so such work runs beside other shared work, never beside another's
samples: the trials of a case's implementations are drawn side by side, each implementation is checked
and timed in its turn.

kbench makes the file once (:func:`share`) and names it in $KBENCH_GPU_LOCK, which every worker and the
fork server inherit; without it (a worker started by hand) :func:`quiet_gpu` locks nothing.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import tempfile
from contextlib import contextmanager

ENV = "KBENCH_GPU_LOCK"


def share() -> str:
    """The lock file of this kbench process (made at the first call, removed at exit), named in $KBENCH_GPU_LOCK
    for the processes it starts from here on."""
    path = os.environ.get(ENV)
    if path and os.path.exists(path):
        return path
    fd, path = tempfile.mkstemp(prefix="kbench-gpu-", suffix=".lock")
    os.close(fd)
    os.environ[ENV] = path
    atexit.register(_remove, path)
    return path


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


@contextmanager
def quiet_gpu(shared: bool = False):
    """Hold the run's GPU lock for the block: alone (waiting while any other worker holds it), or
    ``shared`` (waiting only while one holds it alone). Not re-entrant: a process takes it once at a
    time, never one block inside another."""
    path = os.environ.get(ENV)
    fd = None
    if path:
        try:
            fd = os.open(path, os.O_RDWR)
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        except OSError:  # the file is gone (kbench has ended): nothing to share
            if fd is not None:
                os.close(fd)
            fd = None
    try:
        yield
    finally:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
