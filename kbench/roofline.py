"""Where a measurement sits under its roof: the compute ceiling of the unit it runs on, and
the memory ceiling at its arithmetic intensity (FLOPs over the suite's fewest bytes).

Each implementation declares its unit (`@implementation(..., unit=...)`):
- "tensor": matrix units. fp16/bf16 use the tensor-core peak; fp32 uses TF32's
  when the case allows it (`--tf32`), else the fp32 CUDA-core peak, because
  fp32 without TF32 runs on the CUDA cores.
- "cuda-core": the fp32 CUDA-core peak, whatever the element type.
- "memory": no compute ceiling; only bandwidth bounds it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from kbench.devices import DevicePeaks
from kbench.record import Record

UNITS = ("tensor", "cuda-core", "memory")
# Datasheet peaks are boost-clock figures: a point more than this fraction above
# its roof is not a fast kernel but a wrong measurement (see metrics.impossible).
SLACK = 0.05


def compute_roof(peaks: DevicePeaks, unit: str, dtype: str, tf32: bool = False) -> tuple[float | None, str]:
    """(TFLOP/s, label) of the compute ceiling, or (None, "memory") for memory-only kernels."""
    if unit == "memory":
        return None, "memory"
    if unit == "cuda-core" or (dtype == "fp32" and not tf32):
        return peaks.tflops["fp32"], "fp32 CUDA cores"
    if dtype == "fp32":
        return peaks.tflops["tf32"], "tf32 tensor cores"
    if dtype in peaks.tflops:
        return peaks.tflops[dtype], f"{dtype} tensor cores"
    return None, f"no {dtype} peak known"


@dataclass(frozen=True)
class Point:
    label: str
    suite: str
    case_key: str
    intensity: float  # FLOP per byte of the fewest bytes
    attained_tflops: float
    attained_tbs: float
    compute_tflops: float | None
    roof_label: str
    hbm_tbs: float
    gpu: str
    # Measured on another GPU than the roof's (kbench roofline --gpu): whether it was below the roof of
    # the GPU that ran it. Above a foreign roof is where the result would sit, not an impossibility.
    own_valid: bool | None = None
    ran_on: str | None = None  # that GPU's table key

    @property
    def attainable_tflops(self) -> float:
        memory = self.intensity * self.hbm_tbs
        return memory if self.compute_tflops is None else min(self.compute_tflops, memory)

    @property
    def bound(self) -> str:
        if self.compute_tflops is None:
            return "memory"
        return "compute" if self.compute_tflops <= self.intensity * self.hbm_tbs else "memory"

    @property
    def pct_of_roof(self) -> float:
        return 100.0 * self.attained_tflops / self.attainable_tflops

    @property
    def valid(self) -> bool:
        """False when the point is above the roof of the GPU that ran it: impossible, so the measurement is wrong."""
        return self.own_valid if self.own_valid is not None else self.below_roof

    @property
    def below_roof(self) -> bool:
        return self.attained_tflops <= self.attainable_tflops * (1 + SLACK)


def point(record: Record, peaks: DevicePeaks, unit: str) -> Point | None:
    """The roofline point of an OK record with a time, or None."""
    median_ms, flops, nbytes = record.median, record.flops, record.min_bytes
    if not median_ms or not flops or not nbytes:
        return None
    seconds = median_ms / 1e3
    case = record.case
    tflops, label = compute_roof(peaks, unit, case.get("dtype", "fp32"), bool(case.get("tf32", False)))
    return Point(
        label=record.name, suite=record.suite, case_key=record.case_key,
        intensity=flops / nbytes, attained_tflops=flops / seconds / 1e12, attained_tbs=nbytes / seconds / 1e12,
        compute_tflops=tflops, roof_label=label, hbm_tbs=peaks.hbm_tbs, gpu=peaks.key,
    )


# Which measured ceiling of `kbench calibrate` stands for each datasheet roof.
MEASURED_COMPUTE = {"fp16 tensor cores": "fp16_tensor_tflops", "bf16 tensor cores": "fp16_tensor_tflops",
                    "fp32 CUDA cores": "fp32_tflops", "memory": None}


def roof_lines(points: list[tuple[DevicePeaks, Point]]) -> list[str]:
    """A line a GPU: its memory roof, then each compute roof its points sit under with the ridge point
    where the two meet (the arithmetic intensity above which a kernel can be compute-bound)."""
    lines = []
    for key, peaks in {peaks.key: peaks for peaks, _ in points}.items():
        computes = dict.fromkeys((p.roof_label, p.compute_tflops) for pk, p in points
                                 if pk.key == key and p.compute_tflops)
        parts = [f"{label} {tflops:g} TFLOP/s, ridge at {tflops / peaks.hbm_tbs:.0f} FLOP/byte"
                 for label, tflops in computes]
        lines.append(f"{peaks.name}: memory {peaks.hbm_tbs:g} TB/s" + "".join(f"; {part}" for part in parts))
    return lines


def measured_attainable(p: Point, calibration: dict | None) -> float | None:
    """TFLOP/s attainable at the point's intensity under the measured ceilings, or None when
    the device is not calibrated (or its unit, TF32, was not measured)."""
    if not calibration or p.roof_label not in MEASURED_COMPUTE:
        return None
    memory = p.intensity * calibration["hbm_tbs"]
    key = MEASURED_COMPUTE[p.roof_label]
    return memory if key is None else min(calibration[key], memory)


def unit_of(record: Record, units: dict) -> str:
    """The unit the record's roof was taken for, else its implementation's in ``units`` ((suite, impl) ->
    unit; older records have no roof)."""
    return (record.roof.unit if record.roof else None) or units.get((record.suite, record.impl), "tensor")


@dataclass
class Placement:
    """Records placed on their GPUs' rooflines (kbench roofline's table and plot)."""

    points: list = field(default_factory=list)  # (DevicePeaks, Point): each placed record and the roofs it met
    skipped: int = 0  # records without a GPU time or a known GPU
    calibrations: dict = field(default_factory=dict)  # GPU table key -> its measured ceilings (detected roofs)
    measured: dict = field(default_factory=dict)  # id(point) -> TFLOP/s attainable under the measured ceilings


def place(records: list[Record], units: dict, fixed: DevicePeaks | None = None) -> Placement:
    """Each record against the roofs of the GPU that ran it, or of ``fixed`` (another GPU's datasheet: a
    point is then judged impossible only against the GPU that ran it)."""
    from kbench import calibrate
    from kbench.devices import peaks_for

    placed = Placement()
    for r in records:
        gpu = r.gpu
        peaks = fixed or peaks_for(gpu.get("name"))
        p = point(r, peaks, unit_of(r, units)) if peaks else None
        if p is None:
            placed.skipped += 1
            continue
        own = peaks_for(gpu.get("name")) if fixed else None
        if own is not None and own.key != fixed.key:
            p = dataclasses.replace(p, own_valid=point(r, own, unit_of(r, units)).below_roof, ran_on=own.key)
        placed.points.append((peaks, p))
        if fixed is None:  # measured roofs belong to the GPU that ran, not to another one
            calibration = calibrate.load_for(gpu)
            placed.measured[id(p)] = measured_attainable(p, calibration)
            if calibration:
                placed.calibrations[peaks.key] = calibration
    return placed
