"""SM clock readings through NVML (nvidia-ml-py), to catch throttled measurements.

nvbench discards samples taken while the SM clock is under 75 % of normal;
kbench keeps them but records the clock and warns.
"""

from __future__ import annotations

SAG_FRACTION = 0.75


class ClockMonitor:
    """Reads the SM clock of the GPU with a given UUID; every method is a no-op without NVML."""

    def __init__(self, uuid: str | None):
        self.readings: list[int] = []
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
        except Exception:  # noqa: BLE001
            pass

    def summary(self) -> dict | None:
        if not self.readings:
            return None
        ordered = sorted(self.readings)
        return {
            "sm_mhz_min": ordered[0],
            "sm_mhz_median": ordered[len(ordered) // 2],
            "sm_mhz_max_rated": self.max_mhz,
        }

    def warning(self) -> str | None:
        if not self.readings or not self.max_mhz:
            return None
        low = min(self.readings)
        if low < SAG_FRACTION * self.max_mhz:
            return f"SM clock sagged to {low} MHz (< {SAG_FRACTION:.0%} of {self.max_mhz} MHz) while measuring"
        return None
