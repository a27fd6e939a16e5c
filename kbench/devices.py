"""Datasheet peaks of the GPUs kbench knows, kept in one place.

Dense (no sparsity) rates, per compute unit: "fp16"/"bf16" tensor cores with
fp32 accumulation, "tf32" tensor cores, "fp32" CUDA cores, "fp64" (vector, not
the fp64 tensor path). These are vendors' figures at the boost clock, leads
rather than measurements (`kbench calibrate` measures the real ceilings).

Sources, as cited in each entry:
- NVIDIA A100 Tensor Core GPU datasheet (2021): SXM4 40/80 GB, PCIe 80 GB.
- NVIDIA H100 Tensor Core GPU datasheet (2023): H100 SXM5 and PCIe.
- NVIDIA H200 Tensor Core GPU datasheet (2024): H200 SXM (H100's compute, 4.8 TB/s HBM3e).
- NVIDIA L4 and L40S datasheets (2023); NVIDIA Ada Lovelace architecture
  whitepaper v1.1 (RTX 4090: fp16 tensor with fp32 accumulate).
- ../shared/peers.md repeats the A100/H100/H200 figures.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DevicePeaks:
    key: str  # what --gpu takes
    name: str
    tflops: dict  # unit -> TFLOP/s
    hbm_tbs: float  # memory bandwidth, TB/s
    l2_mb: float
    sms: int
    boost_mhz: int
    source: str
    matches: tuple[str, ...] = ()  # substrings of the name CUDA reports, all required

    def compute_peak(self, dtype: str) -> float:
        """TFLOP/s of the unit a kernel of this dtype runs on (fp32: CUDA cores, no TF32)."""
        return self.tflops[dtype]

    @property
    def ridge(self) -> dict:
        """FLOP/byte where each compute roof meets the memory roof."""
        return {unit: tf * 1e12 / (self.hbm_tbs * 1e12) for unit, tf in self.tflops.items()}


def _units(fp16: float, tf32: float, fp32: float, fp64: float) -> dict:
    return {"fp16": fp16, "bf16": fp16, "tf32": tf32, "fp32": fp32, "fp64": fp64}


PEAKS = (
    # L2: the datasheet gives none; CUDA reports 62,914,560 bytes (60 MiB) on an H200 (its records'
    # env.gpu.l2_bytes), where an H100 SXM5 reports 50 MiB.
    DevicePeaks("h200", "H200 SXM", _units(989, 495, 67, 34), 4.8, 60, 132, 1980,
                "NVIDIA H200 datasheet; L2 as CUDA reports it", ("H200",)),
    DevicePeaks("h100", "H100 SXM5", _units(989, 495, 67, 34), 3.35, 50, 132, 1980,
                "NVIDIA H100 datasheet (SXM5)", ("H100", "HBM3")),
    DevicePeaks("h100-pcie", "H100 PCIe", _units(756, 378, 51, 26), 2.0, 50, 114, 1755,
                "NVIDIA H100 datasheet (PCIe)", ("H100", "PCIe")),
    DevicePeaks("a100-80", "A100 SXM4 80GB", _units(312, 156, 19.5, 9.7), 2.039, 40, 108, 1410,
                "NVIDIA A100 datasheet (SXM4 80GB)", ("A100", "SXM4", "80GB")),
    DevicePeaks("a100-40", "A100 SXM4 40GB", _units(312, 156, 19.5, 9.7), 1.555, 40, 108, 1410,
                "NVIDIA A100 datasheet (SXM4 40GB)", ("A100", "SXM4", "40GB")),
    DevicePeaks("a100-pcie", "A100 PCIe 80GB", _units(312, 156, 19.5, 9.7), 1.935, 40, 108, 1410,
                "NVIDIA A100 datasheet (PCIe 80GB)", ("A100", "80GB", "PCIE")),
    DevicePeaks("a100-pcie-40", "A100 PCIe 40GB", _units(312, 156, 19.5, 9.7), 1.555, 40, 108, 1410,
                "NVIDIA A100 datasheet (PCIe 40GB)", ("A100", "PCIE")),
    # The A100 roofline as usually quoted: 312 TFLOP/s over 2 TB/s, ridge at 156 FLOP/byte.
    DevicePeaks("a100", "A100 (312 TFLOP/s over 2 TB/s)", _units(312, 156, 19.5, 9.7), 2.0, 40, 108, 1410,
                "A100 datasheet, bandwidth rounded to 2 TB/s", ("A100",)),
    DevicePeaks("l40s", "L40S", _units(362, 183, 91.6, 1.4), 0.864, 96, 142, 2520,
                "NVIDIA L40S datasheet", ("L40S",)),
    DevicePeaks("l4", "L4", _units(121, 60, 30.3, 0.49), 0.3, 48, 58, 2040,
                "NVIDIA L4 datasheet", ("L4",)),
    DevicePeaks("rtx4090", "GeForce RTX 4090", _units(165.2, 82.6, 82.6, 1.29), 1.008, 72, 128, 2520,
                "NVIDIA Ada Lovelace architecture whitepaper", ("4090",)),
)


def peaks_for(gpu_name: str | None) -> DevicePeaks | None:
    """The table entry for the name CUDA reports ('NVIDIA H200' -> H200), most specific match first."""
    if not gpu_name:
        return None
    words = gpu_name.replace("-", " ").upper()
    for peaks in PEAKS:
        if peaks.matches and all(m.upper() in words for m in peaks.matches):
            if peaks.key == "l4" and "L40" in words:
                continue
            return peaks
    return None


def by_key(key: str) -> DevicePeaks | None:
    """The entry --gpu names: one of the keys of PEAKS (h200, h100, a100, l4, ...)."""
    return next((p for p in PEAKS if p.key == key.lower()), None)
