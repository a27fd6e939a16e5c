"""fp32 matmul, the classic shared-memory tiled kernel: TILE x TILE threads, one output each.

The CUDA source is ``tiled_smem.cu`` beside this file, compiled at run time with
NVRTC through ``cupy.RawModule``. Correct for any M, N, K (every global access
is bounds-checked). ``--param tile=16,32`` sweeps the tile.
"""

from pathlib import Path

from kbench.loader import load_helper
from kbench.registry import Unsupported, implementation

SOURCE = Path(__file__).with_suffix(".cu")
TILES = (8, 16, 32)  # TILE x TILE threads: at most 1024

_common = load_helper(Path(__file__).parent / "_cupy_matmul.py")


def plan(case, a, b, out, tile: int) -> dict:
    """The launch for one case (raises Unsupported): kernel name, grid, block."""
    if tile not in TILES:
        raise Unsupported(f"tile={tile} is not one of {', '.join(map(str, TILES))}")
    if case.dtype != "fp32":
        raise Unsupported(f"{case.dtype}: tiled-smem is fp32 only")
    grid = (_common.ceil_div(case.n, tile), _common.ceil_div(case.m, tile))
    _common.check_grid(grid)
    return {"name": f"matmul_tiled_smem<{tile}>", "grid": grid, "block": (tile, tile)}


def explain(case, params) -> dict:
    """`kbench explain matmul --impl tiled-smem`: the launch for this case, without running it."""
    try:
        p = plan(case, _common.PLACEHOLDER, _common.PLACEHOLDER, _common.PLACEHOLDER, params["tile"])
    except Unsupported as exc:
        return {"configuration": f"not runnable: {exc}"}
    return _common.explain_launch(case, p, SOURCE, (params["tile"], params["tile"]))


@implementation(
    "matmul", "tiled-smem", backend="cupy", cuda=True, modules=("torch", "cupy"), dtypes=("fp32",),
    params={"tile": 16}, unit="cuda-core", explain=explain,
    description="fp32 shared-memory tiled matmul (CUDA C++): TILE x TILE threads, one output each, fp32 FMA",
)
def tiled_smem(case, inputs, out, tile):
    import numpy as np

    a, b, c = _common.operands(case, inputs, out)
    p = plan(case, a, b, c, tile)
    kernel = _common.compiled(str(SOURCE), p["name"])
    args = (*_common.pointer_args(a, b, c), np.int32(case.m), np.int32(case.n), np.int32(case.k))
    run = _common.launcher(kernel, p["grid"], p["block"], args)
    run.config = {"tile": tile, "fp32_fma": True, **_common.kernel_config(kernel, p["grid"], p["block"])}
    return run
