"""``kbench profile --torch-profiler``: torch.profiler around the timed calls, where Nsight Systems is absent.

:func:`capture` runs inside the worker (:mod:`kbench.worker`): the timing runs under
``torch.profiler.profile`` (CPU activity, and CUDA activity on a GPU), each timed call in a
``record_function`` scope named like its NVTX range (``kbench/<suite>/<label>/<case>``). The Chrome
trace goes to ``results/profiles/NAME-LABEL.trace.json`` (open it in chrome://tracing or Perfetto).
Only what ran inside those scopes is kept (warm-up runs under the profiler too, outside them):

- on a GPU, :func:`trace_kernels` reads the exported trace: the CUDA runtime and driver calls made
  inside a scope (same thread, inside its CPU time) name, by correlation id, the kernels, memsets
  and copies they launched. (torch's own event tree attached no kernel to Triton's
  ``cuLaunchKernelEx`` launches on the H200, and counted each scope twice: once on the CPU, once
  as its projection on the GPU.)
- on a CPU, :func:`range_table`: the operators under each scope (their own CPU time).
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
    table = {**range_table(prof.events(), range_name), "kernels": []}  # a CPU run launches none
    if device == "cuda":
        import json

        table.update(trace_kernels(json.loads(Path(trace_path).read_text()), range_name))
    return timing, {"tool": "torch-profiler", "trace": str(trace_path), **table}


LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")  # the host calls that start GPU work
GPU_CATEGORIES = ("kernel", "gpu_memset", "gpu_memcpy")  # the GPU work, with its device time


def trace_kernels(trace: dict, range_name: str) -> dict:
    """From a Chrome trace of torch.profiler: the calls (CPU scopes named ``range_name``) and the GPU
    work launched inside them, by name: {"calls", "kernels": [{name, count, total_us}], "unattributed"}.
    ``unattributed``: GPU events in the trace launched outside every scope (warm-up, flushes)."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    scopes = [e for e in events if e.get("cat") == "user_annotation" and e.get("name") == range_name]
    launched = set()
    for launch in (e for e in events if e.get("cat") in LAUNCH_CATEGORIES):
        for scope in scopes:
            if (launch.get("pid"), launch.get("tid")) == (scope.get("pid"), scope.get("tid")) and \
                    scope["ts"] <= launch["ts"] <= scope["ts"] + scope.get("dur", 0):
                launched.add((launch.get("args") or {}).get("correlation"))
                break
    launched.discard(None)
    kernels: dict = {}
    outside = 0
    for work in (e for e in events if e.get("cat") in GPU_CATEGORIES):
        if (work.get("args") or {}).get("correlation") in launched:
            _add(kernels, work.get("name", "?"), work.get("dur", 0.0))
        else:
            outside += 1
    return {"calls": len(scopes), "kernels": _ordered(kernels), "unattributed": outside}


def _add(table: dict, name: str, microseconds: float) -> None:
    entry = table.setdefault(name, {"name": name, "count": 0, "total_us": 0.0})
    entry["count"] += 1
    entry["total_us"] += float(microseconds or 0.0)


def _ordered(table: dict) -> list[dict]:
    """_add's rows, the most time first."""
    return sorted(table.values(), key=lambda row: -row["total_us"])


def _on_cpu(event) -> bool:
    """A scope's CPU event (not its GPU-side projection, which has the same name)."""
    device_type = getattr(event, "device_type", None)
    return device_type is None or getattr(device_type, "name", str(device_type)).upper().endswith("CPU")


def range_table(events, range_name: str) -> dict:
    """Operators that ran inside the ``range_name`` scopes, by name (count, total microseconds).

    An operator's own CPU time (``self_cpu_time_total``) excludes its children, so the operator rows
    add up to the scopes' time less Python's share. The kernels come from the trace (trace_kernels):
    torch's event tree attaches none to Triton's launches.
    """
    scopes = [e for e in events if e.name == range_name and _on_cpu(e)]
    ops: dict = {}
    for scope in scopes:
        stack = [scope]
        while stack:
            event = stack.pop()
            if event is not scope:
                _add(ops, event.name, event.self_cpu_time_total)
            stack.extend(getattr(event, "cpu_children", None) or ())
    return {
        "calls": len(scopes),
        "scope_us": sum(float(s.cpu_time_total or 0.0) for s in scopes),
        "ops": _ordered(ops),
    }
