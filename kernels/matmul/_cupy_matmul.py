"""Shared set-up of the CuPy matmul kernels (tiled-smem, tiled-regblock, wmma, wmma-smem).

A private helper (the loader skips `_` files); kernel files load it with
``kbench.loader.load_helper``. Everything up to :func:`launcher` is plain Python
on tensors' shapes, dtypes and addresses, so it is tested on the CPU.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from kbench.registry import Unsupported

TORCH_DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
MAX_GRID_YZ = 65535
MAX_GRID_X = 2**31 - 1
STATIC_SMEM_LIMIT = 48 * 1024  # a block's static shared memory (dynamic can opt in to more)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def operands(case, inputs, out):
    """A (M x K), B (K x N) and C (M x N): the suite's shapes, row-major contiguous, one dtype."""
    a, b = inputs["a"], inputs["b"]
    m, n, k = case.m, case.n, case.k
    want = TORCH_DTYPES[case.dtype]
    for name, t, shape in (("a", a, (m, k)), ("b", b, (k, n)), ("out", out, (m, n))):
        if tuple(t.shape) != shape:
            raise Unsupported(f"{name} is {tuple(t.shape)}, expected {shape}")
        if str(t.dtype).removeprefix("torch.") != want:
            raise Unsupported(f"{name} is {t.dtype}, expected {want}")
        if not t.is_contiguous():
            raise Unsupported(f"{name} must be row-major contiguous")
    return a, b, out


def aligned(tensors, nbytes: int) -> bool:
    """Every tensor's first element sits at a multiple of ``nbytes``."""
    return all(t.data_ptr() % nbytes == 0 for t in tensors)


def check_grid(grid: tuple) -> None:
    x = grid[0]
    rest = grid[1:]
    if x > MAX_GRID_X or any(v > MAX_GRID_YZ for v in rest):
        raise Unsupported(f"grid {grid} exceeds CUDA's limits (x < 2^31, y and z <= 65535)")


@lru_cache(maxsize=None)
def compiled(source: str, name: str):
    """One template instance of a .cu beside the kernels (NVRTC once per process, CuPy's disk cache across runs).

    NVRTC gets no include path from here: CuPy adds the CUDA headers' folder
    (mma.h for the WMMA kernels) itself.
    """
    import cupy

    module = cupy.RawModule(code=Path(source).read_text(), options=("-std=c++17",), name_expressions=(name,))
    return module.get_function(name)


def smem_optin_limit(tensor) -> int:
    import cupy

    return cupy.cuda.runtime.getDeviceProperties(tensor.device.index or 0)["sharedMemPerBlockOptin"]


def launcher(kernel, grid: tuple, block: tuple, args: tuple, smem: int = 0):
    """The timed closure: one launch on torch's current stream (it changes under CUDA-graph capture)."""
    import cupy
    import torch

    stream = [None, None]  # torch's stream handle, and the CuPy wrapper kept alive with it

    def run():
        current = torch.cuda.current_stream().cuda_stream
        if current != stream[0]:
            wrapper = cupy.cuda.ExternalStream(current)
            wrapper.use()
            stream[0], stream[1] = current, wrapper
        kernel(grid, block, args, shared_mem=smem)

    return run


def kernel_config(kernel, grid: tuple, block: tuple, dynamic_smem: int = 0) -> dict:
    """What run.config reports about the compiled kernel (registers, spills, shared memory)."""
    threads = 1
    for v in block:
        threads *= v
    return {
        "registers_per_thread": kernel.num_regs,
        "local_bytes_per_thread": kernel.local_size_bytes,  # spills (and any local arrays)
        "static_smem_bytes": kernel.shared_size_bytes,
        "dynamic_smem_bytes": dynamic_smem,
        "grid": list(grid),
        "threads_per_block": threads,
    }


def pointer_args(*tensors):
    import numpy as np

    return tuple(np.uint64(t.data_ptr()) for t in tensors)
