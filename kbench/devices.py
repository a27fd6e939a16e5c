"""Datasheet peaks of the GPUs kbench knows, kept in one place.

Dense (no sparsity) figures from the vendors' datasheets, as collected in
../shared/peers.md: NVIDIA A100 datasheet (2021), H100 and H200 datasheets
(SXM parts). Rates are leads, not measurements: `kbench calibrate` (issue 8)
measures the real ceilings.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DevicePeaks:
    name: str
    tflops: dict  # unit -> TFLOP/s: "fp16"/"bf16" tensor, "tf32" tensor, "fp32" CUDA cores, "fp64"
    hbm_tbs: float  # memory bandwidth, TB/s
    source: str

    def compute_peak(self, dtype: str) -> float:
        """TFLOP/s of the unit a kernel of this dtype runs on (fp32: CUDA cores, no TF32)."""
        return self.tflops[dtype]


PEAKS = (
    DevicePeaks("H200", {"fp16": 989, "bf16": 989, "tf32": 495, "fp32": 67, "fp64": 34}, 4.8,
                "NVIDIA H200 SXM datasheet"),
    DevicePeaks("H100", {"fp16": 989, "bf16": 989, "tf32": 495, "fp32": 67, "fp64": 34}, 3.35,
                "NVIDIA H100 SXM datasheet"),
    DevicePeaks("A100", {"fp16": 312, "bf16": 312, "tf32": 156, "fp32": 19.5, "fp64": 9.7}, 2.039,
                "NVIDIA A100 80GB SXM datasheet"),
)


def peaks_for(gpu_name: str | None) -> DevicePeaks | None:
    """The table entry whose name appears in the GPU's name ('NVIDIA H200' -> H200)."""
    if not gpu_name:
        return None
    for peaks in PEAKS:
        if peaks.name.lower() in gpu_name.lower():
            return peaks
    return None
