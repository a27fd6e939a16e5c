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
import traceback

FATAL_CUDA_MARKERS = (
    "illegal memory access",
    "illegal instruction",
    "unspecified launch failure",
    "device-side assert",
    "misaligned address",
    "CUDA error",
    "CUDA_ERROR",
)


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


def execute(registry, job: dict, device: str, env: dict) -> dict:
    """Run one job (one implementation on one case) and return the measured record fields."""
    from kbench import correctness, nvtx, timing
    from kbench.registry import Unsupported, skip_reason
    from kbench.stopping import rule_for
    from kbench.suite import Case

    suite = registry.suite(job["suite"])
    impl = registry.implementations(job["suite"])[job["impl"]]
    case = Case(job["case"])
    capability = tuple(env["gpu"]["compute_capability"]) if env.get("gpu") else None
    record = {"status": "SKIP", "backend": impl.backend}

    reason = skip_reason(impl, case, device, capability)
    if reason:
        record["reason"] = reason
        return record
    try:
        verdict = correctness.check(suite, impl, case, device, seed=job["seed"], trials=job["trials"],
                                    params=job.get("params"))
        record["correctness"] = verdict.as_record()
        if not verdict.ok:
            record.update(status="FAIL", reason=verdict.reason)
            return record
        fn = verdict.last[0]
        profile = job.get("profile") or {}
        settings = timing.Settings(stop=rule_for(device, job["stop"]), flush_l2=job["flush_l2"],
                                   cuda_graph=job["cuda_graph"] and device == "cuda",
                                   nvtx_range=nvtx.range_name(job["suite"], job.get("label") or job["impl"], case.key),
                                   record_function=profile.get("tool") == "torch-profiler")
        if profile:  # under a profiler the warm-up's calls only cost time (and trace size): the minimum
            settings.warmup_time = 0.0

        def measure() -> dict:
            if device == "cuda":
                gpu_uuid = env["gpu"].get("uuid") if env.get("gpu") else None
                return timing.measure_cuda(fn, settings, gpu_uuid)
            return timing.measure_cpu(fn, settings)

        if settings.record_function:
            from kbench.profilers import torch_profiler

            record["timing"], record["profile"] = torch_profiler.capture(measure, device, settings.nvtx_range,
                                                                         profile["trace"])
        else:
            record["timing"] = measure()
        record["nvtx"] = nvtx.backend_name()
        record["config"] = getattr(fn, "config", {})
        if record["timing"].get("uncovered"):  # the events missed its work: the time is not its time
            record.update(status="FAIL", reason=record["timing"]["uncovered"])
            return record
        figures = getattr(fn, "figures", None)
        if callable(figures):  # what the implementation measures itself, once, outside the timed calls
            record["figures"] = figures(record["timing"])
        again = correctness.recheck(verdict, device)  # also: did figures() leave the closure working?
        if again:
            record["correctness"].update(ok=False, reason=again)
            record.update(status="FAIL", reason=again)
            return record
        record["status"] = "OK"
        return record
    except Unsupported as exc:
        record.update(status="SKIP", reason=str(exc))
        return record
    except Exception as exc:  # noqa: BLE001 - the implementation's failure is its row's result
        last = traceback.format_exception_only(type(exc), exc)[-1].strip().splitlines()[0]
        traceback.print_exc()  # full traceback to the worker's log
        record.update(status="CRASH", reason=f"raised {last}")
        if device == "cuda" and is_fatal(exc):
            record["fatal"] = True
        return record


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


def serve(spec: dict, send, jobs, **hello) -> None:
    """Load the registry on the chosen device, say hello, and answer each job in turn."""
    device = pick_device(spec.get("device", "auto"))
    if device == "cpu":
        # Must be set before any kernel module imports triton: then @triton.jit
        # kernels run through Triton's interpreter on CPU tensors.
        os.environ.setdefault("TRITON_INTERPRET", "1")

    from kbench import envinfo, loader

    registry = loader.load(spec.get("kernel_dirs", []))
    env = envinfo.collect(device)
    send({"type": "hello", "device": device, "env": env, **hello})
    for job in jobs:
        record = execute(registry, job, device, env)
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
        # its own; kbench kills the profiler's whole session (and this pid) on a timeout.
        with open(spec["answers"], "a", encoding="utf-8") as answers:
            def send_to_file(message: dict) -> None:
                answers.write(dumps(message) + "\n")
                answers.flush()

            serve(spec, send_to_file, spec["jobs"], pid=os.getpid())
        return
    exit_with_parent()
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # kernels' prints go to the log, never into the protocol

    def send(message: dict) -> None:
        protocol.write(dumps(message) + "\n")
        protocol.flush()

    serve(spec, send, _stdin_jobs())


if __name__ == "__main__":
    main()
