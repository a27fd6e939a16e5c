"""``kbench profile --torch-profiler``: torch.profiler around the timed calls, where Nsight Systems is absent.

:func:`capture` runs inside the worker (:mod:`kbench.worker`): the timing runs under
``torch.profiler.profile`` (CPU activity, and CUDA activity on a GPU), each timed call in a
``record_function`` scope named like its NVTX range (``kbench/<suite>/<label>/<case>``). The Chrome
trace goes to ``results/profiles/NAME-LABEL.trace.json`` (open it in chrome://tracing or Perfetto);
:func:`range_table` keeps only what ran inside those scopes (warm-up runs under the profiler too,
outside them): GPU kernels on a GPU (their device time), operators on a CPU (their own CPU time).
"""

from __future__ import annotations

from pathlib import Path


def capture(measure, device: str, range_name: str, trace_path: str) -> tuple[dict, dict]:
    """(timing, profile): ``measure()``'s timing record, and the kernel/op table of its timed calls."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        timing = measure()
    Path(trace_path).parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(trace_path))
    return timing, {"tool": "torch-profiler", "trace": str(trace_path), **range_table(prof.events(), range_name)}


def _add(table: dict, name: str, microseconds: float) -> None:
    entry = table.setdefault(name, {"name": name, "count": 0, "total_us": 0.0})
    entry["count"] += 1
    entry["total_us"] += float(microseconds or 0.0)


def range_table(events, range_name: str) -> dict:
    """Kernels and operators that ran inside the ``range_name`` scopes, by name (count, total microseconds).

    A CUDA kernel is attached (``.kernels``) to the innermost operator or scope that launched it: each
    one is counted once, with its device time. An operator's own CPU time (``self_cpu_time_total``)
    excludes its children, so the operator rows add up to the scopes' time less Python's share.
    """
    scopes = [e for e in events if e.name == range_name]
    kernels: dict = {}
    ops: dict = {}
    for scope in scopes:
        stack = [scope]
        while stack:
            event = stack.pop()
            for kernel in getattr(event, "kernels", None) or ():
                _add(kernels, kernel.name, kernel.duration)
            if event is not scope:
                _add(ops, event.name, event.self_cpu_time_total)
            stack.extend(getattr(event, "cpu_children", None) or ())

    def ordered(table):
        return sorted(table.values(), key=lambda row: -row["total_us"])

    return {
        "calls": len(scopes),
        "scope_us": sum(float(s.cpu_time_total or 0.0) for s in scopes),
        "kernels": ordered(kernels),
        "ops": ordered(ops),
    }
