"""fp16/bf16 matmul with the WMMA API, one warp per 16x16 output tile, fragments straight from global memory.

The floor of tensor-core matmuls: no data is shared between warps. The CUDA
source is ``wmma.cu`` beside this file, compiled at run time with NVRTC through
``cupy.RawModule`` (it includes <mma.h>). A block holds warps_m x warps_n warps
(each its own 16x16 tile of C). Fragments are loaded directly from global
memory when K % 8 == 0, N % 8 == 0, the tensors are aligned (32 bytes for A
and B, 16 for C) and the tile lies inside the matrices; edge tiles and other
shapes go through zero-padded shared memory, so any M, N, K works.
"""

from pathlib import Path

from kbench.loader import load_helper
from kbench.registry import Unsupported, implementation

SOURCE = Path(__file__).with_suffix(".cu")

_common = load_helper(Path(__file__).parent / "_cupy_matmul.py")


def check_config(warps_m: int, warps_n: int) -> str | None:
    if warps_m < 1 or warps_n < 1 or warps_m * warps_n > 32:
        return f"warps_m={warps_m} x warps_n={warps_n}: between 1 and 32 warps per block"
    return None


def direct_loads(case, a, b, out) -> bool:
    """Whether whole-tile load_matrix_sync from global memory (and 16-byte stores of C) are valid."""
    return case.k % 8 == 0 and case.n % 8 == 0 and _common.aligned((a, b), 32) and _common.aligned((out,), 16)


def plan(case, a, b, out, warps_m: int, warps_n: int) -> dict:
    """The launch for one case (raises Unsupported): kernel name, grid, block, direct-load flag."""
    reason = check_config(warps_m, warps_n)
    if reason:
        raise Unsupported(reason)
    if case.dtype not in ("fp16", "bf16"):
        raise Unsupported(f"{case.dtype}: wmma takes fp16 or bf16 inputs")
    grid = (_common.ceil_div(case.n, 16 * warps_n), _common.ceil_div(case.m, 16 * warps_m))
    _common.check_grid(grid)
    name = _common.instance_name("matmul_wmma", warps_m, warps_n, case.dtype == "bf16")
    return {"name": name, "grid": grid, "block": (32 * warps_m * warps_n,), "direct": direct_loads(case, a, b, out)}


def explain(case, params) -> dict:
    """`kbench explain matmul --impl wmma`: the launch for this case, without running it."""
    try:
        p = plan(case, _common.PLACEHOLDER, _common.PLACEHOLDER, _common.PLACEHOLDER,
                 params["warps_m"], params["warps_n"])
    except Unsupported as exc:
        return {"configuration": f"not runnable: {exc}"}
    figures = _common.explain_launch(case, p, SOURCE, (16 * params["warps_m"], 16 * params["warps_n"]))
    figures["fragment loads"] = ("load_matrix_sync straight from global memory" if p["direct"]
                                 else "staged through shared memory (K or N not a multiple of 8)")
    return figures


@implementation(
    "matmul", "wmma", backend="cupy", cuda=True, modules=("torch", "cupy"), min_cc=(8, 0),
    dtypes=("fp16", "bf16"), params={"warps_m": 2, "warps_n": 2}, explain=explain,
    description="WMMA (CUDA C++), one warp per 16x16 tile, fragments loaded from global memory; fp32 accumulate",
)
def wmma(case, inputs, out, warps_m, warps_n):
    import numpy as np

    a, b, c = _common.operands(case, inputs, out)
    p = plan(case, a, b, c, warps_m, warps_n)
    kernel = _common.compiled(str(SOURCE), p["name"])
    args = (*_common.pointer_args(a, b, c), np.int32(case.m), np.int32(case.n), np.int32(case.k),
            np.int32(1 if p["direct"] else 0))
    run = _common.launcher(kernel, p["grid"], p["block"], args)
    run.config = {"warps_m": warps_m, "warps_n": warps_n, "direct_loads": p["direct"],
                  **_common.kernel_config(kernel, p["grid"], p["block"])}
    return run
