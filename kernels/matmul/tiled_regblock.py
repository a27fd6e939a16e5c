"""fp32 matmul with shared-memory tiles and register blocking: each thread computes a micro-tile.

The CUDA source is ``tiled_regblock.cu`` beside this file, compiled at run time
with NVRTC through ``cupy.RawModule``. A block of (block_m/thread_m) x
(block_n/thread_n) threads owns a block_m x block_n tile of C and walks K
block_k at a time through double-buffered shared tiles; each thread keeps a
thread_m x thread_n micro-tile of C in registers. Global accesses are float4
when K and N are multiples of 4 and the tensors 16-byte aligned, element by
element (still bounds-checked) otherwise. Compare with tiled-smem to see what
register tiling buys:

    kbench run matmul --dtype fp32 --impl tiled-smem,tiled-regblock
    kbench run matmul --dtype fp32 --impl tiled-regblock --param block_m=64 --param block_n=64 \\
        --param block_k=16 --param thread_m=4 --param thread_n=4
"""

from pathlib import Path

from kbench.loader import load_helper
from kbench.registry import Unsupported, implementation

SOURCE = Path(__file__).with_suffix(".cu")

_common = load_helper(Path(__file__).parent / "_cupy_matmul.py")


def smem_bytes(block_m: int, block_n: int, block_k: int) -> int:
    """Two buffers of A (block_k rows of block_m + 4 floats) and of B (block_k rows of block_n floats)."""
    return 2 * block_k * ((block_m + 4) + block_n) * 4


def check_config(block_m: int, block_n: int, block_k: int, thread_m: int, thread_n: int) -> str | None:
    if thread_m < 4 or thread_n < 4 or thread_m % 4 or thread_n % 4:
        return f"thread_m={thread_m}, thread_n={thread_n}: micro-tiles are made of runs of 4 (4, 8, ...)"
    if block_m % thread_m or block_n % thread_n:
        return f"the {thread_m}x{thread_n} micro-tile must divide the {block_m}x{block_n} block tile"
    threads = (block_m // thread_m) * (block_n // thread_n)
    if threads % 32 or not 32 <= threads <= 1024:
        return f"{threads} threads per block: must be a multiple of 32 between 32 and 1024"
    if block_k < 4 or block_k % 4 or (block_m * block_k) % (4 * threads) or (block_k * block_n) % (4 * threads):
        return (f"block_k={block_k}: the {threads} threads must copy the {block_m}x{block_k} A tile and the "
                f"{block_k}x{block_n} B tile in whole float4s each")
    if smem_bytes(block_m, block_n, block_k) > _common.STATIC_SMEM_LIMIT:
        return f"needs {smem_bytes(block_m, block_n, block_k)} bytes of static shared memory (48 KiB at most)"
    return None


def plan(case, a, b, out, block_m, block_n, block_k, thread_m, thread_n) -> dict:
    """The launch for one case (raises Unsupported): kernel name, grid, block, vector path."""
    reason = check_config(block_m, block_n, block_k, thread_m, thread_n)
    if reason:
        raise Unsupported(reason)
    if case.dtype != "fp32":
        raise Unsupported(f"{case.dtype}: tiled-regblock is fp32 only")
    vec = case.k % 4 == 0 and case.n % 4 == 0 and _common.aligned((a, b, out), 16)
    grid = (_common.ceil_div(case.n, block_n), _common.ceil_div(case.m, block_m))
    _common.check_grid(grid)
    threads = (block_m // thread_m) * (block_n // thread_n)
    name = _common.instance_name("matmul_regblock", block_m, block_n, block_k, thread_m, thread_n, vec)
    return {"name": name, "grid": grid, "block": (threads,), "vec": vec}


def explain(case, params) -> dict:
    """`kbench explain matmul --impl tiled-regblock`: the launch for this case, without running it."""
    try:
        p = plan(case, _common.PLACEHOLDER, _common.PLACEHOLDER, _common.PLACEHOLDER, params["block_m"],
                 params["block_n"], params["block_k"], params["thread_m"], params["thread_n"])
    except Unsupported as exc:
        return {"configuration": f"not runnable: {exc}"}
    figures = _common.explain_launch(case, p, SOURCE, (params["block_m"], params["block_n"]))
    figures["micro-tile per thread"] = f"{params['thread_m']} x {params['thread_n']} outputs in registers"
    return figures


@implementation(
    "matmul", "tiled-regblock", backend="cupy", cuda=True, modules=("torch", "cupy"), dtypes=("fp32",),
    params={"block_m": 128, "block_n": 128, "block_k": 8, "thread_m": 8, "thread_n": 8}, unit="cuda-core",
    explain=explain,
    description="fp32 register-blocked matmul (CUDA C++): 128x128 block tile, 8x8 outputs a thread, fp32 FMA",
)
def tiled_regblock(case, inputs, out, block_m, block_n, block_k, thread_m, thread_n):
    import numpy as np

    a, b, c = _common.operands(case, inputs, out)
    p = plan(case, a, b, c, block_m, block_n, block_k, thread_m, thread_n)
    kernel = _common.compiled(str(SOURCE), p["name"])
    args = (*_common.pointer_args(a, b, c), np.int32(case.m), np.int32(case.n), np.int32(case.k))
    run = _common.launcher(kernel, p["grid"], p["block"], args)
    run.config = {
        "block_m": block_m, "block_n": block_n, "block_k": block_k, "thread_m": thread_m, "thread_n": thread_n,
        "vector_loads": p["vec"], "fp32_fma": True,
        **_common.kernel_config(kernel, p["grid"], p["block"]),
    }
    return run
