"""One worker process per implementation, with a timeout per job (started as a new Python, or forked
from a fork server that has imported torch and the kernels already: kbench.forkserver).

A crash (segfault, abort, illegal memory access) or a hang costs only the job
that was running: its row becomes CRASH or TIMEOUT with the reason, and the
next job gets a fresh worker.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time

# Popen arguments that start a child in a process group of its own (Python 3.11's process_group=0;
# setpgid through preexec_fn before that).
OWN_PROCESS_GROUP = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}

STARTUP_TIMEOUT = 300.0  # seconds to import torch, create the CUDA context, load kernels


class WorkerGone(Exception):
    """The worker died or hung; ``status`` is CRASH or TIMEOUT and ``reason`` says why."""

    def __init__(self, status: str, reason: str, log: str | None = None):
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.log = log  # the worker's stderr, kept for the user to read


def read_line(pipe, buffer: bytes, deadline: float) -> tuple[bytes | None, bytes, str]:
    """The next line a child wrote to ``pipe`` (``buffer``: bytes read earlier and not yet used), as
    (line, the bytes after it, ""), or (None, buffer, "timeout" | "eof") when the deadline (a
    time.monotonic() value) passed or the child closed the pipe first."""
    while b"\n" not in buffer:
        left = deadline - time.monotonic()
        if left <= 0:
            return None, buffer, "timeout"
        ready, _, _ = select.select([pipe], [], [], left)
        if not ready:
            continue
        chunk = os.read(pipe.fileno(), 1 << 16)
        if not chunk:
            return None, buffer, "eof"
        buffer += chunk
    line, buffer = buffer.split(b"\n", 1)
    return line, buffer, ""


def tail_lines(path: str, nbytes: int = 16384) -> list[str]:
    """The non-empty lines of a log's last ``nbytes`` ([] where it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.path.getsize(path) - nbytes))
            return [ln.strip() for ln in fh.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return []


# A compiler's own diagnostic line, as MLIR, LLVM, ptxas and nvcc print them ("file:1:2: error: ...",
# "ptxas error   : ..."), not a Python exception's last line ("RuntimeError: ...").
COMPILER_ERROR = re.compile(r"(^|[\s:])error\s*:", re.IGNORECASE)
PYTHON_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception)\b.*:")


def compiler_errors(path: str, start: int, most: int = 2, width: int = 300) -> str:
    """The first ``most`` diagnostic lines written to a log after byte ``start`` (one job's share of a
    worker's log), joined and shortened: what a kernel's "PassManager::run failed" leaves unsaid."""
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            text = fh.read(1 << 20).decode(errors="replace")
    except OSError:
        return ""
    found = [line.strip() for line in text.splitlines()
             if COMPILER_ERROR.search(line) and not PYTHON_EXCEPTION.match(line.strip())]
    return " | ".join(line[:width] for line in found[:most])


def describe_death(lines: list[str]) -> str:
    fatal = next((i for i, line in enumerate(lines) if line.startswith("Fatal Python error")), None)
    if fatal is None:
        noise = ("Extension modules:", "(total:")
        useful = [line for line in lines if not line.startswith(noise)]
        return useful[-1] if useful else ""
    # faulthandler lists the most recent call first under the thread header.
    frame = next((line for line in lines[fatal + 1:] if line.startswith("File ")), "")
    return f"{lines[fatal]} ({frame})" if frame else lines[fatal]


class WorkerProcess:
    """kbench's side of one worker (kbench.worker runs in it): started with the kernel folders and
    device, it takes jobs one JSON line at a time and answers with records, and is killed with
    everything it started when it hangs or dies."""

    def __init__(self, kernel_dirs=(), device: str = "auto", env: dict | None = None, suite: str | None = None,
                 wait: bool = True, server=None):
        """Start the worker; with ``wait`` also wait until it is ready (:meth:`wait_ready`). ``suite``: the
        one suite its jobs are of (it loads only that suite's built-in kernels). ``server``: a
        kbench.forkserver.ForkServer of the same kernels and device to fork it from, instead of starting
        a new Python."""
        spec = json.dumps({"kernel_dirs": [str(p) for p in kernel_dirs], "device": device, "suite": suite})
        self.log = tempfile.NamedTemporaryFile(prefix="kbench-worker-", suffix=".log", delete=False)
        self.forked = server is not None
        if server is not None:
            self.process = server.fork(self.log.fileno(), STARTUP_TIMEOUT)
        else:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "kbench.worker", spec],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.log,
                env=env if env is not None else os.environ.copy(),
                **OWN_PROCESS_GROUP,  # a kill takes its children too, and a terminal's Ctrl-C reaches kbench alone
            )
        self._buffer = b""
        self.keep_log = False
        self._log_start = 0  # the log's size when the job in flight was sent
        self.busy = False  # a job is in flight: closing must not wait for it
        self.ready = False
        self.device: str | None = None
        self.env: dict | None = None
        self.startup_s: float | None = None
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Wait for the worker's hello: its imports done, its CUDA context made, its kernels loaded (or
        WorkerGone where it died or hung on the way)."""
        if not self.ready:
            hello = self._read(STARTUP_TIMEOUT, what="start")
            self.device, self.env, self.ready = hello["device"], hello["env"], True
            self.startup_s = hello.get("startup_s")  # its own time from process start to ready

    def run(self, job: dict, timeout: float) -> dict:
        """Send one job and wait for its record; raises WorkerGone after a crash or timeout."""
        self.send(job)
        return self.receive(timeout)

    def send(self, message: dict) -> None:
        """Send a job (or a step of one) without waiting for the answer (:meth:`receive`)."""
        try:
            self._log_start = os.path.getsize(self.log.name)  # where this job's share of the log begins
        except OSError:
            self._log_start = 0
        try:
            self.process.stdin.write((json.dumps(message) + "\n").encode())
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._gone("CRASH", "worker exited before the job started") from None
        self.busy = True

    def receive(self, timeout: float) -> dict:
        """The answer to what was sent, within ``timeout`` seconds from now; raises WorkerGone after a
        crash or timeout."""
        record = self._read(timeout, what="job")
        self.busy = False
        if record.get("status") == "CRASH":
            self.keep_log = True  # the worker's log holds the full traceback
            record["log"] = self.log.name
            said = compiler_errors(self.log.name, self._log_start)
            if said and str(record.get("reason", "")).startswith("raised "):
                record["reason"] = f"{record['reason']} (the log: {said})"
        if record.get("fatal"):
            self.close()
        return record

    def _read(self, timeout: float, what: str) -> dict:
        line, self._buffer, why = read_line(self.process.stdout, self._buffer, time.monotonic() + timeout)
        if why == "timeout":
            self.kill()
            self.keep_log = True
            raise WorkerGone("TIMEOUT", f"no answer within {timeout:g} s ({what}); worker killed", self.log.name)
        if why == "eof":
            raise self._gone("CRASH", None)
        return json.loads(line)

    def _gone(self, status: str, reason: str | None) -> WorkerGone:
        code = self.process.wait()
        if reason is None:
            if code < 0:
                reason = f"worker killed by {signal.Signals(-code).name}"
            else:
                reason = f"worker exited with code {code}"
        tail = self.log_tail()
        if tail:
            reason += f": {tail}"
        self.keep_log = True
        return WorkerGone(status, reason, self.log.name)

    def log_tail(self) -> str:
        """What the worker's log says about its death: faulthandler's "Fatal Python error"
        and the innermost frame, else the last line."""
        return describe_death(tail_lines(self.log.name))

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.alive:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.process.kill()
        self.process.wait()

    def release(self) -> None:
        """Let an idle worker end on its own (its stdin closed) without waiting for it; :meth:`close`
        it later to reap it (or kill it, if it is still there)."""
        if self.alive and not self.busy:
            try:
                self.process.stdin.close()
            except OSError:
                pass

    def close(self) -> None:
        """End the worker: an idle one exits when its stdin closes; a busy (hung) one is killed at once."""
        try:
            if self.alive and not self.busy:
                if not self.process.stdin.closed:
                    self.process.stdin.close()
                self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:  # also on a second Ctrl-C: never leave a worker behind
            self.kill()
        if not self.keep_log:
            try:
                os.unlink(self.log.name)
            except OSError:
                pass
