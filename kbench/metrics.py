"""Figures derived from a measured time: TFLOP/s, GB/s, % of the roofline, speedup,
and the speed-of-light check: a time below the datasheet roofline is impossible."""

from __future__ import annotations

from kbench.devices import DevicePeaks
from kbench.roofline import SLACK


def _compute_peak(dtype: str, peaks: DevicePeaks | None, compute_tflops: float | None) -> float | None:
    """The compute roof in TFLOP/s: the one given (from the implementation's unit, see
    kbench.roofline), else the dtype's entry of the peaks table."""
    if compute_tflops is not None:
        return compute_tflops
    return peaks.compute_peak(dtype) if peaks is not None and dtype in peaks.tflops else None


def derive(median_ms: float, flops: float, min_bytes: float, dtype: str, peaks: DevicePeaks | None,
           compute_tflops: float | None = None) -> dict:
    seconds = median_ms / 1e3
    out = {
        "tflops": flops / seconds / 1e12,
        "gbps": min_bytes / seconds / 1e9,
        "intensity": flops / min_bytes if min_bytes else None,
        "pct_of_peak": None,
        "bound": None,
    }
    peak = _compute_peak(dtype, peaks, compute_tflops)
    if peaks is not None and min_bytes and not flops:
        # No arithmetic at all (a copy, a transpose): the share of the HBM bandwidth.
        out["pct_of_peak"] = 100.0 * (min_bytes / seconds) / (peaks.hbm_tbs * 1e12)
        out["bound"] = "memory"
    elif peaks is not None and peak is not None and min_bytes:
        # % of the roof at this arithmetic intensity: min(compute peak, intensity x bandwidth).
        compute = peak * 1e12
        memory = out["intensity"] * peaks.hbm_tbs * 1e12
        roof = min(compute, memory)
        out["pct_of_peak"] = 100.0 * (flops / seconds) / roof
        out["bound"] = "compute" if compute <= memory else "memory"
    return out


def speedup(baseline_ms: float | None, median_ms: float | None) -> float | None:
    if not baseline_ms or not median_ms:
        return None
    return baseline_ms / median_ms


# Datasheet peaks are boost-clock figures no kernel reaches: a time more than this
# fraction under the roofline's floor is not a fast kernel but a wrong measurement.
SPEED_OF_LIGHT_SLACK = SLACK


def speed_of_light_ms(flops: float, min_bytes: float, dtype: str, peaks: DevicePeaks | None,
                      memory_roof: bool = True, compute_tflops: float | None = None) -> float | None:
    """The least time the work can take on this device: its FLOPs at the compute peak, or its
    fewest bytes at the HBM bandwidth, whichever is longer. ``memory_roof`` False (L2 not
    flushed: inputs may be served from cache) keeps only the compute floor. None: no peaks known."""
    peak = _compute_peak(dtype, peaks, compute_tflops)
    if peaks is None or peak is None:
        return None
    floor = flops / (peak * 1e12)
    if memory_roof and min_bytes:
        floor = max(floor, min_bytes / (peaks.hbm_tbs * 1e12))
    return floor * 1e3


def impossible(median_ms: float, flops: float, min_bytes: float, dtype: str, peaks: DevicePeaks | None,
               memory_roof: bool = True, compute_tflops: float | None = None) -> str:
    """Why a time is faster than the speed of light (the reason of a FAIL), or ""."""
    floor = speed_of_light_ms(flops, min_bytes, dtype, peaks, memory_roof, compute_tflops)
    if not floor or median_ms >= floor / (1 + SPEED_OF_LIGHT_SLACK):
        return ""
    memory = f" and {min_bytes:.3g} bytes at {peaks.hbm_tbs:g} TB/s" if memory_roof and min_bytes else ""
    return (f"impossible: faster than the roofline: {median_ms:.4g} ms, but {flops:.3g} FLOP at "
            f"{_compute_peak(dtype, peaks, compute_tflops):g} TFLOP/s ({dtype}){memory} need at least "
            f"{floor:.4g} ms on {peaks.name} "
            "(work skipped, done outside the timed calls, or not covered by the events)")
