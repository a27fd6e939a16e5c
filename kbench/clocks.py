"""The SM clock and power a measurement ran at.

Two sources:

- :class:`SampleClocks`: each sample's own mean SM clock, from stamps of SM 0's cycle counter and
  the global timer written just before the start event and just after the end event (a PTX
  kernel in :mod:`kbench.sm_kernels`; nvbench reads the clock the same way). Exact per sample.
- :class:`ClockMonitor`: NVML's SM clock and power draw, read once per batch of samples
  (nvidia-ml-py). Coarse, but there whenever NVML is.

A sample that ran under ``THROTTLE_FRACTION`` of the GPU's maximum SM clock is counted as
throttled and the row says so. nvbench discards samples under 75 % of the default clock; the
threshold here is higher because a Hopper GPU at its power limit holds 84-87 % of its maximum for
as long as the load lasts, which is exactly what a reader of a ratio needs to know. Throttled
samples are kept (the median is of every sample), and each row records the clock it ran at.
"""

from __future__ import annotations

THROTTLE_FRACTION = 0.90


class ClockMonitor:
    """Reads the SM clock and power of the GPU with a given UUID; every method is a no-op without NVML."""

    def __init__(self, uuid: str | None):
        self.readings: list[int] = []
        self.power_mw: list[int] = []
        self.max_mhz: int | None = None
        self._handle = None
        self._nvml = None
        if not uuid:
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                found = pynvml.nvmlDeviceGetUUID(handle)
                found = found.decode() if isinstance(found, bytes) else found
                if found.removeprefix("GPU-") == uuid.removeprefix("GPU-"):
                    self._handle = handle
                    self._nvml = pynvml
                    self.max_mhz = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)
                    break
        except Exception:  # noqa: BLE001 - no NVML (CPU machine, container): no clock data
            self._handle = None

    def sample(self) -> None:
        if self._handle is None:
            return
        try:
            self.readings.append(self._nvml.nvmlDeviceGetClockInfo(self._handle, self._nvml.NVML_CLOCK_SM))
            self.power_mw.append(self._nvml.nvmlDeviceGetPowerUsage(self._handle))
        except Exception:  # noqa: BLE001
            pass

    def summary(self, sample_mhz=()) -> dict | None:
        """The clock over the samples: per sample where stamps were taken (``sample_mhz``), else NVML's
        readings; power from NVML. None when neither source gave anything."""
        sample_mhz = [mhz for mhz in sample_mhz if mhz == mhz and mhz > 0]
        if not self.readings and not sample_mhz:
            return None
        summary: dict = {"sm_mhz_max_rated": self.max_mhz}
        if sample_mhz:
            ordered = sorted(sample_mhz)
            summary.update(source="per-sample stamps", sm_mhz_min=round(ordered[0]),
                           sm_mhz_median=round(ordered[len(ordered) // 2]), sm_mhz_max=round(ordered[-1]))
            if self.max_mhz:
                summary["throttled"] = sum(mhz < THROTTLE_FRACTION * self.max_mhz for mhz in sample_mhz)
        else:
            ordered = sorted(self.readings)
            summary.update(source="nvml", sm_mhz_min=ordered[0], sm_mhz_median=ordered[len(ordered) // 2],
                           sm_mhz_max=ordered[-1])
        if self.power_mw:
            watts = sorted(p / 1000 for p in self.power_mw)
            summary.update(power_w_median=round(watts[len(watts) // 2], 1), power_w_max=round(watts[-1], 1))
        return summary

    def warning(self) -> str | None:
        if not self.readings or not self.max_mhz:
            return None
        low = min(self.readings)
        if low < 0.75 * self.max_mhz:
            return f"SM clock sagged to {low} MHz (< 75% of {self.max_mhz} MHz) while measuring"
        return None


class SampleClocks:
    """Stamps around each sample of a batch, read back after the batch's synchronise.

    ``stamp(i)`` launches kbench.sm_kernels' stamp_sm0 into slot i (2k before sample k, 2k + 1
    after it); ``mhz(batch)`` turns the batch's stamps into one clock per sample."""

    def __init__(self, capacity: int):
        import torch

        self.torch = torch
        device = torch.cuda.current_device()
        self.programs = torch.cuda.get_device_properties(device).multi_processor_count
        self.slots = torch.zeros(2 * capacity, 2, dtype=torch.int64, device="cuda")
        from kbench.sm_kernels import kernels

        self.kernels = kernels()
        self.base, self.stride = self.slots.data_ptr(), self.slots.stride(0) * self.slots.element_size()
        self.stamp(0)  # load it now, outside any timing
        torch.cuda.synchronize()

    @classmethod
    def create(cls, capacity: int) -> SampleClocks | None:
        try:
            return cls(capacity)
        except Exception:  # noqa: BLE001 - no driver to load the module into: NVML's clock only
            return None

    def stamp(self, slot: int) -> None:
        self.kernels.stamp(self.programs, self.base + slot * self.stride, self.torch.cuda.current_stream().cuda_stream)

    def mhz(self, batch: int) -> list[float]:
        stamps = self.slots[: 2 * batch].cpu().tolist()
        clocks = []
        for k in range(batch):
            (t0, c0), (t1, c1) = stamps[2 * k], stamps[2 * k + 1]
            clocks.append((c1 - c0) / (t1 - t0) * 1e3 if t1 > t0 else float("nan"))
        return clocks  # NaN where SM 0 ran no stamp (kept, so the list lines up with the samples)
