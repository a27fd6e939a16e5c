"""The environment fingerprint stored with every result: which GPU, driver, CUDA and library versions."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess

from kbench import __version__
from kbench.loader import PROJECT_ROOT

PACKAGES = ("torch", "triton", "cupy-cuda13x", "cupy-cuda12x", "numpy", "nvidia-ml-py", "typer", "rich")


def package_versions() -> dict:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def git_state() -> dict:
    """The project's commit. $KBENCH_GIT_COMMIT, where set, names it instead: a copy of the
    working tree on a remote machine may carry no .git, or a stale one."""
    if os.environ.get("KBENCH_GIT_COMMIT"):
        return {"commit": os.environ["KBENCH_GIT_COMMIT"], "dirty": None}

    def git(*args) -> str | None:
        done = subprocess.run(["git", "-C", str(PROJECT_ROOT), *args], capture_output=True, text=True, timeout=10)
        return done.stdout.strip() if done.returncode == 0 else None

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no")) if commit else None
    except (OSError, subprocess.SubprocessError):
        commit = dirty = None
    return {"commit": commit, "dirty": dirty}


def nvml_info(uuid: str | None) -> dict:
    """Driver and clocks of the GPU with this UUID, through NVML; {} where NVML is missing."""
    try:
        import pynvml

        pynvml.nvmlInit()
        info = {"driver": _text(pynvml.nvmlSystemGetDriverVersion())}
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            if uuid and _text(pynvml.nvmlDeviceGetUUID(handle)).removeprefix("GPU-") != uuid.removeprefix("GPU-"):
                continue
            info.update(
                sm_clock_max_mhz=pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
                mem_clock_max_mhz=pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM),
                sm_clock_mhz=pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                power_limit_w=pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000,
            )
            break
        return info
    except Exception:  # noqa: BLE001 - no NVML library or no GPU
        return {}


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def gpu_info() -> dict | None:
    """The current CUDA device as torch sees it (imports torch), or None without one."""
    import torch

    if not torch.cuda.is_available():
        return None
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    uuid = str(getattr(props, "uuid", "")) or None
    info = {
        "name": props.name,
        "uuid": uuid,
        "compute_capability": [props.major, props.minor],
        "sm_count": props.multi_processor_count,
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "memory_bytes": props.total_memory,
        "cuda_runtime": torch.version.cuda,
    }
    info.update(nvml_info(uuid))
    return info


def collect(device: str) -> dict:
    """Everything that makes two results comparable or not. ``device`` is "cuda" or "cpu"."""
    return {
        "kbench": __version__,
        "device": device,
        "gpu": gpu_info() if device == "cuda" else None,
        "cpu": platform.processor() or platform.machine(),
        "host": platform.node(),
        "python": platform.python_version(),
        "packages": package_versions(),
        "git": git_state(),
    }
