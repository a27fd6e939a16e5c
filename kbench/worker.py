"""The worker process: runs jobs for one implementation, isolated from the kbench process.

Started by :mod:`kbench.isolation` as ``python -m kbench.worker SPEC``. It reads
one JSON job per line on stdin and answers one JSON line per job on the
original stdout; anything the kernels print goes to stderr (the worker's log),
so it cannot corrupt the protocol. A CUDA error that poisons the context ends
the worker (after answering): the parent starts a fresh one for the next job.

Batch mode, for running under a profiler (``kbench profile``): a SPEC with
``"jobs"`` and ``"answers"`` runs those jobs and writes the same JSON lines to the
``answers`` file instead; stdin and stdout are not used, so nothing a profiler
prints can get in the way.

Each timed call runs inside the NVTX range ``kbench/<suite>/<label>/<case key>``
(:mod:`kbench.nvtx`); a job may ask for a ``torch.profiler`` capture of its timing
(``"profile": {"tool": "torch-profiler", "trace": PATH}``).
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import time
import traceback

from kbench.gpu_quiet import quiet_gpu

FATAL_CUDA_MARKERS = (
    "illegal memory access",
    "illegal instruction",
    "unspecified launch failure",
    "device-side assert",
    "misaligned address",
    "CUDA error",
    "CUDA_ERROR",
)


def release_cached_memory(collect: bool = False) -> None:
    """Give the GPU memory torch (and CuPy, where a kernel used it) keeps cached back to the driver. The
    check's trials (every input distribution, float64 references) and the re-check after timing leave
    far more cached than the timed calls use; under --interleave every implementation's worker holds
    its memory while the others check, sample and re-check, and a dozen workers each keeping such a
    peak would run the GPU out of memory. ``collect``: first free what only reference cycles still hold
    (a finished job's tensors)."""
    import gc

    import torch

    if collect:
        gc.collect()
    torch.cuda.empty_cache()
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            cupy.get_default_memory_pool().free_all_blocks()
        except Exception:  # noqa: BLE001 - a CuPy without a usable device: nothing of it is cached
            pass


def seconds_since_start() -> float | None:
    """This process's age: since its fork, for a worker forked by the fork server, or since it was
    started (from /proc; None where there is none)."""
    try:
        with open("/proc/self/stat") as stat:
            started_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as uptime:
            now = float(uptime.read().split()[0])
        return round(now - started_ticks / os.sysconf("SC_CLK_TCK"), 2)
    except (OSError, ValueError, IndexError):
        return None


def is_fatal(exc: BaseException) -> bool:
    """After these the process's CUDA context is unusable: only a fresh process recovers."""
    text = str(exc)
    return any(marker in text for marker in FATAL_CUDA_MARKERS)


def pick_device(requested: str) -> str:
    import torch

    if requested == "cpu":
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    if requested == "cuda":
        raise SystemExit("kbench worker: --device cuda asked for, but torch sees no CUDA device")
    return "cpu"


class Measurement:
    """One job (one implementation on one case): check, warm up, sample, finish. ``kbench run`` takes it
    a step at a time (:func:`serve_in_steps`): the trials drawn beside the other implementations', the
    implementation's calls in its turn (under --interleave its samples a burst at a time, between
    theirs); a profiler's batch of jobs takes each all at once (:func:`execute`)."""

    def __init__(self, registry, job: dict, device: str, env: dict):
        from kbench.suite import Case

        self.job, self.device, self.env = job, device, env
        self.suite = registry.suite(job["suite"])
        self.impl = registry.implementations(job["suite"])[job["impl"]]
        self.case = Case(job["case"])
        self.record = {"status": "SKIP", "backend": self.impl.backend}
        # Seconds of each step (the check, the warm-up, the sampling, what follows it): the harness's cost.
        self.phases: dict[str, float] = {}
        self.record["harness"] = self.phases
        self.sampler = None
        self.released = False  # cached GPU memory given back after the last burst (the next one settles first)
        self.trials = None
        self.verdict = None
        self.timed_calls = None

    def prepare(self) -> dict | None:
        """Check the implementation and warm it up; the finished record when there is nothing to time."""
        done = self.skip() or self.check()
        return done if done is not None else self.warm_up()

    def skip(self) -> dict | None:
        """The finished record of a job this worker cannot run (a SKIP), or None."""
        from kbench.registry import skip_reason

        capability = tuple(self.env["gpu"]["compute_capability"]) if self.env.get("gpu") else None
        reason = skip_reason(self.impl, self.case, self.device, capability)
        if reason:
            self.record["reason"] = reason
            return self.record
        return None

    def prepare_trials(self, ahead: bool) -> None:
        """The check's trials; with ``ahead``, drawn now, references and bounds worked out: the
        harness's part of the check, no call of the implementation's, so it runs beside other workers'
        (never beside a timing)."""
        from kbench import correctness

        job = self.job
        self.trials = correctness.Trials(self.suite, self.case, self.device, seed=job["seed"], trials=job["trials"])
        if ahead:
            started = time.perf_counter()
            with quiet_gpu(shared=True):
                self.trials.prepare()
            self._took("trials_s", started)

    def check(self) -> dict | None:
        """Call the implementation on each trial (the GPU shared, but in its turn: kbench runs one
        implementation's calls at a time); the finished record when there is nothing to time (a FAIL).
        A job this worker cannot run is a SKIP before this (:meth:`skip`)."""
        from kbench import correctness

        if self.trials is None:
            self.prepare_trials(ahead=False)
        started = time.perf_counter()
        with quiet_gpu(shared=True):
            self.verdict = self.trials.run(self.impl, self.job.get("params"))
            self.trials = None
            if self.device == "cuda":
                release_cached_memory()
        self._took("check_s", started)
        record = self.record
        record["correctness"] = self.verdict.as_record()
        if not self.verdict.ok:
            record.update(status="FAIL", reason=self.verdict.reason)
            return record
        self.fn = self.verdict.last[0]
        self.timed_calls = correctness.TimedCalls(self.verdict, self.device)
        return None

    def warm_up(self) -> None:
        """Settle how the checked closure is timed, and warm it up (the GPU held alone)."""
        from kbench import nvtx, timing
        from kbench.stopping import rule_for

        job, device = self.job, self.device
        profile = job.get("profile") or {}
        settings = timing.Settings(stop=rule_for(device, job["stop"]), flush_l2=job["flush_l2"],
                                   cuda_graph=job["cuda_graph"] and device == "cuda",
                                   # kbench run's jobs ask for it (a profiler's do not: its calls are counted)
                                   auto_graph=bool(job.get("auto_graph")) and device == "cuda",
                                   nvtx_range=nvtx.range_name(job["suite"], job.get("label") or job["impl"],
                                                              self.case.key),
                                   record_function=profile.get("tool") == "torch-profiler")
        if profile:  # under a profiler the warm-up's calls only cost time (and trace size): the minimum
            settings.warmup_time = 0.0
        self.settings, self.profile = settings, profile
        if not settings.record_function:
            started = time.perf_counter()
            with quiet_gpu():
                self.sampler = self._sampler()  # warms the closure up and looks at how its calls behave
            self._took("warmup_s", started)
        return None

    def _took(self, phase: str, started: float) -> None:
        self.phases[phase] = round(self.phases.get(phase, 0.0) + time.perf_counter() - started, 3)

    def _sampler(self):
        from kbench import timing

        if self.device == "cuda":
            return timing.CudaSampler(self.fn, self.settings, self._gpu_uuid(), guard=self.timed_calls)
        return timing.CpuSampler(self.fn, self.settings, guard=self.timed_calls)

    def _gpu_uuid(self) -> str | None:
        return self.env["gpu"].get("uuid") if self.env.get("gpu") else None

    def _result(self) -> dict:
        """The sampler's result; a launch-bound one timed again as graph replays, right after the eager
        samples (under --interleave too: after the case's bursts), in this worker, with the same guard."""
        from kbench import timing

        eager = self.sampler.result()
        if self.device != "cuda":  # the wall clock of CPU tensors: no launches to take out
            return eager
        return timing.with_graph_replay(eager, self.fn, self.settings, self._gpu_uuid(), guard=self.timed_calls)

    def burst(self, seconds: float | None) -> bool:
        """Take samples for up to ``seconds`` (all of them when None); True once sampling is over."""
        if self.sampler is None:  # a torch.profiler capture samples in finish()
            return True
        started = time.perf_counter()
        with quiet_gpu():
            if self.device != "cuda":
                over = self.sampler.burst(seconds) is not None
            else:
                over = self.sampler.burst(seconds, settle=self.released) is not None
                # A turn of --interleave (its last too: the others sample on until every one is done):
                # the timed calls judged in it (float64 differences from the sealed reference) left
                # memory cached that the next worker's turn needs, and every worker keeping that much at
                # once runs a large case out of memory. Given back outside the timed calls, while no
                # other worker runs; the next turn settles first.
                self.released = seconds is not None
                if self.released:
                    release_cached_memory()
        self._took("sample_s", started)
        return over

    def finish(self) -> dict:
        """The timing result, the implementation's own figures and the check on new inputs."""
        from kbench import correctness, nvtx, timing

        record = self.record
        if self.settings.record_function:
            from kbench.profilers import torch_profiler

            def measure() -> dict:
                sampler = self._sampler()
                sampler.burst()
                return sampler.result()

            record["timing"], record["profile"] = torch_profiler.capture(measure, self.device,
                                                                         self.settings.nvtx_range,
                                                                         self.profile["trace"])
        else:
            started = time.perf_counter()
            with quiet_gpu():
                record["timing"] = self._result()  # the side-stream check, and graph replays where launch-bound
            self._took("after_sampling_s", started)
        replay = record["timing"].pop(timing.REPLAY_CALL, None)  # a graph-timed row's graph: rechecked, not recorded
        record["nvtx"] = nvtx.backend_name()
        record["config"] = getattr(self.fn, "config", {})
        # A timed call that was wrong, or that changed the inputs: its time is not the checked kernel's.
        wrong = record["timing"].pop("wrong_call", "") or self.timed_calls.unchanged_inputs()
        if wrong:
            record["correctness"].update(ok=False, reason=wrong)
            record.update(status="FAIL", reason=wrong)
            return record
        if record["timing"].get("uncovered"):  # the events missed its work: the time is not its time
            record.update(status="FAIL", reason=record["timing"]["uncovered"])
            return record
        with quiet_gpu(shared=True):
            figures = getattr(self.fn, "figures", None)
            if callable(figures):  # what the implementation measures itself, once, outside the timed calls
                record["figures"] = figures(record["timing"])
        started = time.perf_counter()
        # also: did figures() leave the closure working? And the graph, where its replays were timed. On a
        # GPU its calls are timed as the samples were (the sampler's flush and hold) against their median,
        # alone. Not on a CPU: there a call after a pause (the reference's computation) waits for the thread
        # pool to wake, which a loaded machine stretches to milliseconds, so a wall clock of one call is no
        # verdict (a correct fp32 product took 27x its median beside another test run).
        timer = self.sampler.time_once if self.sampler is not None and self.device == "cuda" else None
        with quiet_gpu(shared=timer is None):
            again = correctness.recheck(self.verdict, self.device, replay, timer,
                                       record["timing"].get("stats", {}).get("median"))
        self._took("recheck_s", started)
        if self.verdict.new_inputs_ms:
            record["correctness"]["new_inputs_ms"] = self.verdict.new_inputs_ms
        if again:
            record["correctness"].update(ok=False, reason=again)
            record.update(status="FAIL", reason=again)
            return record
        record["status"] = "OK"
        return record

    def failed(self, exc: BaseException) -> dict:
        """The record of an implementation that raised (a SKIP when it said it cannot run the case)."""
        from kbench.registry import Unsupported

        record = self.record
        if isinstance(exc, Unsupported):
            record.update(status="SKIP", reason=str(exc))
            return record
        last = traceback.format_exception_only(type(exc), exc)[-1].strip().splitlines()[0]
        traceback.print_exc()  # full traceback to the worker's log
        record.update(status="CRASH", reason=f"raised {last}")
        if self.device == "cuda" and is_fatal(exc):
            record["fatal"] = True
        return record


def execute(registry, job: dict, device: str, env: dict) -> dict:
    """Run one job (one implementation on one case) and return the measured record fields."""
    measurement = Measurement(registry, job, device, env)
    try:
        done = measurement.prepare()
        if done is not None:
            return done
        if measurement.sampler is not None:
            measurement.burst(None)
        return measurement.finish()
    except Exception as exc:  # noqa: BLE001 - the implementation's failure is its row's result
        return measurement.failed(exc)


def serve_in_steps(registry, job: dict, device: str, env: dict, send, jobs) -> dict:
    """One job a step at a time, each step asked for by kbench: answer ``prepared`` once the trials are
    drawn (with ``"trials_ahead"`` in the job: their references worked out too, beside other workers'),
    then ``{"op": "check"}`` with ``checked``, ``{"op": "warm_up"}`` with ``ready``, ``{"op": "burst",
    "seconds": S}`` (None: until the stop rule is met) with ``{"type": "burst", "done": bool}``, and
    ``{"op": "finish"}`` with the record; the record is also the answer whenever the job ends early (a
    SKIP, a FAIL, a raise)."""
    from kbench import gpu_memory

    measurement = Measurement(registry, job, device, env)
    try:
        gpu_memory.reset_worker_peak()
        done = measurement.skip()
        if done is not None:
            return done
        measurement.prepare_trials(ahead=bool(job.get("trials_ahead")))
        send({"type": "prepared"})
        for message in jobs:
            op = message.get("op")
            if op == "check":
                done = measurement.check()
                if done is not None:
                    return done
                send({"type": "checked"})
            elif op == "warm_up":
                measurement.warm_up()
                send({"type": "ready", **gpu_memory.worker_figures()})
            elif op == "burst":
                send({"type": "burst", "done": measurement.burst(message.get("seconds"))})
            elif op == "finish":
                return measurement.finish()
        return measurement.finish()
    except Exception as exc:  # noqa: BLE001 - the implementation's failure is its row's result
        return measurement.failed(exc)


def exit_with_parent(interval: float = 1.0) -> None:
    """End this process when the kbench process that started it dies (SIGKILL included)."""
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(interval)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="kbench-parent-watch", daemon=True).start()


def serve(spec: dict, send, jobs, registry=None, **hello) -> None:
    """Load the registry on the chosen device (``registry``: one loaded already, by the fork server this
    worker was forked from), say hello, and answer each job in turn."""
    with quiet_gpu(shared=True):  # the driver's initialisation: not while another worker times
        device = pick_device(spec.get("device", "auto"))
    if device == "cpu":
        # Must be set before any kernel module imports triton: then @triton.jit
        # kernels run through Triton's interpreter on CPU tensors.
        os.environ.setdefault("TRITON_INTERPRET", "1")

    from kbench import envinfo, loader

    if registry is None:
        registry = loader.load(spec.get("kernel_dirs", []), suite=spec.get("suite"))
    with quiet_gpu(shared=True):
        env = envinfo.collect(device)
    send({"type": "hello", "device": device, "env": env, "startup_s": seconds_since_start(), **hello})
    jobs = iter(jobs)
    for job in jobs:
        if job.get("in_steps"):
            record = serve_in_steps(registry, job, device, env, send, jobs)
        else:
            record = execute(registry, job, device, env)
        if device == "cuda" and not record.get("fatal"):  # the next job, or another worker, needs it
            with quiet_gpu(shared=True):
                release_cached_memory(collect=True)
        send({"type": "result", **record})
        if record.get("fatal"):
            sys.exit(3)


def _stdin_jobs():
    for line in sys.stdin:
        if line.strip():
            yield json.loads(line)


def main() -> None:
    from kbench.results import dumps

    faulthandler.enable()  # a segfault leaves a Python stack in the log
    spec = json.loads(sys.argv[1])
    if "jobs" in spec:
        # Batch mode (under a profiler): the SPEC's jobs, answered into the SPEC's answers file. No
        # parent watch: the parent is the profiler, which may start the worker through a launcher of
        # its own; kbench kills the profiler's whole process group (and this pid) on a timeout.
        with open(spec["answers"], "a", encoding="utf-8") as answers:
            def send_to_file(message: dict) -> None:
                answers.write(dumps(message) + "\n")
                answers.flush()

            serve(spec, send_to_file, spec["jobs"], pid=os.getpid())
        return
    protocol_main(spec)


def protocol_main(spec: dict, registry=None) -> None:
    """The worker as kbench.isolation runs it: jobs on stdin, answers on stdout, everything else in the
    log (stderr). ``registry``: loaded already (a worker forked by kbench.forkserver)."""
    from kbench.results import dumps

    faulthandler.enable()  # a segfault leaves a Python stack in the log (stderr, as it is now)
    exit_with_parent()
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # kernels' prints go to the log, never into the protocol

    def send(message: dict) -> None:
        protocol.write(dumps(message) + "\n")
        protocol.flush()

    serve(spec, send, _stdin_jobs(), registry=registry)


if __name__ == "__main__":
    main()
