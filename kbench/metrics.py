"""Figures derived from a measured time: TFLOP/s, GB/s, % of the roofline, speedup."""

from __future__ import annotations

from kbench.devices import DevicePeaks


def derive(median_ms: float, flops: float, min_bytes: float, dtype: str, peaks: DevicePeaks | None) -> dict:
    seconds = median_ms / 1e3
    out = {
        "tflops": flops / seconds / 1e12,
        "gbps": min_bytes / seconds / 1e9,
        "intensity": flops / min_bytes if min_bytes else None,
        "pct_of_peak": None,
        "bound": None,
    }
    if peaks is not None and dtype in peaks.tflops and min_bytes:
        # % of the roof at this arithmetic intensity: min(compute peak, intensity x bandwidth).
        compute = peaks.compute_peak(dtype) * 1e12
        memory = out["intensity"] * peaks.hbm_tbs * 1e12
        roof = min(compute, memory)
        out["pct_of_peak"] = 100.0 * (flops / seconds) / roof
        out["bound"] = "compute" if compute <= memory else "memory"
    return out


def speedup(baseline_ms: float | None, median_ms: float | None) -> float | None:
    if not baseline_ms or not median_ms:
        return None
    return baseline_ms / median_ms
