"""The ranks of the allreduce suite: collectives over several processes, one per GPU, started by kbench itself.

How the ranks fit kbench's worker model
---------------------------------------
kbench runs each implementation in its own worker process and times a zero-argument closure there
(:mod:`kbench.worker`). For a collective that worker is **rank 0**. The first time an
implementation's ``make()`` asks for N ranks, :func:`rank_group` starts ranks 1..N-1 as child processes
(this file, run as a script) with a torchrun-style environment: MASTER_ADDR, MASTER_PORT,
RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE. Rank 0 holds the rendezvous store (a
``TCPStore`` listening on a port the OS picks: no race for a "free port"), and every rank joins the
default process group, NCCL on GPUs and gloo on the CPU, with a timeout. The ranks' environment keeps
NVLink multicast off (NCCL_NVLS_ENABLE=0); an implementation may add NCCL settings (``nccl-ring``:
NCCL_ALGO=Ring) or unset them (``nccl``: NCCL's own choice).

The other ranks (the *followers*) obey rank 0: one JSON command a line on their stdin, one JSON reply
a line on their stdout (their own prints go to their log): set up the buffers and the op, run the op
once (no reply: the closure must not wait for a round trip), run it once and check the result
against the exact sum, run the op alone k times, synchronise, stop. The op is built on every rank by
the same function of the kernel file (``build(x, out, **params)``; the followers load the file by
path), so all ranks run the same code.

Inputs and correctness
----------------------
Rank r's input is a deterministic function of (seed, r) (:func:`fill_rank_values`): small integers,
so the sum is exact in any order and any float type, and correctness is exact (tolerance 0). Rank 0's
input is the suite's input tensor; the suite's inputs also hold the seed (a one-element CPU tensor),
from which the float64 reference regenerates the other ranks' inputs. When kbench refills the inputs
(its check after timing), the closure sees the new seed and has the followers refill theirs. Every
call that follows a new seed is a checked call: each follower poisons its output, runs the op, and
compares its own result with the exact sum, so every rank's answer is checked, not only rank 0's (a
wrong answer on another rank raises :class:`RankFailure`, "wrong result on rank 1: ...": the row is a
CRASH with that reason, as kbench itself compares rank 0's output only).

Timing
------
kbench's CUDA events on rank 0 time the closure: it sends "run" to the followers (a pipe write, no
reply), then runs rank 0's op; the op's work is ordered on rank 0's current stream (NCCL's stream is
joined back), so the events cover it, and the collective cannot finish before every rank took part.
An op's ``alone`` variant (NCCL: the in-place all_reduce without the copy of the input into the
output that torch's in-place API makes the closure do) is also timed after kbench's samples,
nccl-tests' way: k calls back to back between two events (:meth:`RankGroup.time_alone`).
A follower reacts to "run" within tens of microseconds (a pipe and a Python loop). kbench queues its
samples in batches, so at large sizes that delay hides behind the previous call on the GPU; at small
sizes (a call of tens of microseconds) it may show in kbench's samples, and the op-alone figure
(back to back, as nccl-tests) is the one to compare with nccl-tests' numbers.

Failure, start-up and shutdown
------------------------------
- A follower that exits (crash, kill) is named: "rank 2 (pid 123) exited with code -9 (SIGKILL): <the
  last line of its log>". Rank 0 checks the followers on every call, and waits for every reply with a
  deadline; a gloo collective whose peer died fails at once (the connection closes). The group then
  kills the other followers and ends the process group; with gloo the closure raises (the row is a
  CRASH with that reason, the worker goes on); with NCCL, whose communicator cannot outlive a dead
  peer (rank 0's kernel would spin until the timeout), rank 0 writes the reason to its log and exits
  (kbench reports the worker's death with that line and starts a fresh worker). A watcher thread does
  the same when rank 0 itself is blocked (a synchronise) and a follower died.
- Followers end when rank 0 ends or dies: EOF on their stdin, a parent watch (1 s), and they live in
  rank 0's process group, which kbench kills on a timeout. The process group has a timeout
  (``KBENCH_DIST_TIMEOUT``, default 120 s); start-up, replies and joins have deadlines.
- :meth:`RankGroup.close` (a new group, the end of the worker via atexit) sends "stop", joins each
  follower for up to 10 s, kills what is left, destroys the process group and closes the store: a
  second run leaks no process and no port.

torch is imported inside functions only.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import kbench
from kbench.loader import load_helper

_COMMON = Path(__file__).resolve().parent.parent / "_common"
_bandwidth = load_helper(_COMMON / "bandwidth.py")
algbw_gbps, bus_factor, busbw_gbps, gbps_text = (_bandwidth.algbw_gbps, _bandwidth.bus_factor, _bandwidth.busbw_gbps,
                                                 _bandwidth.gbps_text)
_exact_sums = load_helper(_COMMON / "exact_sums.py")
fill_rank_values, mismatch = _exact_sums.fill_rank_values, _exact_sums.mismatch

# --- the follower (ranks 1..N-1) --------------------------------------------------------------

BACKEND_ENV = "KBENCH_DIST_BACKEND"
TIMEOUT_ENV = "KBENCH_DIST_TIMEOUT"
DEFAULT_TIMEOUT = 120.0  # seconds: the process group's timeout (a collective that waits longer fails)
STARTUP_TIMEOUT = 300.0  # seconds for a follower to import torch
REPLY_TIMEOUT = 600.0  # seconds for a reply (set-up or a check of a large buffer)
JOIN_TIMEOUT = 10.0  # seconds a stopping follower gets before it is killed
GRACE = 10.0  # seconds rank 0 gets to notice a dead follower itself before the watcher ends it
NVLS_OFF = {"NCCL_NVLS_ENABLE": "0"}  # NVLink multicast stays off: a program using it can take a shared host's GPUs out of service


def timeout_seconds() -> float:
    try:
        return float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT))
    except ValueError:
        return DEFAULT_TIMEOUT


def load_builder(path: str, name: str):
    """The op builder ``name`` of the kernel file ``path`` (its registrations go to a throwaway registry)."""
    from kbench.registry import Registry, collecting

    with collecting(Registry(), path):
        module = load_helper(Path(path))
    return getattr(module, name)


def builder_ref(build) -> list[str]:
    """What a follower needs to find ``build``: its file and name (a module-level function)."""
    import inspect

    path = inspect.getsourcefile(build) or build.__code__.co_filename
    if build.__qualname__ != build.__name__:
        raise ValueError(f"{build.__qualname__}: an op builder must be a module-level function")
    return [str(Path(path).resolve()), build.__name__]


def synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Follower:
    """A follower's state and its commands."""

    def __init__(self, rank: int, world_size: int, device):
        self.rank, self.world_size, self.device = rank, world_size, device
        self.x = self.out = self.op = None
        self.seed = None
        self.dtype = "fp32"

    def handle(self, command: dict) -> dict | None:
        import torch

        op = command["op"]
        if op == "run":
            self.op()
            return None
        if op == "alone":
            alone = getattr(self.op, "alone", self.op)
            for _ in range(int(command["times"])):
                alone()
            return None
        if op == "sync":
            synchronize(self.device)
            return {"ok": True}
        if op == "check":
            if command["seed"] != self.seed:
                fill_rank_values(self.x, command["seed"], self.rank, self.world_size, self.dtype)
                self.seed = command["seed"]
            self.out.fill_(float("nan"))
            self.op()
            synchronize(self.device)
            reason = mismatch(self.out, self.seed, self.world_size, self.dtype)
            return {"ok": not reason, "reason": f"rank {self.rank}: {reason}" if reason else ""}
        if op == "setup":
            from kbench.dtypes import torch_dtype

            self.x = self.out = self.op = None  # free the previous buffers first
            self.dtype = command["dtype"]
            self.x = torch.empty(command["count"], dtype=torch_dtype(self.dtype), device=self.device)
            self.out = torch.empty_like(self.x)
            self.seed = command["seed"]
            fill_rank_values(self.x, self.seed, self.rank, self.world_size, self.dtype)
            self.op = load_builder(*command["builder"])(self.x, self.out, **command.get("params", {}))
            synchronize(self.device)
            return {"ok": True}
        raise ValueError(f"unknown command {op!r}")


def follower_main() -> None:
    """Ranks 1..N-1: join the process group, then obey rank 0's commands until "stop" or EOF."""
    import datetime as dt
    import faulthandler

    from kbench.worker import exit_with_parent

    faulthandler.enable()  # a segfault leaves a Python stack in the log
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # NCCL_DEBUG and the op's prints go to the log, never into the protocol
    exit_with_parent()

    def send(message: dict) -> None:
        protocol.write(json.dumps(message) + "\n")
        protocol.flush()

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    backend = os.environ[BACKEND_ENV]
    timeout = dt.timedelta(seconds=timeout_seconds())
    import torch
    import torch.distributed as dist

    send({"started": rank, "pid": os.getpid()})
    device = torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, False,
                          timeout=timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    follower = Follower(rank, world, device)
    for line in sys.stdin:
        if not line.strip():
            continue
        command = json.loads(line)
        if command["op"] == "stop":
            break
        reply = follower.handle(command)
        if reply is not None:
            send(reply)
    follower = None
    dist.destroy_process_group()


# --- rank 0 -----------------------------------------------------------------------------------

class RankFailure(RuntimeError):
    """A follower died or failed: the message names the rank, its exit and its log's last line."""


def _exit_description(code: int) -> str:
    if code < 0:
        try:
            return f"exited with code {code} ({signal.Signals(-code).name})"
        except ValueError:
            pass
    return f"exited with code {code}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


class _Rank:
    """Rank 0's handle on one follower process: its pipes, its log, its exit."""

    def __init__(self, rank: int, env: dict):
        self.rank = rank
        self.log = tempfile.NamedTemporaryFile(prefix=f"kbench-rank{rank}-", suffix=".log", delete=False)
        # Same process group as rank 0 (no process group of their own): kbench's kill of a hung worker takes the ranks too.
        self.process = subprocess.Popen([sys.executable, str(Path(__file__).resolve())], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self.log, env=env)
        self.log.close()  # the follower writes it; rank 0 reads it back by name
        self.pid = self.process.pid
        self._buffer = b""

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def send(self, line: bytes) -> bool:
        """Write one command; False if the follower is gone (a broken pipe)."""
        try:
            self.process.stdin.write(line)
            self.process.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def read(self, deadline: float) -> dict | None:
        """The next reply, or None when the follower exited (EOF) or the deadline passed."""
        from kbench.isolation import read_line

        line, self._buffer, _ = read_line(self.process.stdout, self._buffer, deadline)
        return None if line is None else json.loads(line)

    def log_tail(self) -> str:
        from kbench.isolation import describe_death, tail_lines

        lines = tail_lines(self.log.name)
        noise = ("[W", "[I")  # c10d's own warnings and notes
        useful = [ln for ln in lines if not ln.startswith(noise)] or lines
        return describe_death(useful)

    def describe(self) -> str:
        code = self.process.poll()
        state = "is still running" if code is None else _exit_description(code)
        tail = self.log_tail() if code is not None else ""
        return f"rank {self.rank} (pid {self.pid}) {state}" + (f": {tail}" if tail else "") + \
               f" (log: {self.log.name})"

    def kill(self) -> None:
        if self.alive:
            try:
                self.process.kill()
            except ProcessLookupError:
                pass
        try:
            self.process.wait(timeout=JOIN_TIMEOUT)
        except subprocess.TimeoutExpired:
            pass

    def close_pipes(self) -> None:
        for pipe in (self.process.stdin, self.process.stdout):
            try:
                pipe.close()
            except OSError:
                pass


def _line(command: dict) -> bytes:
    return (json.dumps(command) + "\n").encode()


RUN = _line({"op": "run"})


class RankGroup:
    """Rank 0 and its followers, in one process group: started once per worker and reused by every
    make() that asks for the same world size, backend and environment."""

    def __init__(self, world_size: int, backend: str, env: dict | None = None):
        import datetime as dt

        import torch
        import torch.distributed as dist

        if world_size < 2:
            raise ValueError(f"a rank group needs at least 2 ranks (got {world_size})")
        if dist.is_initialized():
            raise RuntimeError("torch.distributed is already initialised in this process (not by kbench)")
        self.world_size, self.backend = world_size, backend
        self.env = {**NVLS_OFF, **(env or {})}
        self.timeout = timeout_seconds()
        self.closed = False
        self.joined = False  # rank 0 is in the process group (an NCCL failure after this ends rank 0)
        self.failed = ""
        self.followers: list[_Rank] = []
        self._saved = {name: os.environ.get(name) for name in self.env}
        for name, value in self.env.items():  # NCCL reads these when rank 0's communicator is made
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = str(value)
        self.device = torch.device("cpu")
        if backend == "nccl":
            self.device = torch.device("cuda", torch.cuda.current_device())
            torch.cuda.set_device(self.device)
        td = dt.timedelta(seconds=self.timeout)
        self.store = dist.TCPStore("127.0.0.1", 0, world_size, True, timeout=td, wait_for_workers=False)
        self.port = self.store.port
        try:
            package_parent = str(Path(kbench.__file__).resolve().parent.parent)  # kbench importable in the ranks
            base = {name: value for name, value in os.environ.items()}
            base["PYTHONPATH"] = os.pathsep.join(filter(None, [package_parent, base.get("PYTHONPATH")]))
            base.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(self.port), "WORLD_SIZE": str(world_size),
                         "LOCAL_WORLD_SIZE": str(world_size), BACKEND_ENV: backend, TIMEOUT_ENV: str(self.timeout)})
            for rank in range(1, world_size):
                env_r = dict(base, RANK=str(rank), LOCAL_RANK=str(rank))
                self.followers.append(_Rank(rank, env_r))
            deadline = time.monotonic() + STARTUP_TIMEOUT
            for follower in self.followers:
                hello = follower.read(deadline)
                if not hello or "started" not in hello:
                    self._fail("while starting" if hello is None and not follower.alive else
                               f"did not start within {STARTUP_TIMEOUT:g} s", who=follower)
            dist.init_process_group(backend, store=self.store, rank=0, world_size=world_size, timeout=td)
            self.joined = True
        except BaseException as exc:
            if not self.closed:
                self.close(kill=True)
            if isinstance(exc, RankFailure):
                raise
            dead = [f.describe() for f in self.followers if not f.alive]
            if dead and not isinstance(exc, KeyboardInterrupt):
                raise RankFailure(f"rank group: {'; '.join(dead)} (while joining the process group); "
                                  f"rank 0: {_first_line(exc)}") from exc
            raise
        self._watcher = None
        if backend == "nccl":
            self._watcher = threading.Thread(target=self._watch, name="kbench-ranks-watch", daemon=True)
            self._watcher.start()

    # --- commands ---------------------------------------------------------------------------

    def setup(self, build, count: int, dtype: str, seed: int, params: dict) -> None:
        """Every follower allocates its input and output, fills its input for ``seed`` and builds the op."""
        self.request({"op": "setup", "builder": builder_ref(build), "count": count, "dtype": dtype, "seed": seed,
                      "params": params}, "while setting up")

    def run(self, op) -> None:
        """The timed path: "run" to every follower (no reply), then rank 0's op."""
        self._send_all(RUN, "before a run")
        for follower in self.followers:
            if follower.process.poll() is not None:
                self._fail("before a run", who=follower)
        try:
            op()
        except Exception as exc:
            self._fail("during a run", cause=exc)

    def checked_run(self, op, seed: int) -> None:
        """Every follower (refills its input for ``seed`` if it changed,) poisons its output, runs the op and
        compares its result with the exact sum; rank 0 runs the op too. A follower's wrong result raises."""
        line = _line({"op": "check", "seed": seed})
        self._send_all(line, "before a checked run")
        try:
            op()
        except Exception as exc:
            self._fail("during a checked run", cause=exc)
        wrong = [reply["reason"] for reply in self._replies("during a checked run") if not reply.get("ok")]
        if wrong:
            raise RankFailure(f"wrong result on {'; '.join(wrong)}")

    def time_alone(self, op, times: int) -> float:
        """Milliseconds a call of the op alone (``op.alone``, else the op) takes, nccl-tests' way: ``times``
        calls back to back on every rank, one pair of events (rank 0's stream) around them."""
        import torch

        alone = getattr(op, "alone", op)
        line = _line({"op": "alone", "times": times})
        self.request({"op": "sync"}, "before timing the op alone")
        synchronize(self.device)
        self._send_all(line, "while timing the op alone")
        try:
            if self.device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(times):
                    alone()
                end.record()
                end.synchronize()
                ms = start.elapsed_time(end) / times
            else:
                t0 = time.perf_counter()
                for _ in range(times):
                    alone()
                ms = (time.perf_counter() - t0) * 1e3 / times
        except Exception as exc:
            self._fail("while timing the op alone", cause=exc)
        self.request({"op": "sync"}, "after timing the op alone")
        return ms

    def request(self, command: dict, during: str) -> list[dict]:
        """Send a command that every follower answers; their replies, in rank order."""
        self._send_all(_line(command), during)
        return self._replies(during)

    def _send_all(self, line: bytes, during: str) -> None:
        """Write ``line`` to every follower, in rank order; a follower that is gone fails the group."""
        for follower in self.followers:
            if not follower.send(line):
                self._fail(during, who=follower)

    def _replies(self, during: str) -> list[dict]:
        deadline = time.monotonic() + REPLY_TIMEOUT
        replies = []
        for follower in self.followers:
            reply = follower.read(deadline)
            if reply is None:
                self._fail(during if not follower.alive else f"{during}: no reply within {REPLY_TIMEOUT:g} s",
                           who=follower)
            replies.append(reply)
        return replies

    # --- failure and shutdown -----------------------------------------------------------------

    def _fail(self, during: str, cause: BaseException | None = None, who: _Rank | None = None):
        """Name the dead (or silent) follower, end the group, and raise (gloo) or exit (NCCL)."""
        wait_until = time.monotonic() + 3.0  # a peer's death closes rank 0's connections before it is reaped
        while True:
            dead = [f for f in self.followers if not f.alive]
            if dead or time.monotonic() > wait_until:
                break
            time.sleep(0.05)
        named = dead or ([who] if who is not None else [])
        if not named and cause is not None:  # rank 0's own error, every follower alive: it is the news
            self.close(kill=True)
            raise cause
        message = f"rank group: {'; '.join(f.describe() for f in named)} ({during})"
        running = [f"rank {f.rank}" for f in self.followers if f.alive and f not in named]
        if running:
            message += f"; still running: {', '.join(running)}"
        if cause is not None:
            message += f"; rank 0: {_first_line(cause)}"
        self.failed = message
        joined = self.joined
        self.close(kill=True)
        if self.backend == "nccl" and joined:
            _die(message)
        raise RankFailure(message) from cause

    def _watch(self) -> None:
        """NCCL only: if a follower dies while rank 0 is blocked (a synchronise on a collective that will never
        finish), rank 0 would wait for the process group's timeout. Give the main thread GRACE seconds to
        notice; then name the rank and end rank 0 (kbench reports that line and starts a fresh worker)."""
        while not self.closed:
            time.sleep(0.5)
            dead = [f for f in self.followers if not f.alive]
            if not dead or self.closed:
                continue
            deadline = time.monotonic() + GRACE
            while time.monotonic() < deadline and not self.closed:
                time.sleep(0.2)
            if not self.closed:
                message = (f"rank group: {'; '.join(f.describe() for f in dead)} while rank 0 waited on "
                           "a collective")
                for follower in self.followers:
                    follower.kill()
                _die(message)

    def close(self, kill: bool = False) -> None:
        """Stop every follower (killed after JOIN_TIMEOUT, or at once with ``kill``), end the process group,
        close the store's port and restore the environment. Idempotent."""
        if self.closed:
            return
        self.closed = True
        if not kill:
            for follower in self.followers:
                follower.send(_line({"op": "stop"}))
        deadline = time.monotonic() + (0 if kill else JOIN_TIMEOUT)
        for follower in self.followers:
            try:
                follower.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            follower.kill()
            follower.close_pipes()
        try:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception as exc:  # noqa: BLE001 - ending a broken group must not hide why it broke
            print(f"rank group: destroying the process group: {_first_line(exc)}", file=sys.stderr)
        self.store = None
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        for follower in self.followers:
            if not self.failed:
                try:
                    os.unlink(follower.log.name)
                except OSError:
                    pass


def _die(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
    os._exit(70)


_current: RankGroup | None = None


def rank_group(world_size: int, backend: str, env: dict | None = None) -> RankGroup:
    """The process's rank group for this world size, backend and environment: the current one if it matches
    (and is healthy), else a new one (the old one is closed first)."""
    global _current
    wanted = {**NVLS_OFF, **(env or {})}
    if _current is not None and (
        _current.closed
        or (_current.world_size, _current.backend, _current.env) != (world_size, backend, wanted)
    ):
        _current.close()
        _current = None
    if _current is None:
        _current = RankGroup(world_size, backend, env)
    return _current


def close_rank_group() -> None:
    global _current
    if _current is not None:
        _current.close()
        _current = None


atexit.register(close_rank_group)


def collective(case, inputs, out, build, *, env: dict | None = None, params: dict | None = None):
    """Rank 0's closure for a collective implementation: ``build(x, out, **params)`` makes the op on every
    rank (it writes the sum over the ranks' ``x`` into ``out``; an optional ``op.alone`` is the collective
    without any copy, timed nccl-tests' way for the figures).

    ``env``: NCCL settings of this implementation's ranks (a value None unsets it)."""
    import torch

    from kbench.registry import Unsupported

    params = dict(params or {})
    x, seed_tensor = inputs["x"], inputs["seed"]
    world = case.gpus
    on_cuda = x.device.type == "cuda"
    if on_cuda:
        found = torch.cuda.device_count()
        if found < world:
            raise Unsupported(f"needs {world} GPUs, found {found}")
    backend = "nccl" if on_cuda else "gloo"
    ranks = rank_group(world, backend, env)
    seed = int(seed_tensor)
    op = build(x, out, **params)  # rank 0's first: a case the op refuses (Unsupported) is refused here
    ranks.setup(build, x.numel(), case.dtype, seed, params)
    state = {"seed": None}  # the seed of the last checked call: None, so the first call is checked
    nbytes = x.numel() * x.element_size()

    def run():
        if on_cuda and torch.cuda.is_current_stream_capturing():
            raise Unsupported("a multi-process collective cannot be captured in a CUDA graph (--cuda-graph)")
        now = int(seed_tensor)
        if now != state["seed"]:  # a correctness call (the first, or a new seed): every rank is checked
            ranks.checked_run(op, now)
            state["seed"] = now
        else:
            ranks.run(op)

    def figures(timing: dict) -> dict:
        median = timing["stats"]["median"]
        per_call = median / 1e3
        times = int(min(200, max(5, 0.2 / max(per_call, 1e-6))))
        alone_ms = ranks.time_alone(op, times)
        what = getattr(op, "alone_description", "the op")
        found = {
            "world_size": world,
            "bytes": nbytes,
            "bus_factor": bus_factor(world),
            "algbw_gbps": algbw_gbps(nbytes, median),
            "busbw_gbps": busbw_gbps(nbytes, median, world),
            "alone_ms": alone_ms,
            "alone_calls": times,
            "alone_algbw_gbps": algbw_gbps(nbytes, alone_ms),
            "alone_busbw_gbps": busbw_gbps(nbytes, alone_ms, world),
            "alone": what,
        }
        found["summary"] = [
            f"busbw {gbps_text(found['alone_busbw_gbps'])}, algbw {gbps_text(found['alone_algbw_gbps'])}: {what}, "
            f"{times} calls back to back (nccl-tests' method), {world} ranks",
            f"busbw {gbps_text(found['busbw_gbps'])}, algbw {gbps_text(found['algbw_gbps'])}: kbench's median of "
            f"the closure ({getattr(op, 'description', 'the op')})",
        ]
        return found

    run.config = {
        "world_size": world,
        "backend": backend,
        "ranks": "rank 0 in kbench's worker, ranks 1..N-1 started by the allreduce suite's rank group",
        **{name: ("unset" if value is None else value) for name, value in ranks.env.items()},
        **dict(getattr(op, "config", {})),
    }
    if on_cuda:
        try:
            version = torch.cuda.nccl.version()
            run.config["nccl_version"] = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
        except Exception:  # noqa: BLE001 - a torch without NCCL's version
            pass
    run.figures = figures
    return run


def _follow() -> None:
    """A follower's process: its error (the traceback's last line is what rank 0 quotes) ends it at once,
    without the interpreter's teardown (gloo's threads can abort it there, hiding the error)."""
    import traceback

    try:
        follower_main()
    except BaseException:  # noqa: BLE001 - whatever ends a follower is printed, then it exits
        traceback.print_exc()
        code = 1
    else:
        code = 0
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _follow()
