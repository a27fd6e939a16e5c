"""What every profiler shares: where its files go, how the profiled worker runs, how it fails.

The profiled process is kbench's own worker in batch mode (``python -m kbench.worker SPEC``,
SPEC with ``jobs`` and an ``answers`` file: see :mod:`kbench.worker`), started with an argument
list (never through a shell) in its own process group, so a timeout kills the profiler and the worker
together. Output goes to ``results/profiles/NAME-LABEL.*``; NAME is a plain name and LABEL is
made file-safe, so nothing can be written outside ``results/profiles/``.

Exit codes of ``kbench profile`` (the CLI turns a :class:`ProfileError` into one line):

- 0: every implementation was profiled (or skipped, with the reason);
- 1: an implementation failed its correctness check or crashed, or the profiler failed;
- 2: a usage error: a bad option, a name that would leave ``results/``, ``ncu``/``nsys`` not found;
- 3: profiling not permitted (``ERR_NVGPUCTRPERM``: GPU performance counters are admin-only);
- 4: the capture holds no kernels;
- 5: the profiler did not finish within ``--timeout`` (it and the worker were killed);
- 130: interrupted.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from kbench.errors import UserError
from kbench.isolation import OWN_PROCESS_GROUP
from kbench.record import Record

PROFILES_DIR = Path("results") / "profiles"
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")

PERMISSION_URL = "https://developer.nvidia.com/ERR_NVGPUCTRPERM"


class ProfileError(UserError):
    """A profiling failure: one line on stderr, and its own exit code (see the module doc)."""

    exit_code = 1


class ToolMissing(ProfileError):
    exit_code = 2


class UnsafeName(ProfileError):
    exit_code = 2


class NotPermitted(ProfileError):
    exit_code = 3


class NoKernels(ProfileError):
    exit_code = 4


class ProfilerTimeout(ProfileError):
    exit_code = 5


# --- names and paths ------------------------------------------------------------------

def profile_name(name: str | None, suite: str) -> str:
    """The run's name: ``--name`` checked to be a plain file name, else SUITE-YYYYmmdd-HHMMSS."""
    if name is None:
        return f"{suite}-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    if not _NAME.fullmatch(name) or name in (".", ".."):
        raise UnsafeName(f"--name: {name!r} is not a plain name (use letters, digits, '.', '_' and '-'; "
                         f"profiles are written to {PROFILES_DIR}/NAME-IMPL.*)")
    return name


def safe_label(label: str) -> str:
    """An implementation label as a file-name part: cupy-fa2[block_m=64] -> cupy-fa2_block_m_64."""
    text = re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("._")
    return text or "impl"


def inside(path: Path, folder: Path) -> bool:
    """Is ``path`` (resolved, symlinks followed) inside ``folder``?"""
    try:
        Path(path).resolve().relative_to(Path(folder).resolve())
        return True
    except ValueError:
        return False


def output_stem(name: str, label: str, folder: Path = PROFILES_DIR) -> Path:
    """results/profiles/NAME-LABEL (a profiler adds its suffix); refused if it would land elsewhere."""
    stem = Path(folder) / f"{name}-{safe_label(label)}"
    if not inside(stem, folder):
        raise UnsafeName(f"{str(stem)!r} would be written outside {folder}/")
    return stem


def make_folder(folder: Path = PROFILES_DIR) -> Path:
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ProfileError(f"cannot create {str(folder)!r}: {exc.strerror or exc}") from None
    return Path(folder)


# --- the profiler executable ------------------------------------------------------------

def find_tool(name: str, what: str, hint: str = "") -> str:
    """The path of ``name`` ($KBENCH_<NAME> wins, then PATH, then /usr/local/cuda/bin); ToolMissing if none."""
    override = os.environ.get(f"KBENCH_{name.upper()}")
    if override:
        if shutil.which(override):
            return shutil.which(override)
        raise ToolMissing(f"$KBENCH_{name.upper()}={override!r} is not an executable")
    found = shutil.which(name)
    if found:
        return found
    fallback = Path("/usr/local/cuda/bin") / name
    if fallback.is_file() and os.access(fallback, os.X_OK):
        return str(fallback)
    raise ToolMissing(f"{name} ({what}) was not found on PATH or in /usr/local/cuda/bin{hint}")


# --- the profiled worker ----------------------------------------------------------------

def worker_argv(job: dict, answers: Path, kernel_dirs=(), device: str = "auto") -> list[str]:
    """``python -m kbench.worker SPEC`` in batch mode: runs ``job`` and writes its answer to ``answers``."""
    spec = {"kernel_dirs": [str(p) for p in kernel_dirs], "device": device, "jobs": [job],
            "answers": str(answers)}
    return [sys.executable, "-m", "kbench.worker", json.dumps(spec)]


@dataclass
class Child:
    """What the profiled child left: its exit code, its log (profiler and worker output), the worker's answers."""

    returncode: int
    log: str
    log_path: Path
    hello: dict | None = None
    results: list[dict] = field(default_factory=list)

    @property
    def result(self) -> dict | None:
        return self.results[0] if self.results else None

    def last_error(self) -> str:
        """The profiler's first ==ERROR== line, else the log's last non-empty line."""
        lines = [line.strip() for line in self.log.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("==ERROR==")]
        if errors:
            return errors[0]
        return lines[-1] if lines else "(no output)"


def read_answers(path: Path) -> tuple[dict | None, list[dict]]:
    hello, results = None, []
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError:
        return None, []
    for line in text.splitlines():
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line torn by a kill
        if message.get("type") == "hello":
            hello = message
        elif message.get("type") == "result":
            message.pop("type")
            results.append(message)
    return hello, results


def _kill_worker(answers: Path) -> None:
    """Kill the worker the child started, by the pid it wrote, if that process is still a kbench worker."""
    hello, _ = read_answers(answers)
    pid = hello.get("pid") if hello else None
    if not isinstance(pid, int) or pid <= 1:
        return
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return
    if b"kbench.worker" in cmdline:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _kill(process: subprocess.Popen, answers: Path) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)  # the profiler and everything it started in its process group
    except (ProcessLookupError, PermissionError):
        process.kill()
    _kill_worker(answers)  # in case the profiler moved it to a process group of its own
    process.wait()


def run_child(argv: list[str], log_path: Path, answers: Path, timeout: float, tool: str,
              env: dict | None = None) -> Child:
    """Run ``argv`` (a profiler wrapping the worker, or the worker alone) with its output in ``log_path``.

    ProfilerTimeout when it runs past ``timeout`` seconds: the profiler and the worker are killed first.
    """
    answers = Path(answers)
    answers.unlink(missing_ok=True)
    with open(log_path, "wb") as log:
        log.write(f"$ {shlex.join(argv)}\n".encode())  # for the reader; never run through a shell
        log.flush()
        try:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       env=env if env is not None else os.environ.copy(), **OWN_PROCESS_GROUP)
        except OSError as exc:
            raise ProfileError(f"cannot start {argv[0]}: {exc.strerror or exc}") from None
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(process, answers)
            raise ProfilerTimeout(f"{tool} did not finish within {timeout:g} s; it and the profiled worker were "
                                  f"killed (log: {log_path}). Raise --timeout, or profile fewer calls or a "
                                  "smaller case") from None
        except BaseException:  # Ctrl-C: leave nothing running
            _kill(process, answers)
            raise
    text = Path(log_path).read_text(encoding="utf-8", errors="replace")
    hello, results = read_answers(answers)
    return Child(returncode, text, Path(log_path), hello, results)


def check_permission(child: Child, tool: str) -> None:
    """NotPermitted when the profiler could not read the GPU's performance counters."""
    if "ERR_NVGPUCTRPERM" in child.log:
        raise NotPermitted(
            f"{tool} is not permitted to read this GPU's performance counters (ERR_NVGPUCTRPERM). Fixes: run "
            "as root (sudo -E, or a container started with --cap-add=SYS_ADMIN), or let every user profile: "
            "`options nvidia NVreg_RestrictProfilingToAdminUsers=0` in a file under /etc/modprobe.d/, then "
            f"reload the nvidia module or reboot. See {PERMISSION_URL}")


def write_summary(path: Path, summary: dict) -> None:
    from kbench.results import dumps

    try:
        Path(path).write_text(dumps(summary, indent=1) + "\n", encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None


# --- figures shared by the tables ------------------------------------------------------

def weighted(kernels: list[dict], key: str, weight: str = "duration") -> float | None:
    """The ``weight``-weighted mean of ``key`` over the kernels that have both; None if none do."""
    pairs = [(k[key], k[weight]) for k in kernels if k.get(key) is not None and k.get(weight)]
    total = sum(w for _, w in pairs)
    if not pairs or total <= 0:
        return None
    return sum(v * w for v, w in pairs) / total


def agreement(profiled_us: float | None, event_ms: float | None, tolerance: float = 0.05,
              min_us: float = 50.0) -> dict:
    """Does a profiler's kernel time per call agree with kbench's event median?

    ``checked`` is False under ``min_us`` (launch overhead dominates short calls) or without both figures.
    """
    if profiled_us is None or event_ms is None:
        return {"checked": False, "ok": None, "diff": None, "why": "missing figure"}
    event_us = event_ms * 1e3
    diff = (profiled_us - event_us) / event_us
    if event_us < min_us:
        return {"checked": False, "ok": None, "diff": diff, "why": f"under {min_us:g} us"}
    return {"checked": True, "ok": abs(diff) <= tolerance, "diff": diff, "why": ""}


def _measured(key: str) -> bool:
    """A config entry that is a measurement of the process, not a description of the kernel that ran:
    the autotuner's tuning time and whether it tuned (tuning_seconds, tuned_here) and its timings of
    each candidate (candidates_ms), which differ between two processes running the same kernel."""
    return "tun" in key or key.endswith("_ms")


def agreement_rows(summary: dict, records: list[Record], tolerance: float = 0.05, min_us: float = 50.0) -> list[dict]:
    """Per implementation of a ``kbench profile`` summary (results/profiles/NAME.json): its kernel time per
    call against the event median of the same implementation and case in ``records`` (a kbench run)."""
    timed = {record.name: record for record in records if record.case_key == summary.get("case_key") and record.ok}
    rows = []
    for outcome in summary.get("implementations", []):
        profiled = (outcome.get("per_call") or {}).get("time_us")
        record = timed.get(outcome["label"])
        event_ms = record.median if record else None
        verdict = agreement(profiled, event_ms, tolerance, min_us)
        ran, profiled_config = record.config if record else None, outcome.get("config")
        if verdict["checked"] and ran and profiled_config and ran != profiled_config:
            # e.g. an autotuner that chose another tile shape in the profiled process: not the same kernel
            differ = sorted(k for k in set(ran) | set(profiled_config)
                            if ran.get(k) != profiled_config.get(k) and not _measured(k))
            if differ:
                verdict = {**verdict, "checked": False, "ok": None,
                           "why": "another configuration ran: " + ", ".join(
                               f"{k} {ran.get(k)} vs {profiled_config.get(k)}" for k in differ[:4])}
        row = {"label": outcome["label"], "profiled_us": profiled,
               "event_us": event_ms * 1e3 if event_ms is not None else None, **verdict}
        at_clock = same_clock(outcome.get("per_call") or {}, record)
        if verdict["checked"] and at_clock is not None:
            # The profiler's call and the run's samples ran at different SM clocks (a single call at
            # full clock; sustained sampling at the power limit): compare the profiler's time at the
            # run's clock, i.e. its cycles over the run's median clock.
            profiled_at_run_clock, run_mhz, profiled_mhz = at_clock
            judged = agreement(profiled_at_run_clock, event_ms, tolerance, min_us)
            row.update(judged, profiled_us_at_run_clock=profiled_at_run_clock, run_mhz=run_mhz,
                       profiled_mhz=profiled_mhz)
        rows.append(row)
    return rows


def same_clock(per_call: dict, record: Record | None) -> tuple[float, float, float] | None:
    """(the profiled time per call at the run's SM clock in us, the run's clock, the profiled clock) where
    the profiler gave cycles and the run recorded its clock; None otherwise."""
    cycles, time_us = per_call.get("cycles"), per_call.get("time_us")
    clock = record.timing.clock if record else None
    run_mhz = clock.sm_mhz_median if clock else None
    if not cycles or not time_us or not run_mhz:
        return None
    return cycles / run_mhz, run_mhz, cycles / time_us
