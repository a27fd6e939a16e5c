"""Shared set-up of the CuPy matmul kernels (tiled-smem, tiled-regblock, wmma, wmma-smem).

A private helper (the loader skips `_` files); kernel files load it with
``kbench.loader.load_helper``. What is here is plain Python on tensors' shapes,
dtypes and addresses, so it is tested on the CPU; compiling and launching come
from ``kernels/_cupy_common.py``, shared with the attention kernels.
"""

from __future__ import annotations

from pathlib import Path

from kbench.dtypes import TORCH_NAMES
from kbench.loader import load_helper
from kbench.registry import Unsupported

_cupy = load_helper(Path(__file__).parent.parent / "_cupy_common.py")
compiled, smem_optin_limit, launcher = _cupy.compiled, _cupy.smem_optin_limit, _cupy.launcher
kernel_config, pointer_args, ceil_div = _cupy.kernel_config, _cupy.pointer_args, _cupy.ceil_div
max_active_clusters, instance_name = _cupy.max_active_clusters, _cupy.instance_name

MAX_GRID_YZ = 65535
MAX_GRID_X = 2**31 - 1
STATIC_SMEM_LIMIT = 48 * 1024  # a block's static shared memory (dynamic can opt in to more)


def operands(case, inputs, out):
    """A (M x K), B (K x N) and C (M x N): the suite's shapes, row-major contiguous, one dtype."""
    a, b = inputs["a"], inputs["b"]
    m, n, k = case.m, case.n, case.k
    want = TORCH_NAMES[case.dtype]
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


PLACEHOLDER = _cupy.PLACEHOLDER  # stands for an operand in `kbench explain`


def explain_launch(case, plan: dict, source: Path, tile: tuple[int, int], dynamic_smem: int = 0,
                   arch: str = "sm_90") -> dict:
    """Launch geometry, global traffic of a tile_m x tile_n tiling, ptxas resources and occupancy on an H200."""
    from kbench.dtypes import ELEMENT_BYTES

    blocks, threads = _cupy.launch_size(plan)
    tile_m, tile_n = tile
    e = ELEMENT_BYTES[case.dtype]
    a_reads, b_reads = ceil_div(case.n, tile_n), ceil_div(case.m, tile_m)
    moved = e * (case.m * case.k * a_reads + case.k * case.n * b_reads + case.m * case.n)
    fewest = e * (case.m * case.k + case.k * case.n + case.m * case.n)
    return {
        "kernel": plan["name"],
        "grid": f"{tuple(plan['grid'])} = {blocks:,} blocks of {threads} threads ({max(1, threads // 32)} warps)",
        "tile of C per block": f"{tile_m} x {tile_n}",
        "global loads of the tiling": f"A read {a_reads}x, B read {b_reads}x: {moved:,} bytes, "
                                      f"{moved / fewest:.1f}x the fewest {fewest:,} (L2 serves most re-reads)",
        "arithmetic intensity of those loads": f"{2.0 * case.m * case.n * case.k / moved:.1f} FLOP/byte",
        **_cupy.resource_figures(source, plan["name"], blocks, threads, dynamic_smem, arch),
    }
