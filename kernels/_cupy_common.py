"""What every CuPy RawKernel implementation needs: the CUDA source (with kbench's own
headers inlined), compilation, the launch on torch's current stream, and the
kernel's resources for each record's config.

A private helper (the loader skips `_` files): kernel files load it with
``kbench.loader.load_helper(Path(__file__).parent.parent / "_cupy_common.py")``.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

HEADERS = Path(__file__).parent / "_cuda"  # kbench's own .cuh files (nvcc: -I kernels/_cuda)
LOCAL_INCLUDE = re.compile(r'^#include "([^"]+)"\s*$', re.MULTILINE)


def source_text(path: Path) -> str:
    """The .cu text with each `#include "x.cuh"` of kernels/_cuda replaced by that file (once each).

    Inlined rather than passed as an include path: CuPy's compile cache is keyed
    on the source text, so an edited header must change the text it sees.
    """
    seen: set[str] = set()

    def expand(text: str) -> str:
        def include(match: re.Match) -> str:
            name = match.group(1)
            if name in seen:
                return ""
            seen.add(name)
            return expand((HEADERS / name).read_text())

        return LOCAL_INCLUDE.sub(include, text)

    return expand(Path(path).read_text())


@lru_cache(maxsize=None)
def compiled(source: str, name: str):
    """One template instance of a .cu (NVRTC once per process, CuPy's disk cache across runs).

    NVRTC gets no include path for CUDA's own headers from here: CuPy adds that
    folder (mma.h for the WMMA kernels) itself.
    """
    import cupy

    module = cupy.RawModule(code=source_text(Path(source)), options=("-std=c++17",), name_expressions=(name,))
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
