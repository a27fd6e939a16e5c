"""The arithmetic of a copy/compute pipeline (the streams suite, the classic CUDA multi-stream example).

A buffer of host memory goes to the device (H2D), through a kernel and back
(D2H). Split into N chunks spread over S streams, chunk i+1's copy-in can run
while chunk i's kernel and chunk i-1's copy-out do. Everything here is plain
Python (no torch), so it is tested on a CPU:

- :func:`chunk_ranges`: the chunks, for any element count (the classic example's loop drops
  the remainder when the size is not a multiple of the chunk size);
- :func:`relax_constants`, :func:`relax_reference_coefficient`, :func:`relax_tolerance`:
  the kernel's math, ``y <- a*y + b`` repeated ``work`` times;
- :func:`ideal_ms`, :func:`overlap_efficiency`, :func:`speedup`, :func:`balanced_work`:
  what a pipeline could reach from its stages measured alone, and how close it came;
- :func:`simulate`: the event times of an ideal schedule (synthetic timelines, and an
  independent check of :func:`ideal_ms`);
- :func:`timeline_bars`: per-chunk event times as bars, one lane per stream.
"""

from __future__ import annotations

import math

STAGES = ("H2D", "kernel", "D2H")
MAX_WORK = 1 << 22  # FMAs per element: a = 1 - 2^-k must stay an fp32 number below 1 (k <= 23)
FP32_ROUNDOFF = 2.0**-24


def chunk_ranges(n: int, chunks: int) -> list[tuple[int, int]]:
    """``chunks`` consecutive [start, stop) ranges covering 0..n, sizes differing by at most one
    (the first n % chunks ranges hold one element more). Every range is non-empty."""
    if chunks < 1:
        raise ValueError(f"chunks must be at least 1 (got {chunks})")
    if n < chunks:
        raise ValueError(f"{n} elements cannot make {chunks} non-empty chunks")
    size, extra = divmod(n, chunks)
    ranges, start = [], 0
    for i in range(chunks):
        stop = start + size + (1 if i < extra else 0)
        ranges.append((start, stop))
        start = stop
    return ranges


# --- the kernel's math -------------------------------------------------------------------

def relax_constants(work: int) -> tuple[float, float]:
    """(a, b) of ``y <- a*y + b``: a = 1 - 2^-k, b = 2^-k with 2^k the least power of two >= 2*work
    (k >= 1). Both are exact in fp32, the fixed point is exactly 1, and after ``work`` steps
    y = 1 + (x - 1)·a^work with a^work in [0.5, 0.78]: the answer keeps depending on x for any
    work, and each step moves it, so a kernel that skips steps or mixes up elements is caught."""
    if not 0 <= work <= MAX_WORK:
        raise ValueError(f"work must be in 0..{MAX_WORK} (got {work})")
    k = max(1, math.ceil(math.log2(2 * work))) if work else 1
    b = 2.0**-k
    return 1.0 - b, b


def relax_reference_coefficient(work: int) -> float:
    """a^work in float64: the exact answer is 1 + (x - 1)·a^work (a, b as relax_constants)."""
    a, _ = relax_constants(work)
    return a**work


def relax_tolerance(work: int) -> tuple[float, float]:
    """(atol, rtol) for fp32 against the float64 answer, inputs in [-1, 1].

    Each fp32 FMA rounds once: y_{k+1} = (a·y_k + b)(1 + d_k), |d_k| <= u. Every y stays between x
    and 1 (a convex combination), so |y| <= 1 and the error after ``work`` steps is at most
    sum_k a^(work-1-k)·u <= work·u. Four times that (two roundings a step if the compiler did not
    fuse, and a margin), and 4u for storing x itself when work is 0."""
    return 4 * FP32_ROUNDOFF * max(work, 1), 4 * FP32_ROUNDOFF


# --- what the stages allow ----------------------------------------------------------------

def _positive(**values: float) -> None:
    for name, value in values.items():
        if value is None or not value > 0 or not math.isfinite(value):
            raise ValueError(f"{name} must be a positive time (got {value!r})")


def ideal_ms(h2d_ms: float, kernel_ms: float, d2h_ms: float, chunks: int, both_ms: float | None = None) -> float:
    """The least time the pipeline can take: the slowest stage's total plus one chunk of each
    other stage (the fill before it and the drain after it).

    Each stage is measured alone over all N chunks (T_h2d, T_kernel, T_d2h; a chunk of a stage
    takes T/N). For identical chunks, a three-stage pipeline with enough streams (3 or more: a
    stream runs its own chunks in order) takes sum(T)/N + (N-1)·max(T)/N. ``both_ms``, both
    copies at once (H2D and D2H on two streams), is a fourth candidate for the slowest stage: in
    the steady state a chunk goes in while another comes out, and a link that cannot carry both
    directions at full speed makes that pair the bottleneck. N = 1 gives the serial sum.
    """
    _positive(h2d_ms=h2d_ms, kernel_ms=kernel_ms, d2h_ms=d2h_ms)
    if both_ms is not None:
        _positive(both_ms=both_ms)
    if chunks < 1:
        raise ValueError(f"chunks must be at least 1 (got {chunks})")
    stages = (h2d_ms, kernel_ms, d2h_ms)
    slowest = max(stages + ((both_ms,) if both_ms is not None else ()))
    return slowest * (chunks - 1) / chunks + sum(stages) / chunks


def overlap_efficiency(ideal: float, pipelined_ms: float) -> float:
    """ideal / measured: 1.0 is a perfect overlap; above 1, the stages ran faster together than alone."""
    _positive(ideal=ideal, pipelined_ms=pipelined_ms)
    return ideal / pipelined_ms


def speedup(serial_ms: float, pipelined_ms: float) -> float:
    _positive(serial_ms=serial_ms, pipelined_ms=pipelined_ms)
    return serial_ms / pipelined_ms


def balanced_work(work: int, kernel_ms: float, copy_ms: float) -> int | None:
    """The ``work`` at which the kernel stage would take as long as the slower copy, assuming
    kernel time proportional to work (its memory traffic is small beside the copies'). None at
    work 0 (nothing to scale)."""
    if work <= 0 or not kernel_ms > 0:
        return None
    return max(1, min(MAX_WORK, round(work * copy_ms / kernel_ms)))


# --- schedules and timelines --------------------------------------------------------------

def simulate(h2d_ms: float, kernel_ms: float, d2h_ms: float, chunks: int, streams: int) -> list[tuple]:
    """Event times (start, after H2D, after kernel, after D2H) of each chunk in an ideal schedule.

    Stage totals are split evenly over the chunks; chunk i runs on stream i % streams; each of
    the three engines (copy in, compute, copy out) takes one chunk at a time in chunk order, and a
    stream runs its chunks one after the other. With 3 or more streams the last chunk ends at
    :func:`ideal_ms` (without ``both_ms``); with one stream, at the serial sum."""
    if streams < 1:
        raise ValueError(f"streams must be at least 1 (got {streams})")
    th, tk, td = h2d_ms / chunks, kernel_ms / chunks, d2h_ms / chunks
    engine = [0.0, 0.0, 0.0]
    stream_free = [0.0] * streams
    marks = []
    for i in range(chunks):
        s = i % streams
        t0 = max(engine[0], stream_free[s])
        t1 = t0 + th
        t2 = max(engine[1], t1) + tk
        t3 = max(engine[2], t2) + td
        engine = [t1, t2, t3]
        stream_free[s] = t3
        marks.append((t0, t1, t2, t3))
    return marks


def timeline_bars(marks: list, streams: int) -> list[tuple[int, str, float, float, str]]:
    """Bars (lane, stage, start, end, chunk label) from each chunk's four event times (start,
    after H2D, after kernel, after D2H). Chunk i is on lane (stream) i % streams. A bar starts
    when its stream reached the operation: an engine busy with another stream may have started
    it later (events cannot see that), so bars of one stage may overlap across lanes."""
    bars = []
    for i, times in enumerate(marks):
        if len(times) != 4:
            raise ValueError(f"chunk {i}: expected 4 event times, got {len(times)}")
        if any(later < earlier for earlier, later in zip(times, times[1:])):
            raise ValueError(f"chunk {i}: event times go backwards: {tuple(times)}")
        for stage, start, end in zip(STAGES, times, times[1:]):
            bars.append((i % streams, stage, float(start), float(end), str(i)))
    return bars


# --- the summary of one run ---------------------------------------------------------------

def summary_lines(fig: dict) -> list[str]:
    """The figures of a pipelined run, as the lines kbench prints under the case's table."""
    def ms(value):
        return "-" if value is None else f"{value:.3f} ms"

    lines = [
        f"alone, chunked as the pipeline: H2D {ms(fig['h2d_ms'])} ({fig['h2d_gbps']:.1f} GB/s), "
        f"kernel {ms(fig['kernel_ms'])} ({fig['kernel_tflops']:.1f} TFLOP/s), "
        f"D2H {ms(fig['d2h_ms'])} ({fig['d2h_gbps']:.1f} GB/s), "
        f"H2D+D2H at once {ms(fig['both_ms'])} ({fig['both_gbps']:.1f} GB/s both ways)",
        f"serial {ms(fig['serial_ms']) if fig['serial_ms'] else 'does not fit in device memory'}, "
        f"pipelined {ms(fig['pipelined_ms'])}, ideal {ms(fig['ideal_ms'])} "
        f"(slowest stage + one chunk of fill and drain): overlap efficiency {fig['overlap_efficiency']:.1%}"
        + (f", {fig['speedup_vs_serial']:.2f}x serial" if fig.get("speedup_vs_serial") else ""),
    ]
    if fig.get("balanced_work"):
        lines.append(f"copy and compute balance at about --work {fig['balanced_work']}")
    if fig.get("timeline_png"):
        lines.append(f"timeline: {fig['timeline_png']}")
    elif fig.get("timeline_note"):
        lines.append(f"timeline: {fig['timeline_note']}")
    return lines
