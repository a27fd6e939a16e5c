"""Measure this GPU's real ceilings, and keep them per device fingerprint.

Three ceilings, each the median of CUDA-event samples (kbench.timing, L2 flushed):
- memory: a device-to-device copy of 2 GiB, counting bytes read plus bytes written;
- fp16 tensor: an 8192³ fp16 matrix product through torch.matmul (cuBLAS), random data;
- fp32 CUDA cores: a Triton kernel of independent fused multiply-adds in registers.
`kbench roofline` shows them beside the datasheet roofs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from kbench.errors import UserError

CALIBRATION_DIR = Path("results") / "calibration"
FMA_ITERATIONS = 4096  # per element and chain: enough arithmetic to hide the one load and store
FMA_CHAINS = 4  # independent accumulators per element, so FMAs issue back to back


def fingerprint(gpu: dict) -> str:
    """A file name for this device: model, UUID and driver (a new driver may move the ceilings)."""
    raw = f"{gpu.get('name', 'gpu')}-{gpu.get('uuid') or 'no-uuid'}-{gpu.get('driver', 'no-driver')}"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", raw)


def path_for(gpu: dict, folder: Path = CALIBRATION_DIR) -> Path:
    return Path(folder) / f"{fingerprint(gpu)}.json"


def save(calibration: dict, folder: Path = CALIBRATION_DIR) -> Path:
    from kbench.results import write_json_lines_atomic  # the same temp-file, fsync, rename as baselines

    path = path_for(calibration["gpu"], folder)
    write_json_lines_atomic(path, [calibration])
    return path


def load_for(gpu: dict | None, folder: Path = CALIBRATION_DIR) -> dict | None:
    """The stored calibration of this GPU (same UUID, else same model and driver), or None."""
    if not gpu or not Path(folder).is_dir():
        return None
    exact = path_for(gpu, folder)
    candidates = [exact] if exact.exists() else sorted(Path(folder).glob("*.json"))
    for path in candidates:
        try:
            data = json.loads(path.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            continue
        other = data.get("gpu") or {}
        if other.get("uuid") == gpu.get("uuid") or (
                other.get("name") == gpu.get("name") and other.get("driver") == gpu.get("driver")):
            return data
    return None


def _fma_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def fma_chains(out, ITERATIONS: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        a = offs.to(tl.float32) * 1e-9
        b = a + 1.0
        c = a + 2.0
        d = a + 3.0
        for _ in range(ITERATIONS):  # 4 independent chains of a*0.999 + 1e-3
            a = a * 0.999 + 1e-3
            b = b * 0.999 + 1e-3
            c = c * 0.999 + 1e-3
            d = d * 0.999 + 1e-3
        tl.store(out + offs, a + b + c + d)  # keeps the chains alive

    return fma_chains


def _copy_tbs(settings, uuid) -> tuple[float, dict]:
    """Device-to-device copy of 2 GiB of fp16, bytes read + written per second (TB/s)."""
    import torch

    from kbench import timing

    src = torch.randn(1 << 30, device="cuda", dtype=torch.float16)
    dst = torch.empty_like(src)
    m = timing.measure_cuda(lambda: dst.copy_(src), settings, uuid)
    return 2 * src.numel() * src.element_size() / (m["stats"]["median"] / 1e3) / 1e12, m


def _matmul_tflops(settings, uuid, size: int = 8192) -> tuple[float, dict]:
    import torch

    from kbench import timing

    a, b = (torch.randn(size, size, device="cuda", dtype=torch.float16) for _ in range(2))
    c = torch.empty(size, size, device="cuda", dtype=torch.float16)
    m = timing.measure_cuda(lambda: torch.matmul(a, b, out=c), settings, uuid)
    return 2 * size**3 / (m["stats"]["median"] / 1e3) / 1e12, m


def _fma_tflops(settings, uuid) -> tuple[float, dict]:
    import torch

    from kbench import timing

    kernel = _fma_kernel()
    block = 1024
    programs = 132 * 64  # several waves on any GPU: every SM kept busy
    result = torch.empty(programs * block, device="cuda", dtype=torch.float32)
    m = timing.measure_cuda(lambda: kernel[(programs,)](result, ITERATIONS=FMA_ITERATIONS, BLOCK=block),
                            settings, uuid)
    return 2 * FMA_CHAINS * FMA_ITERATIONS * result.numel() / (m["stats"]["median"] / 1e3) / 1e12, m


def measure(settings=None, announce=None) -> dict:
    """Run the three measurements on the current CUDA device, one after the other (each frees its
    buffers before the next allocates). Needs torch with CUDA, and triton. ``announce()`` is called
    once a device is found, before the first measurement (so a machine without one hears only why)."""
    import torch

    from kbench import envinfo, timing

    if not torch.cuda.is_available():
        raise UserError("kbench calibrate needs a CUDA device (none is visible here)")
    if announce:
        announce()
    settings = settings or timing.Settings()
    gpu = envinfo.gpu_info()
    uuid = gpu.get("uuid")
    out = {"gpu": gpu, "packages": envinfo.package_versions(), "clock": {}, "method": {
        "hbm_tbs": "y.copy_(x), 2 GiB fp16, bytes read + written",
        "fp16_tensor_tflops": "torch.matmul 8192^3 fp16, random data",
        "fp32_tflops": f"Triton, {FMA_CHAINS} independent FMA chains x {FMA_ITERATIONS} per element",
    }}
    for key, name, run in (("hbm_tbs", "copy", _copy_tbs), ("fp16_tensor_tflops", "matmul", _matmul_tflops),
                           ("fp32_tflops", "fma", _fma_tflops)):
        out[key], m = run(settings, uuid)
        out["clock"][name] = m.get("clock")
    return out
