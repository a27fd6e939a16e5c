"""Nsight Systems: the ``nsys profile`` / ``nsys stats`` command lines and the parser of the stats CSVs.

Profiling (one ``nsys`` process per implementation):

    nsys profile --trace=cuda,nvtx --sample=none --cpuctxsw=none
        --capture-range=nvtx --nvtx-capture=kbench/attention/naive/n=4096,... --capture-range-end=none
        --force-overwrite=true --output results/profiles/NAME-naive  python -m kbench.worker SPEC

The capture starts at the first timed call's range (warm-up and correctness checks are not in the
report) and runs to the end. nsys matches ``--nvtx-capture`` against registered NVTX strings only
unless ``NSYS_NVTX_PROFILER_REGISTER_ONLY=0`` is in the environment, which kbench sets: torch.cuda.nvtx
pushes plain strings.

Reading: ``nsys stats --report nvtx_kern_sum,cuda_gpu_kern_sum,nvtx_sum --format csv
--output PREFIX`` writes ``PREFIX_<report>.csv``. ``nvtx_kern_sum`` (kernels grouped by the NVTX range
they ran in) gives the table: only kernels inside kbench's range count, so the L2 flushes between
samples and the post-timing checks, which run outside it, are left out. Its columns, per the Nsight
Systems documentation: ``NVTX Range, Style, PID, TID, NVTX Inst, Kern Inst, Total Time (ns), Avg (ns),
Med (ns), Min (ns), Max (ns), StdDev (ns), Kernel Name``. Older versions without ``nvtx_kern_sum``
fall back to ``cuda_gpu_kern_sum`` (``Time (%), Total Time (ns), Instances, Avg (ns), Med (ns),
Min (ns), Max (ns), StdDev (ns), Name``), which covers the whole capture.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from kbench.profilers.ncu import number, short_name

REPORTS = ("nvtx_kern_sum", "cuda_gpu_kern_sum", "nvtx_sum")
ENV = {"NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}  # match plain (unregistered) NVTX strings too
_TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def profile_argv(nsys: str, stem, range_name: str, worker: list[str]) -> list[str]:
    return [nsys, "profile", "--trace=cuda,nvtx", "--sample=none", "--cpuctxsw=none", "--capture-range=nvtx",
            f"--nvtx-capture={range_name}", "--capture-range-end=none", "--force-overwrite=true",
            "--output", str(stem), *worker]


def stats_argv(nsys: str, report, prefix) -> list[str]:
    return [nsys, "stats", "--report", ",".join(REPORTS), "--format", "csv", "--output", str(prefix),
            "--force-export=true", "--force-overwrite=true", str(report)]


def stats_file(prefix, report: str) -> Path:
    return Path(f"{prefix}_{report}.csv")


def read_table(text: str) -> list[dict]:
    """The rows of one stats CSV, whatever nsys printed before its header (progress lines, a title)."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        fields = next(csv.reader([line]), [])
        if len(fields) >= 3 and any(re.search(r"\((ns|us|ms|s)\)$", f) for f in fields):
            return list(csv.DictReader(io.StringIO("\n".join(lines[index:]))))
    return []


def _time(row: dict, column: str) -> float | None:
    """A time column ('Total Time (ns)', or in whatever unit --timeunit chose) in seconds."""
    for unit, scale in _TIME_UNITS.items():
        value = row.get(f"{column} ({unit})")
        if value is not None:
            parsed = number(value)
            return parsed * scale if parsed is not None else None
    return None


def _kernel(row: dict, name_column: str, count_column: str) -> dict:
    """One kernel's row of a stats report (the two reports name the name and count columns differently)."""
    return {"name": short_name(row.get(name_column, "")), "launches": int(number(row.get(count_column, "")) or 0),
            **{key: _time(row, column) for key, column in
               (("total", "Total Time"), ("avg", "Avg"), ("med", "Med"), ("min", "Min"), ("max", "Max"))}}


def _range_matches(cell: str, range_name: str) -> bool:
    """nsys may prefix a range with its domain (':name' for the default one)."""
    cell = (cell or "").strip()
    return cell == range_name or cell.endswith(":" + range_name)


def kernels_in_range(text: str, range_name: str) -> tuple[list[dict], int]:
    """(kernels, range instances) of an nvtx_kern_sum CSV, for kbench's range only."""
    kernels, instances = [], 0
    for row in read_table(text):
        if not _range_matches(row.get("NVTX Range", ""), range_name):
            continue
        instances = max(instances, int(number(row.get("NVTX Inst", "")) or 0))
        kernels.append(_kernel(row, "Kernel Name", "Kern Inst"))
    return kernels, instances


def all_kernels(text: str) -> list[dict]:
    """The kernels of a cuda_gpu_kern_sum CSV (the whole capture: a fallback)."""
    return [_kernel(row, "Name", "Instances") for row in read_table(text)]


def range_times(text: str, range_name: str) -> dict | None:
    """kbench's range in an nvtx_sum CSV: instances and the CPU-side median (the range spans the launch)."""
    for row in read_table(text):
        if _range_matches(row.get("Range", ""), range_name):
            return {"instances": int(number(row.get("Instances", "")) or 0), "med": _time(row, "Med")}
    return None


def summarize(prefix, range_name: str, calls: int) -> dict:
    """The kernel table of one implementation's stats CSVs: per kernel, launches and times; per call, the total."""
    def read(report):
        path = stats_file(prefix, report)
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else None

    by_range, source = read("nvtx_kern_sum"), "nvtx_kern_sum"
    kernels, instances = kernels_in_range(by_range, range_name) if by_range else ([], 0)
    if by_range is None:
        whole = read("cuda_gpu_kern_sum")
        kernels, source = (all_kernels(whole) if whole else []), "cuda_gpu_kern_sum"
    nvtx_text = read("nvtx_sum")
    ranges = range_times(nvtx_text, range_name) if nvtx_text else None
    calls = instances or (ranges or {}).get("instances") or calls
    totals = [k["total"] for k in kernels if k["total"] is not None]
    return {
        "source": source,
        "kernels": kernels,
        "per_call": {
            "calls": calls,
            "kernels_per_call": sum(k["launches"] for k in kernels) / max(1, calls),
            "time_us": sum(totals) / max(1, calls) * 1e6 if totals else None,
            "range_med_us": ranges["med"] * 1e6 if ranges and ranges.get("med") is not None else None,
        },
    }
