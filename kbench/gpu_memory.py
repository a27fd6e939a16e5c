"""Room on the GPU for one more worker's case, read by kbench's own process through NVML (no CUDA
context; every process's use counted).

Under ``--interleave`` every implementation's worker holds its case until the case's sampling ends: the
inputs, the harness's copies of them, the sealed reference, the closure's own buffers. For a large case a
dozen of them run the GPU out of memory. :class:`Room` measures what each worker kept (free memory
before its job was prepared, less after its warm-up) and what it needed only for a while on top of that
(its check's float64 references and trial inputs, given back before the warm-up: the worker's own peak
less what it holds after the warm-up, as torch's allocator counted them), and says whether the next one
still fits; the runner samples the workers it has in turns first where it does not.
"""

from __future__ import annotations

from typing import Callable

# The next worker must find free the most any worker of the case kept so far, times GROWTH (its own
# buffers may be larger), plus the most one needed on top of that for its check, plus SPARE (the
# allocator's rounding, what torch's counters do not see).
GROWTH = 1.25
SPARE_BYTES = 2 << 30


def free_bytes(uuid: str | None) -> int | None:
    """Free memory of the GPU with this UUID (NVML), or None where that cannot be read. Without a UUID
    (no worker has said which GPU it uses yet) the host's only GPU, where it has one."""
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        for i in range(count):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetUUID(handle)
            name = name.decode() if isinstance(name, bytes) else str(name)
            if (not uuid and count == 1) or (uuid and name.removeprefix("GPU-") == uuid.removeprefix("GPU-")):
                return int(pynvml.nvmlDeviceGetMemoryInfo(handle).free)
    except Exception:  # noqa: BLE001 - no NVML library, no such GPU
        return None
    return None


class Room:
    """What the workers of one case took, and whether the GPU has room for one more."""

    def __init__(self, read: Callable[[str | None], int | None] = free_bytes):
        self.read = read
        self.largest = 0  # bytes: the most one worker kept
        self.transient = 0  # bytes: the most one worker needed on top of what it kept (its check's peak)
        self.free: int | None = None  # bytes free at the last look
        self._before: int | None = None

    def before_job(self, uuid: str | None) -> None:
        self._before = self.read(uuid)

    def after_warm_up(self, uuid: str | None, gpu_peak_bytes: int = 0, gpu_held_bytes: int = 0) -> None:
        """After a worker's warm-up: what it kept (NVML), and how far its peak (torch's most reserved
        during the job) was above what it holds now, as the worker reported them (:func:`worker_figures`)."""
        now = self.read(uuid)
        if now is not None and self._before is not None:
            self.largest = max(self.largest, self._before - now)
        self.transient = max(self.transient, gpu_peak_bytes - gpu_held_bytes)

    def fits_another(self, uuid: str | None) -> bool:
        """Whether one more worker like the largest so far fits (True where nothing was measured)."""
        self.free = self.read(uuid)
        return (self.free is None or not (self.largest or self.transient)
                or self.free >= GROWTH * self.largest + self.transient + SPARE_BYTES)

    def describe(self) -> str:
        free = "?" if self.free is None else f"{self.free / 2**30:.1f}"
        peak = f" (and {self.transient / 2**30:.1f} GiB more while it checks)" if self.transient else ""
        return (f"{free} GiB of GPU memory free, an implementation's worker taking up to "
                f"{self.largest / 2**30:.1f} GiB{peak}")


def worker_figures() -> dict:
    """In a worker, after its warm-up: its peak of GPU memory reserved by torch during this job and what
    it reserves now (bytes), for :meth:`Room.after_warm_up`; empty where this process has not used CUDA."""
    import torch

    if not torch.cuda.is_initialized():
        return {}
    return {"gpu_peak_bytes": int(torch.cuda.max_memory_reserved()), "gpu_held_bytes": int(torch.cuda.memory_reserved())}


def reset_worker_peak() -> None:
    """In a worker, at a job's start: its peak counts from here (a worker serves several jobs)."""
    import torch

    if torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats()
