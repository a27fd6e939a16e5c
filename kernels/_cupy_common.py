"""What every CuPy RawKernel implementation needs: the CUDA source (with kbench's own
headers inlined), compilation, the launch on torch's current stream, and the
kernel's resources for each record's config.

A private helper (the loader skips `_` files): kernel files load it with
``kbench.loader.load_helper(Path(__file__).parent.parent / "_cupy_common.py")``.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from pathlib import Path

HEADERS = Path(__file__).parent / "_cuda"  # kbench's own .cuh files (nvcc: -I kernels/_cuda)
LOCAL_INCLUDE = re.compile(r'^#include "([^"]+)"\s*$', re.MULTILINE)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


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


def crt_include_candidates() -> list[Path]:
    """Folders that may hold CUDA's `crt/mma.h`, most specific first.

    CuPy points NVRTC at CUDA's headers, but with pip-installed CUDA 13 that folder
    (nvidia/cu13/include, from nvidia-cuda-runtime) has mma.h without the crt/ it
    includes: those come in the separate nvidia-cuda-crt wheel. A full toolkit, that
    wheel, or the CUDA headers Triton bundles all have it.
    """
    import os

    found = []
    for var in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(var):
            found.append(Path(os.environ[var]) / "include")
    found.append(Path("/usr/local/cuda/include"))
    try:
        import nvidia  # the namespace package of NVIDIA's CUDA wheels

        for root in nvidia.__path__:
            found += [Path(root) / "cu13" / "include", Path(root) / "cuda_runtime" / "include"]
    except ImportError:
        pass
    try:
        import importlib.util

        spec = importlib.util.find_spec("triton")
        if spec and spec.origin:
            found.append(Path(spec.origin).parent / "backends" / "nvidia" / "include")
    except (ImportError, ValueError):
        pass
    return found


def crt_include() -> Path:
    """The first folder holding crt/mma.h, or an error that says how to get one."""
    for folder in crt_include_candidates():
        if (folder / "crt" / "mma.h").is_file():
            return folder
    raise RuntimeError("the WMMA kernels need CUDA's crt/mma.h, found in none of CUDA_PATH, CUDA_HOME, "
                       "/usr/local/cuda, the nvidia-cuda-crt wheel or Triton's bundled headers: "
                       "pip install nvidia-cuda-crt (matching your CUDA major version) or set CUDA_PATH")


def instance_name(template: str, *args) -> str:
    """The name expression of one instance of a templated kernel, as NVRTC and nvcc take it:
    ``template<a, b, ...>``, a bool argument (Python's or NumPy's) spelled true or false."""
    spelled = (str(a).lower() if str(a) in ("True", "False") else str(a) for a in args)
    return f"{template}<{', '.join(spelled)}>"


@lru_cache(maxsize=None)
def compiled_module(source: str, name: str, arch: str | None = None):
    """The cupy.RawModule of one template instance of a .cu (NVRTC once per process, CuPy's disk
    cache across runs): its kernel (compiled) and its globals (a __constant__ array) come from it.

    CuPy adds the include folder of CUDA's own headers; a source that includes
    <mma.h> also gets a folder with the crt/ headers mma.h needs (see crt_include).
    ``arch`` (e.g. "sm_90a", for wgmma and setmaxnreg) is added as NVRTC's -arch: CuPy appends its
    own -arch=sm_XY of the device after it, and NVRTC (13.0) then builds for the arch-specific
    target, the one that has the features (seen on NVRTC's cubin: wgmma assembled with both given).
    """
    import cupy

    text = source_text(Path(source))
    # -lineinfo: source lines for compute-sanitizer's reports and ncu's source view (no change to the code).
    options = ("-std=c++17", "-lineinfo")
    if arch:
        options += (f"-arch={arch}",)
    if "#include <mma.h>" in text:
        options += (f"-I{crt_include()}",)
    return cupy.RawModule(code=text, options=options, name_expressions=(name,))


def compiled(source: str, name: str, arch: str | None = None):
    """The kernel of one template instance of a .cu (see compiled_module)."""
    return compiled_module(source, name, arch).get_function(name)


class _Placeholder:
    """Stands for an operand in `kbench explain`: 256-byte aligned, as torch allocates, never read."""

    def data_ptr(self) -> int:
        return 0


PLACEHOLDER = _Placeholder()


def smem_optin_limit(tensor) -> int:
    import cupy

    return cupy.cuda.runtime.getDeviceProperties(tensor.device.index or 0)["sharedMemPerBlockOptin"]


def cupy_view(torch_stream):
    """CuPy's wrapper of a torch stream (CuPy neither owns nor destroys it). CuPy 14 builds it with
    ``Stream.from_external`` (the CUDA stream protocol) and deprecates ``ExternalStream``, which older
    CuPy has alone."""
    import cupy

    if hasattr(cupy.cuda.Stream, "from_external"):
        return cupy.cuda.Stream.from_external(torch_stream)
    return cupy.cuda.ExternalStream(torch_stream.cuda_stream)


def on_torch_stream(body):
    """The timed closure: ``body()`` with CuPy's current stream set to torch's current stream
    (which changes under CUDA-graph capture), so kbench's events and graphs cover CuPy's work."""
    import torch

    stream = [None, None]  # torch's stream handle, and the CuPy wrapper kept alive with it

    def run():
        current = torch.cuda.current_stream()
        if current.cuda_stream != stream[0]:
            wrapper = cupy_view(current)
            wrapper.use()
            stream[0], stream[1] = current.cuda_stream, wrapper
        return body()

    return run


def launcher(kernel, grid: tuple, block: tuple, args: tuple, smem: int = 0):
    """The timed closure: one launch on torch's current stream."""
    return on_torch_stream(lambda: kernel(grid, block, args, shared_mem=smem))


def max_active_clusters(kernel, cluster: int, threads: int, smem: int = 0) -> int:
    """How many clusters of ``cluster`` blocks of ``kernel`` (compiled with ``__cluster_dims__``) the GPU
    holds at once, by the driver's cuOccupancyMaxActiveClusters. A cluster's blocks must share one GPC,
    and SMs of a GPC that make no whole cluster stay idle, so this can be fewer than SMs / ``cluster``:
    a persistent grid sized by the SM count would leave its last clusters waiting for a second wave."""
    import ctypes

    class LaunchConfig(ctypes.Structure):  # CUlaunchConfig
        _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_mem_bytes", ctypes.c_uint),
                    ("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p), ("num_attrs", ctypes.c_uint)]

    try:
        query = ctypes.CDLL("libcuda.so.1").cuOccupancyMaxActiveClusters
    except (OSError, AttributeError) as exc:
        raise RuntimeError(f"cuOccupancyMaxActiveClusters is not in the CUDA driver library: {exc}") from None
    query.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.POINTER(LaunchConfig)]
    query.restype = ctypes.c_int
    # The cluster shape comes from the kernel's own __cluster_dims__ (no launch attribute): a grid of one cluster.
    config = LaunchConfig((ctypes.c_uint * 3)(cluster, 1, 1), (ctypes.c_uint * 3)(threads, 1, 1), smem, None, None, 0)
    count = ctypes.c_int(0)
    function = kernel.kernel.ptr  # a RawKernel's compiled Function holds the CUfunction handle
    status = query(ctypes.byref(count), ctypes.c_void_p(function), ctypes.byref(config))
    if status != 0:
        raise RuntimeError(f"cuOccupancyMaxActiveClusters failed with CUresult {status} ({cluster} blocks of "
                           f"{threads} threads, {smem} bytes of shared memory)")
    return count.value


def kernel_config(kernel, grid: tuple, block: tuple, dynamic_smem: int = 0) -> dict:
    """What run.config reports about the compiled kernel (registers, spills, shared memory)."""
    threads = math.prod(block)
    return {
        "registers_per_thread": kernel.num_regs,
        "local_bytes_per_thread": kernel.local_size_bytes,  # spills (and any local arrays)
        "static_smem_bytes": kernel.shared_size_bytes,
        "dynamic_smem_bytes": dynamic_smem,
        "grid": list(grid),
        "threads_per_block": threads,
    }


def launch_size(plan: dict) -> tuple[int, int]:
    """(blocks, threads per block) of a plan's grid and block."""
    return math.prod(plan["grid"]), math.prod(plan["block"])


def resource_figures(source: Path, name: str, blocks: int, threads: int, dynamic_smem: int = 0,
                     arch: str = "sm_90") -> dict:
    """`kbench explain`'s ptxas figures of one kernel instance: registers, spills, shared memory,
    blocks per SM and waves on an H200 (or why they are unknown here)."""
    from kbench.kernel_resources import from_nvcc, launch_figures

    try:
        res = from_nvcc(source, name, arch=arch)
    except RuntimeError as exc:
        return {"registers": f"could not compile: {exc}"}
    if res is None:
        return {"registers": "unknown here (no nvcc): run on the GPU, where each record's config has them"}
    smem = dynamic_smem + res["static_smem_bytes"]
    shared = (f"{smem:,} bytes ({res['static_smem_bytes']:,} static, {dynamic_smem:,} dynamic)" if dynamic_smem
              else None)
    return launch_figures(res, blocks, threads, smem, shared)


def pointer_args(*tensors):
    import numpy as np

    return tuple(np.uint64(t.data_ptr()) for t in tensors)
