"""A fork server for kbench's workers: one process imports torch and loads the suite's kernels once, and
each worker is forked from it, so a worker is ready in milliseconds instead of the seconds those imports
take. Every worker is still a process of its own, one per implementation (its own memory, killed with
everything it starts, a crash or a hang costing only its row): it just does not import again.

    kbench                                  fork server (python -m kbench.forkserver SPEC)
      ForkServer.fork(log) ── "fork" + 3 fds ──▶ os.fork() ─▶ worker: fd 0, 1, 2 = the 3 fds,
                           ◀─ {"forked": pid} ─              kbench.worker's protocol on them
      ForkedProcess.wait() ◀─ {"exited": pid, status} ─ (the server reaps its children)

The channel is a SOCK_SEQPACKET socket pair (one message a request, the worker's stdin, stdout and log
passed as file descriptors with it). The server ends when kbench's end of the channel closes, and its
workers follow it (kbench.worker.exit_with_parent).

The server never touches a GPU: the CUDA driver does not survive a fork once it is initialised, so a
child of a process that has made a CUDA context (or just loaded the driver) cannot use the GPU. For a
GPU run each worker makes its own context after the fork. The server checks, once the kernels are
loaded, that neither torch nor anything else has loaded the driver (:func:`gpu_untouched`); where
something has, it says so in its hello and forks nothing, and kbench starts each worker as a new
Python instead (kbench.worker_starter).
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

from kbench.isolation import OWN_PROCESS_GROUP

MESSAGE_BYTES = 4096


def available() -> bool:
    """Forking is what this needs (Linux: fork, SOCK_SEQPACKET and file descriptors over a socket)."""
    return sys.platform.startswith("linux") and hasattr(socket, "send_fds")


class ForkServer:
    """kbench's side of one fork server: started for a suite's kernels on a device, it forks workers."""

    def __init__(self, kernel_dirs, device: str, suite: str | None, log_path: str):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        spec = json.dumps({"kernel_dirs": [str(p) for p in kernel_dirs], "device": device, "suite": suite,
                           "fd": theirs.fileno()})
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "kbench.forkserver", spec],
                                            stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                            pass_fds=(theirs.fileno(),), **OWN_PROCESS_GROUP)
        theirs.close()
        self.sock = ours
        self.log_path = log_path
        self.exited: dict[int, int] = {}  # pid -> wait status, as the server reported them
        self.ready = False
        self.refuses = ""  # why the server forks no workers (its hello says)
        self.gone = False

    def _receive(self, timeout: float | None) -> dict | None:
        """The server's next message; None when none came in ``timeout`` seconds or the server is gone."""
        if self.gone:
            return None
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            return None
        data = self.sock.recv(MESSAGE_BYTES)
        if not data:
            self.gone = True
            return None
        message = json.loads(data)
        if message.get("type") == "exited":
            self.exited[message["pid"]] = message["status"]
        return message

    def _expect(self, kind: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            message = self._receive(max(0.0, left))
            if message is not None and message.get("type") == kind:
                return message
            if self.gone or (message is None and left <= 0):
                raise RuntimeError(f"the fork server sent no {kind!r} (its log: {self.log_path})")

    def wait_ready(self, timeout: float) -> None:
        """Wait for the server's hello; RuntimeError where it will not fork (its hello says why)."""
        if not self.ready:
            hello = self._expect("hello", timeout)
            self.refuses = hello.get("refuses", "")
            self.ready = True
        if self.refuses:
            raise RuntimeError(f"the fork server forks no workers: {self.refuses}")

    def fork(self, log_fd: int, timeout: float) -> ForkedProcess:
        """A new worker, its stderr the file ``log_fd``; a Popen-like handle on it."""
        self.wait_ready(timeout)
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        try:
            socket.send_fds(self.sock, [b"fork"], [stdin_r, stdout_w, log_fd])
        finally:
            os.close(stdin_r)
            os.close(stdout_w)
        pid = self._expect("forked", timeout)["pid"]
        return ForkedProcess(self, pid, os.fdopen(stdin_w, "wb"), os.fdopen(stdout_r, "rb"))

    def close(self) -> None:
        """End the server and reap it. It holds nothing to save, so it is killed rather than left to tear
        down torch (half a second); a worker still running ends with it (its parent watch)."""
        self.gone = True
        try:
            self.sock.close()
        except OSError:
            pass
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.process.kill()
        self.process.wait()


class ForkedProcess:
    """The part of subprocess.Popen's interface kbench.isolation.WorkerProcess uses, for a worker forked
    by the server: its pipes, pid, poll, wait and kill. The server, its parent, reaps it and says how it
    ended; where the server is gone, a worker that no longer exists counts as killed."""

    def __init__(self, server: ForkServer, pid: int, stdin, stdout):
        self.server, self.pid, self.stdin, self.stdout = server, pid, stdin, stdout
        self.returncode: int | None = None

    def _update(self, timeout: float | None) -> None:
        while self.returncode is None:
            status = self.server.exited.pop(self.pid, None)
            if status is not None:
                self.returncode = os.waitstatus_to_exitcode(status)
                return
            if self.server.gone:
                if not _running(self.pid):
                    self.returncode = -signal.SIGKILL
                return
            if self.server._receive(timeout) is None and not self.server.gone:
                return

    def poll(self) -> int | None:
        self._update(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._update(0.5 if left is None else min(left, 0.5))
            if self.returncode is not None:
                return self.returncode
            if self.server.gone:  # the worker was orphaned: it ends with its parent watch
                time.sleep(0.05)
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _running(pid: int) -> bool:
    """Whether the process exists and has not ended: an orphan that ended stays a zombie until whoever
    adopted it reaps it, which may be never in a container whose first process does not."""
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False
    except OSError:
        return True


# --- the server process ------------------------------------------------------------------------------


def _reap(send, children: threading.Event) -> None:
    """Report each worker's end (the server is their parent); wait for a first one when there is none."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:  # none yet, or all reaped: look again soon after the next fork
            children.clear()
            children.wait(0.05)
            continue
        send({"type": "exited", "pid": pid, "status": status})


def _become_worker(sock: socket.socket, fds: list[int], spec: dict, registry) -> None:
    """In the forked child: the three descriptors become stdin, stdout and stderr, then the worker's
    protocol runs on them. Never returns."""
    code = 1
    try:
        os.setpgid(0, 0)  # a group of its own: a kill takes what it starts (the server sets it too)
    except OSError:
        pass
    try:
        sock.close()
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
            os.close(fd)
        from kbench import worker

        worker.protocol_main(spec, registry=registry)
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:  # noqa: BLE001 - the worker's log says what happened
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


CUDA_ERROR_NOT_INITIALIZED = 3  # what the driver API answers before cuInit


def gpu_untouched(maps_path: str = "/proc/self/maps") -> str:
    """"" when this process has not initialised CUDA, else what shows it has: torch's CUDA state, or the
    driver (libcuda), mapped into the process by an import (CuPy's, Triton's), that says it has been
    initialised. A child forked after cuInit cannot use the GPU; one forked while the library is merely
    loaded can (it initialises the driver itself), which is what importing CuPy leaves."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "torch has initialised CUDA in the fork server"
    try:
        with open(maps_path, encoding="utf-8", errors="replace") as maps:
            driver = next((line.split()[-1] for line in maps if "libcuda.so" in line), None)
    except OSError:
        return f"cannot read {maps_path} to see whether the CUDA driver is loaded"
    if driver is None:
        return ""
    answer = driver_state(driver)
    if answer == CUDA_ERROR_NOT_INITIALIZED:
        return ""
    return (f"the CUDA driver ({driver}) is loaded in the fork server and "
            + ("initialised" if answer == 0 else f"cannot say it is not initialised ({answer})"))


def driver_state(path: str):
    """What the loaded driver library at ``path`` answers to cuDeviceGetCount: CUDA_ERROR_NOT_INITIALIZED
    before cuInit, 0 after it (a query that initialises nothing); a string where it cannot be asked."""
    import ctypes

    try:
        driver = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)  # only the copy already mapped
        count = ctypes.c_int(0)
        return int(driver.cuDeviceGetCount(ctypes.byref(count)))
    except (OSError, AttributeError) as exc:
        return f"cannot ask it: {exc}"


def main() -> None:
    spec = json.loads(sys.argv[1])
    sock = socket.socket(fileno=spec.pop("fd"))
    cpu = spec.get("device") == "cpu"
    if cpu:
        # Before any kernel module imports triton: its kernels then run through the interpreter.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch  # noqa: F401 - the import each forked worker would otherwise pay again

    from kbench import loader

    registry = loader.load(spec.get("kernel_dirs", []), suite=spec.get("suite"))
    # A worker of a GPU run makes its CUDA context after the fork: nothing here may have begun one.
    refuses = "" if cpu else gpu_untouched()
    # What is loaded now lives as long as every worker: out of the collector's sight (its pages stay shared
    # with the workers, and a worker's gc.collect() after each job, about 0.1 s over torch's and
    # Triton's objects, scans only what the worker made itself).
    gc.freeze()
    lock = threading.Lock()

    def send(message: dict) -> None:
        with lock:
            sock.send(json.dumps(message).encode())

    children = threading.Event()
    threading.Thread(target=_reap, args=(send, children), name="kbench-reaper", daemon=True).start()
    send({"type": "hello", "refuses": refuses})
    if refuses:
        print(f"kbench fork server: {refuses}; the workers start as new Pythons", file=sys.stderr, flush=True)
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, MESSAGE_BYTES, 3)
        except OSError:
            break
        if not data:
            break  # kbench is gone: so is the server (and, through their parent watch, its workers)
        if len(fds) != 3 or refuses:  # not a fork request, or one this server must not grant
            for fd in fds:
                os.close(fd)
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _become_worker(sock, fds, spec, registry)
        for fd in fds:
            os.close(fd)
        try:
            os.setpgid(pid, pid)  # set from both sides: a kill never finds the child in the server's group
        except OSError:
            pass
        children.set()
        send({"type": "forked", "pid": pid})
    gc.unfreeze()  # the server's own exit collects as usual


if __name__ == "__main__":
    main()
