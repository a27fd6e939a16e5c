"""Nsight Compute: the ``ncu`` command line kbench runs, and the parser of its raw-page CSV.

Profiling (one ``ncu`` process per implementation):

    ncu --nvtx --nvtx-include regex:kbench.attention.naive.n=4096.d=128...causal=False/
        --clock-control none --launch-count 20
        --section SpeedOfLight --section LaunchStats --section Occupancy
        --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --metrics <CORE_METRICS>
        [--kernel-name FILTER] --force-overwrite --export results/profiles/NAME-naive
        python -m kbench.worker SPEC

- ``--nvtx-include``: only kernels launched inside kbench's range of that implementation and case.
  ncu's NVTX syntax gives ``/ , @ [ ] * +`` meanings (``/`` separates nested push/pop ranges,
  a trailing ``/`` marks a push/pop range), and kbench's names contain ``/``, ``,`` and maybe
  ``[ ]``: the filter is therefore a ``regex:`` in which every character other than letters, digits,
  ``_``, ``=`` and ``-`` is ``.`` (any character), followed by the ``/`` of a push/pop range.
- ``--clock-control none``: the GPU's own clocks, as kbench's timings run (ncu's default locks them
  to base clocks).
- the worker times exactly ``calls`` calls (``--calls``, default 1), all inside the range, so every
  profiled kernel belongs to one of them; ``--launch-count`` only caps a runaway capture.

Reading: ``ncu --import R.ncu-rep --csv --page raw --print-units base --print-kernel-base function``
prints a header row (``ID``, ``Process ID``, ..., ``Kernel Name``, ..., then one column per metric),
a units row, then one row per profiled kernel. Numbers may carry thousands separators
(``1,234,567``); units are scaled with SI prefixes (``usecond``, ``Mbyte``, ``Kbyte/block``) unless
``--print-units base`` made them ``nsecond`` and ``byte``. :func:`parse_raw` handles both, and a
metric missing from the CSV shows as "-".

Where the collection sampled warp states per instruction (the SourceCounters section: ``--set detailed``
or ``full``), ``ncu --import R.ncu-rep --csv --page source --print-source sass --kernel-name K`` prints,
per kernel, a ``"Kernel Name",...`` line, a header row (``Address``, ``Source``, ``Warp Stall Sampling
(All Samples)``, ..., ``stall_barrier``, ...) and one row per SASS instruction: :func:`parse_source`
reads it and :func:`hot_lines` names the instructions most samples found a warp waiting at (a sample
is charged to the instruction the warp would issue next: the one after a barrier, say).
"""

from __future__ import annotations

import csv
import io
import re

from kbench.profilers.common import weighted

DEFAULT_SET = "kbench"
DEFAULT_SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "MemoryWorkloadAnalysis", "ComputeWorkloadAnalysis",
                    "WarpStateStats")
DURATION = "gpu__time_duration.sum"
# The SM clock cycles a kernel took: with its duration, the clock it ran at. A kbench run samples
# under sustained load, often at a lower (power-limited) clock than a profiled single call, so the
# two are compared at the same clock (kbench.profilers.agreement.agreement_rows).
CYCLES = "gpc__cycles_elapsed.max"
# Named on every architecture since Volta; collected explicitly so the table never depends on a section's
# contents. The tensor pipe's metric differs per architecture (hmma, gmma on Hopper): it comes from the
# ComputeWorkloadAnalysis section, and the parser takes whichever the CSV has.
CORE_METRICS = (
    DURATION,
    CYCLES,
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread",
    "launch__shared_mem_per_block_static",
    "launch__shared_mem_per_block_dynamic",
    "lts__t_sector_hit_rate.pct",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
)
TENSOR_METRIC = re.compile(r"^sm__(pipe_tensor\w*_cycles_active|inst_executed_pipe_tensor\w*)"
                           r"\.avg\.pct_of_peak_sustained_active$")
# The WarpStateStats section's stall reasons: cycles a warp spent in each state per issued instruction.
# "selected" (issuing) is not a stall.
STALL_METRIC = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")
# Sections sets without WarpStateStats (`--set detailed` in ncu 2025.3) still sample warp states for the
# SourceCounters section: counts of samples per state ("_not_issued": the same samples, narrowed to
# cycles with no instruction issued), out of smsp__pcsamp_sample_count. A kernel's top stalls are then
# each state's share of its samples.
SAMPLED_STALL_METRIC = re.compile(r"^smsp__pcsamp_warps_issue_stalled_(\w+)$")
SAMPLE_COUNT = "smsp__pcsamp_sample_count"
TOP_STALLS = 3
DEFAULT_LAUNCH_COUNT = 20
_SET_NAME = re.compile(r"[A-Za-z0-9_-]+")
_METRIC = re.compile(r"[A-Za-z0-9_.:^$()|\\\[\]*+?{}-]+")


# --- the command lines ----------------------------------------------------------------------

def nvtx_include(range_name: str) -> str:
    """ncu's --nvtx-include filter for exactly this push/pop range (see the module doc)."""
    return "regex:" + re.sub(r"[^A-Za-z0-9_=-]", ".", range_name) + "/"


def metric_list(text: str | None) -> list[str]:
    """--metrics a,b,c checked: names only (they go to ncu as one argument, never through a shell)."""
    from kbench.profilers.common import ProfileError

    names = [part.strip() for part in (text or "").split(",") if part.strip()]
    for name in names:
        if not _METRIC.fullmatch(name):
            raise ProfileError(f"--metrics: {name!r} is not a metric name") from None
    return names


def collection_args(set_name: str = DEFAULT_SET, metrics: str | None = None) -> list[str]:
    """What to collect: kbench's sections and CORE_METRICS by default; ``--set NAME`` instead of the
    sections; ``--metrics`` alone (plus the duration, which the table needs)."""
    from kbench.profilers.common import ProfileError

    if not _SET_NAME.fullmatch(set_name or ""):
        raise ProfileError(f"--set: {set_name!r} is not a section set name (see `ncu --list-sets`)")
    chosen = metric_list(metrics)
    args: list[str] = []
    if set_name != DEFAULT_SET:
        args += ["--set", set_name]
    elif not chosen:
        for section in DEFAULT_SECTIONS:
            args += ["--section", section]
    names = [DURATION, *[m for m in chosen if m != DURATION]] if chosen else list(CORE_METRICS)
    return args + ["--metrics", ",".join(names)]


def profile_argv(ncu: str, stem, range_name: str, worker: list[str], *, set_name: str = DEFAULT_SET,
                 metrics: str | None = None, kernel_name: str | None = None,
                 launch_count: int = DEFAULT_LAUNCH_COUNT, clock_control: str = "none") -> list[str]:
    argv = [ncu, "--nvtx", "--nvtx-include", nvtx_include(range_name), "--clock-control", clock_control,
            "--launch-count", str(launch_count), *collection_args(set_name, metrics)]
    if kernel_name:
        argv += ["--kernel-name", kernel_name]  # one argument, whatever it contains
    return argv + ["--force-overwrite", "--export", str(stem), *worker]


def import_argv(ncu: str, report) -> list[str]:
    return [ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base",
            "--print-kernel-base", "function"]


def source_argv(ncu: str, report, kernel: str) -> list[str]:
    """The per-instruction page of one kernel (``kernel``: a short name, :func:`short_name`), as SASS."""
    return [ncu, "--import", str(report), "--csv", "--page", "source", "--print-source", "sass",
            "--kernel-name", f"regex:{re.escape(kernel)}$"]


# --- the raw page ------------------------------------------------------------------------

_PREFIXES = {"": 1.0, "n": 1e-9, "u": 1e-6, "m": 1e-3, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_SCALED = ("second", "byte", "hz", "cycle", "inst", "sector", "request", "warp", "thread", "block")
# Times in their short form: ncu 2025.3 with --print-units base writes durations as 'ns' (seen on the
# H200; tests/fixtures/profile/ncu_raw_20261129_constant-cmem.csv), older versions 'nsecond'.
_TIMES = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def unit_scale(unit: str) -> float:
    """The factor to base units (seconds, bytes, ...) of an ncu unit: 'usecond' 1e-6, 'Mbyte' 1e6,
    'Kbyte/block' 1e3, 'byte/second' 1, 'ns' 1e-9, '%' 1. Only the numerator carries a prefix."""
    numerator = (unit or "").split("/")[0].strip()
    if numerator in _TIMES:
        return _TIMES[numerator]
    for root in _SCALED:
        if numerator.endswith(root):
            prefix = numerator[: -len(root)]
            if prefix in _PREFIXES:
                return _PREFIXES[prefix]
    return 1.0


def number(text: str) -> float | None:
    """'1,234.5' -> 1234.5; '' and 'n/a' -> None."""
    cleaned = (text or "").strip().replace(",", "")
    if not cleaned:
        return None
    try:
        return float(cleaned)
    except ValueError:
        return None


def _table_start(lines: list[str]) -> int | None:
    for index, line in enumerate(lines):
        if line.startswith('"ID",') or line.startswith("ID,"):
            return index
    return None


def parse_raw(text: str) -> list[dict]:
    """One dict per profiled kernel of ``ncu --import ... --csv --page raw``: ``id``, ``name``, ``pid``,
    ``nvtx`` (the push/pop range stack, when ncu recorded NVTX), ``block``, ``grid`` and ``metrics``
    ({metric name: value in base units}, numbers only). Lines before the header (==PROF== ...) are skipped."""
    lines = text.splitlines()
    start = _table_start(lines)
    if start is None:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header = rows[0]
    index = {name: i for i, name in enumerate(header)}
    units = [""] * len(header)
    body = rows[1:]
    if body and len(body[0]) == len(header) and not body[0][0].strip():
        units, body = body[0], body[1:]  # the units row: empty under ID, Kernel Name, ...
    nvtx_column = next((i for i, name in enumerate(header) if "Push/Pop_Range" in name), None)
    fixed = {"ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
             "Grid Size", "Device", "CC"}
    kernels = []
    for row in body:
        if len(row) != len(header) or number(row[0]) is None:
            continue  # a trailing ==PROF== line, a blank line
        metrics = {}
        for i, name in enumerate(header):
            if name in fixed or i == nvtx_column or "_Range:" in name:
                continue
            value = number(row[i])
            if value is not None:
                metrics[name] = value * unit_scale(units[i])
        get = lambda column: row[index[column]] if column in index else ""  # noqa: E731
        kernels.append({
            "id": int(number(row[0])),
            "name": get("Kernel Name"),
            "pid": get("Process ID"),
            "nvtx": row[nvtx_column] if nvtx_column is not None else "",
            "block": get("Block Size"),
            "grid": get("Grid Size"),
            "metrics": metrics,
        })
    return kernels


def figures(kernel: dict, asked: tuple[str, ...] = ()) -> dict:
    """The table's figures of one profiled kernel (base units: seconds, bytes, percent); None where the
    CSV lacks the metric. ``asked``: the --metrics names, kept as ncu gave them under "asked" (with the
    launch's grid and block), for the table of what the user asked for."""
    m = kernel["metrics"]

    def first(*names):
        return next((m[n] for n in names if n in m), None)

    smem = [m[n] for n in ("launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic") if n in m]
    tensor = [value for name, value in m.items() if TENSOR_METRIC.match(name)]
    read, write = first("dram__bytes_read.sum"), first("dram__bytes_write.sum")
    total = read + write if read is not None and write is not None else first("dram__bytes.sum")
    averaged = stalls(m)  # WarpStateStats where collected, else the sampled warp states
    return {
        "name": short_name(kernel["name"]),
        "duration": first(DURATION),
        "cycles": first(CYCLES),
        "sm_pct": first("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        "dram_pct": first("dram__throughput.avg.pct_of_peak_sustained_elapsed",
                          "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
        "occupancy": first("sm__warps_active.avg.pct_of_peak_sustained_active"),
        "registers": first("launch__registers_per_thread"),
        "smem": sum(smem) if smem else None,
        "tensor_pct": max(tensor) if tensor else None,
        "l2_hit": first("lts__t_sector_hit_rate.pct"),
        "dram_read": read,
        "dram_write": write,
        "dram_bytes": total,
        "stalls": averaged or sampled_stalls(m),
        "stall_unit": "cycles" if averaged else "samples",
        "samples": first(SAMPLE_COUNT),
        "grid": kernel.get("grid", ""),
        "block": kernel.get("block", ""),
        "asked": {name: m.get(name) for name in asked},
    }


def stalls(metrics: dict, top: int = TOP_STALLS) -> list[tuple[str, float]]:
    """The largest warp-stall reasons, (reason, cycles per issued instruction), largest first; [] when the
    CSV has none (sections without WarpStateStats)."""
    found = []
    for name, value in metrics.items():
        match = STALL_METRIC.match(name)
        if match and match.group(1) != "selected" and value:
            found.append((match.group(1), value))
    return sorted(found, key=lambda pair: -pair[1])[:top]


def sampled_stalls(metrics: dict, top: int = TOP_STALLS) -> list[tuple[str, float]]:
    """The largest warp-stall reasons by sampling, (reason, percent of the kernel's warp samples), largest
    first; [] when the CSV has no samples. For collections without WarpStateStats (:data:`SAMPLED_STALL_METRIC`)."""
    total = metrics.get(SAMPLE_COUNT)
    if not total:
        return []
    found = []
    for name, value in metrics.items():
        match = SAMPLED_STALL_METRIC.match(name)
        reason = match.group(1) if match else ""
        if reason and not reason.endswith("_not_issued") and reason != "selected" and value:
            found.append((reason, round(100.0 * value / total, 2)))
    return sorted(found, key=lambda pair: -pair[1])[:top]


SOURCE_SAMPLES = "Warp Stall Sampling (All Samples)"
HOT_LINES = 5
# The source page's short names of warp states (its stall_* columns), as the raw page's metrics name them,
# so that one kernel's stall line and its instructions speak of the same states.
SOURCE_STATES = {"dispatch": "dispatch_stall", "imc": "imc_miss", "lg": "lg_throttle", "long_sb": "long_scoreboard",
                 "math": "math_pipe_throttle", "mio": "mio_throttle", "no_inst": "no_instructions",
                 "short_sb": "short_scoreboard", "sleep": "sleeping", "tex": "tex_throttle"}


def parse_source(text: str, kernel: str | None = None) -> list[dict]:
    """The rows of the first kernel of a source page (see the module doc) whose short name is ``kernel``
    (None: the first kernel): address, SASS text, samples and the samples of each warp state
    (``stall_*`` columns, not the "(Not Issued)" ones); [] when the text has no such table."""
    rows = list(csv.reader(io.StringIO(text)))
    start = next((i for i, row in enumerate(rows) if len(row) > 1 and row[0] == "Kernel Name"
                  and (kernel is None or short_name(row[1]) == kernel)), None)
    if start is None or start + 1 >= len(rows) or SOURCE_SAMPLES not in rows[start + 1]:
        return []
    header = rows[start + 1]
    samples = header.index(SOURCE_SAMPLES)
    states = {i: SOURCE_STATES.get(name.removeprefix("stall_"), name.removeprefix("stall_"))
              for i, name in enumerate(header) if name.startswith("stall_") and not name.endswith("(Not Issued)")}
    out = []
    for row in rows[start + 2:]:
        if row and row[0] == "Kernel Name":
            break  # the next kernel's table
        if len(row) <= samples:
            continue
        count = number(row[samples]) or 0.0
        out.append({"address": row[0], "sass": row[1].strip(), "samples": count,
                    "states": {name: number(row[i]) or 0.0 for i, name in states.items() if i < len(row)}})
    return out


def hot_lines(rows: list[dict], total: float | None = None, top: int = HOT_LINES) -> list[dict]:
    """The instructions with the most samples, most first: SASS text, percent of the kernel's samples
    (``total``: its sample count from the raw page; else the rows' sum) and the warp state most of them
    were in."""
    total = total or sum(row["samples"] for row in rows)
    if not total:
        return []
    out = []
    for row in sorted(rows, key=lambda r: -r["samples"])[:top]:
        if not row["samples"]:
            break
        states = {name: count for name, count in row["states"].items() if count}
        out.append({"sass": row["sass"], "address": row["address"],
                    "percent": round(100.0 * row["samples"] / total, 1),
                    "state": max(states, key=states.get) if states else ""})
    return out


def short_name(name: str) -> str:
    """A kernel's name without its return type, template arguments and parameters:
    'void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)' -> 'at::native::vectorized_elementwise_kernel'
    (and '(anonymous namespace)::' dropped)."""
    text = name.strip().replace("(anonymous namespace)::", "")
    if text.startswith("void "):
        text = text[5:]
    out, depth = [], 0
    for ch in text:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0:
            break
        elif depth == 0:
            out.append(ch)
    return "".join(out).strip() or name


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def by_name(rows: list[dict]) -> list[dict]:
    """Kernel figures grouped by name, in first-launch order: launches, mean duration and means of the rest."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["name"], []).append(row)
    out = []
    for name, group in groups.items():
        merged = {"name": name, "launches": len(group)}
        for key in ("duration", "sm_pct", "dram_pct", "occupancy", "registers", "smem", "tensor_pct", "l2_hit",
                    "dram_read", "dram_write", "dram_bytes"):
            merged[key] = _mean([g[key] for g in group if g.get(key) is not None])
        merged["stalls"] = group[0].get("stalls") or []  # the first launch's: launches of one kernel stall alike
        merged["stall_unit"] = group[0].get("stall_unit", "cycles")
        merged["samples"] = group[0].get("samples")
        merged["grid"], merged["block"] = group[0].get("grid", ""), group[0].get("block", "")
        asked = group[0].get("asked") or {}
        merged["asked"] = {name: _mean([g["asked"][name] for g in group if g["asked"].get(name) is not None])
                           for name in asked}
        out.append(merged)
    return out


def per_call(rows: list[dict], calls: int, min_bytes: float | None) -> dict:
    """One call's totals (the worker timed ``calls`` calls, all in the range): time, DRAM bytes read and
    written, bytes moved over the suite's fewest-bytes model, and duration-weighted utilisations."""
    calls = max(1, calls)

    def total(key):
        values = [r[key] for r in rows if r.get(key) is not None]
        return sum(values) / calls if values else None

    moved = total("dram_bytes")
    regs = [r["registers"] for r in rows if r.get("registers") is not None]
    smem = [r["smem"] for r in rows if r.get("smem") is not None]
    return {
        "calls": calls,
        "kernels_per_call": len(rows) / calls,
        "time_us": total("duration") * 1e6 if total("duration") is not None else None,
        "cycles": total("cycles"),
        "dram_read": total("dram_read"),
        "dram_write": total("dram_write"),
        "dram_bytes": moved,
        "min_bytes": min_bytes,
        "traffic_ratio": moved / min_bytes if moved is not None and min_bytes else None,
        "sm_pct": weighted(rows, "sm_pct"),
        "dram_pct": weighted(rows, "dram_pct"),
        "occupancy": weighted(rows, "occupancy"),
        "tensor_pct": weighted(rows, "tensor_pct"),
        "l2_hit": weighted(rows, "l2_hit"),
        "registers": max(regs) if regs else None,
        "smem": max(smem) if smem else None,
    }


def summarize(csv_text: str, calls: int, min_bytes: float | None, asked: tuple[str, ...] = ()) -> dict:
    """Everything the tables need from one implementation's raw CSV (``asked``: the --metrics names)."""
    rows = [figures(k, asked) for k in parse_raw(csv_text)]
    return {"kernels": by_name(rows), "launches": rows, "per_call": per_call(rows, calls, min_bytes)}
