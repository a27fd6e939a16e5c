"""fp16/bf16 matmul, block-tiled WMMA: shared-memory tiles filled by a multi-stage cp.async pipeline.

The CUDA source is ``wmma_smem.cu`` beside this file, compiled at run time with
NVRTC through ``cupy.RawModule`` (it includes <mma.h>). A block of ``warps``
warps (2 x warps/2) owns a block_m x block_n tile of C; each warp a grid of
16x16 fp32 fragments (64x64 with the defaults: 4 warps, 128 x 128 x 64 tiles,
3 stages). A and B tiles (block_k deep, rows padded by 16 bytes) stream through
``stages`` shared buffers with 16-byte cp.async copies that zero-fill past the
matrix edges. When K or N is not a multiple of 8 (or a tensor is not 16-byte
aligned) the same kernel is built
with element-by-element bounds-checked copies instead: slow, but any M, N, K
works. Blocks are grouped ``group_m`` block rows at a time for L2 reuse.

The fragments are loaded with the PTX instruction ``wmma.load`` on the ``.shared`` state space
(``--param loads=ptx``, the default); ``loads=api`` uses the C++ API's ``load_matrix_sync`` instead:
the same instruction and fragments, but for bf16 nvcc 13.0 compiles the API's loads to generic loads
(LD.E, 64 a k-tile of the default warp tile) where the PTX form gives ldmatrix (16 LDSM, as fp16 has
either way). On an H200 that took bf16 from about 0.31x to 0.43-0.47x cuBLAS (docs/performance.md).

``--param prefetch=1`` loads the next k16 step's fragments while this step's ``mma_sync`` run (two sets
of fragment registers), across k-tiles too: the barrier that makes the next tile visible moves before
the current tile's last step. ``--param min_blocks=N`` asks ptxas for N blocks an SM
(``__launch_bounds__``'s second argument): with 4 warps, 3 caps a thread at 168 registers for 12 warps
an SM instead of 8 (48 bytes spilled with 32-deep k-tiles and no prefetch, 496 at the default tile); on
an H200 the 32-deep form ran 7-9 % slower than with two blocks (docs/performance.md).

    kbench run matmul --m 4096 --n 4096 --k 4096 --dtype fp16,bf16 --impl cublas,wmma-smem \\
        --param block_n=128,256 --param stages=3,4 --param min_blocks=1,3
"""

from pathlib import Path

from kbench.loader import load_helper
from kbench.registry import Unsupported, implementation

SOURCE = Path(__file__).with_suffix(".cu")
EPILOGUE_BYTES_PER_WARP = 16 * 16 * 4  # one fp32 16x16 fragment
# __launch_bounds__'s minimum blocks an SM: ptxas caps registers near 65536 / (threads x min_blocks).
# 3 with the default 4 warps: 168 registers, three blocks (12 warps) an SM instead of two.
MIN_BLOCKS_CHOICES = (1, 2, 3, 4)
MAX_FRAGMENTS_PER_WARP = 16  # 16 fp32 16x16 accumulators = 128 registers a thread (64x64 warp tile)

_common = load_helper(Path(__file__).parent / "_cupy_matmul.py")


def warp_grid(warps: int) -> tuple[int, int]:
    """(warps_m, warps_n): two warp rows when there are at least two warps."""
    warps_m = 2 if warps >= 2 else 1
    return warps_m, warps // warps_m


def smem_bytes(block_m: int, block_n: int, block_k: int, warps: int, stages: int) -> int:
    """Dynamic shared memory: the pipeline's A and B buffers (rows padded by 8 elements), or the epilogue's scratch."""
    pipeline = stages * (block_m * (block_k + 8) + block_k * (block_n + 8)) * 2
    return max(pipeline, warps * EPILOGUE_BYTES_PER_WARP)


def check_config(block_m: int, block_n: int, block_k: int, warps: int, stages: int, group_m: int) -> str | None:
    if warps not in (1, 2, 4, 8, 16):
        return f"warps={warps} is not one of 1, 2, 4, 8, 16"
    warps_m, warps_n = warp_grid(warps)
    if block_m <= 0 or block_m % (16 * warps_m):
        return f"block_m={block_m} must give each of the {warps_m} warp rows a multiple of 16 rows"
    if block_n <= 0 or block_n % (16 * warps_n):
        return f"block_n={block_n} must give each of the {warps_n} warp columns a multiple of 16 columns"
    fragments = (block_m // warps_m // 16) * (block_n // warps_n // 16)
    if fragments > MAX_FRAGMENTS_PER_WARP:
        return (f"a {block_m // warps_m}x{block_n // warps_n} warp tile is {fragments} accumulator fragments "
                f"({8 * fragments} registers a thread): at most {MAX_FRAGMENTS_PER_WARP}, or it spills")
    if block_k <= 0 or block_k % 16:
        return f"block_k={block_k} must be a positive multiple of 16"
    if stages < 2:
        return f"stages={stages}: the pipeline needs at least 2"
    if group_m < 1:
        return f"group_m={group_m} must be at least 1"
    threads = 32 * warps
    if (block_m * block_k // 8) % threads or (block_k * block_n // 8) % threads:
        return (f"the {threads} threads must copy the {block_m}x{block_k} A tile and the {block_k}x{block_n} "
                f"B tile in whole 16-byte chunks each")
    if threads % (block_k // 8) or threads % (block_n // 8):
        # AsyncCopies: a thread copies one column of 16-byte chunks, its rows a fixed stride apart.
        return (f"the {threads} threads must be a multiple of the 16-byte chunks in a row of A ({block_k // 8}) "
                f"and of B ({block_n // 8})")
    return None


def async_copies(case, a, b, out) -> bool:
    """Whether 16-byte cp.async copies (and 16-byte stores of C) are valid for this case."""
    return case.k % 8 == 0 and case.n % 8 == 0 and _common.aligned((a, b, out), 16)


def plan(case, a, b, out, block_m, block_n, block_k, warps, stages, group_m, smem_limit=None, loads="ptx",
         min_blocks=1, prefetch=0) -> dict:
    """The launch for one case (raises Unsupported): kernel name, grid, block, shared memory, copy path."""
    reason = check_config(block_m, block_n, block_k, warps, stages, group_m)
    if reason:
        raise Unsupported(reason)
    if case.dtype not in ("fp16", "bf16"):
        raise Unsupported(f"{case.dtype}: wmma-smem takes fp16 or bf16 inputs")
    smem = smem_bytes(block_m, block_n, block_k, warps, stages)
    if smem_limit is not None and smem > smem_limit:
        raise Unsupported(f"needs {smem / 1024:.1f} KiB of shared memory per block; this GPU allows "
                          f"{smem_limit / 1024:.1f} KiB (sharedMemPerBlockOptin)")
    use_async = async_copies(case, a, b, out)
    warps_m, warps_n = warp_grid(warps)
    grid = (_common.ceil_div(case.m, block_m) * _common.ceil_div(case.n, block_n),)
    _common.check_grid(grid)
    name = _common.instance_name("matmul_wmma_smem", block_m, block_n, block_k, warps_m, warps_n, stages,
                                 case.dtype == "bf16", use_async, loads == "ptx", min_blocks,
                                 bool(prefetch))
    return {"name": name, "grid": grid, "block": (32 * warps,), "smem": smem, "async": use_async,
            "warps_m": warps_m, "warps_n": warps_n}


def explain(case, params) -> dict:
    """`kbench explain matmul --impl wmma-smem`: the launch for this case, without running it."""
    try:
        p = plan(case, _common.PLACEHOLDER, _common.PLACEHOLDER, _common.PLACEHOLDER, params["block_m"],
                 params["block_n"], params["block_k"], params["warps"], params["stages"], params["group_m"],
                 loads=params["loads"], min_blocks=params["min_blocks"], prefetch=params["prefetch"])
    except Unsupported as exc:
        return {"configuration": f"not runnable: {exc}"}
    figures = _common.explain_launch(case, p, SOURCE, (params["block_m"], params["block_n"]), p["smem"])
    figures["copies"] = ("16-byte cp.async, " if p["async"] else "element-wise (K or N not a multiple of 8), ") + \
        f"{params['stages']} stages; warp tile {params['block_m'] // p['warps_m']} x {params['block_n'] // p['warps_n']}"
    if params["min_blocks"] > 1:
        figures["register cap"] = (f"__launch_bounds__({32 * params['warps']}, {params['min_blocks']}): at most "
                                   f"{65536 // (32 * params['warps'] * params['min_blocks']) // 8 * 8} registers a thread")
    figures["fragment loads"] = ("wmma.load.shared (PTX)" if params["loads"] == "ptx" else
                                 "wmma::load_matrix_sync (C++ API; generic loads for bf16 under nvcc 13.0)") + (
        ", the next k16 step's loaded during this one's mma_sync (two sets of fragments)" if params["prefetch"] else
        ", each k16 step's loaded before its mma_sync")
    return figures


@implementation(
    "matmul", "wmma-smem", backend="cupy", cuda=True, modules=("torch", "cupy"), min_cc=(8, 0),
    dtypes=("fp16", "bf16"),
    # 4 warps of 64x64 (2 x 2): 8 ldmatrix.x4 per 32 mma.sync instead of 8 warps of 64x32's 6 per 16.
    # 64-deep k-tiles in 3 stages (two blocks an SM) with the next step's fragments prefetched: H200,
    # bf16 4096^3, 0.47x cuBLAS against 0.44x for 32-deep tiles in 4 stages (docs/performance.md).
    params={"block_m": 128, "block_n": 128, "block_k": 64, "warps": 4, "stages": 3, "group_m": 8, "loads": "ptx",
            "min_blocks": 1, "prefetch": 1},
    allowed={"loads": ("api", "ptx"), "min_blocks": MIN_BLOCKS_CHOICES, "prefetch": (0, 1)}, explain=explain,
    description="block-tiled WMMA (CUDA C++): 128x128x64 tiles, 4 warps of 64x64, 3-stage cp.async pipeline, "
                "fragments prefetched a step ahead",
)
def wmma_smem(case, inputs, out, block_m, block_n, block_k, warps, stages, group_m, loads, min_blocks, prefetch):
    import numpy as np

    a, b, c = _common.operands(case, inputs, out)
    p = plan(case, a, b, c, block_m, block_n, block_k, warps, stages, group_m, smem_limit=_common.smem_optin_limit(a),
             loads=loads, min_blocks=min_blocks, prefetch=prefetch)
    kernel = _common.compiled(str(SOURCE), p["name"])
    if p["smem"] > _common.STATIC_SMEM_LIMIT:  # above 48 KiB a block must opt in to its dynamic shared memory
        kernel.max_dynamic_shared_size_bytes = p["smem"]
    args = (*_common.pointer_args(a, b, c), np.int32(case.m), np.int32(case.n), np.int32(case.k), np.int32(group_m))
    run = _common.launcher(kernel, p["grid"], p["block"], args, smem=p["smem"])
    run.config = {
        "block_m": block_m, "block_n": block_n, "block_k": block_k, "warps": warps, "stages": stages,
        "group_m": group_m, "warp_tile": [block_m // p["warps_m"], block_n // p["warps_n"]],
        "cp_async": p["async"], "loads": loads, "min_blocks": min_blocks, "prefetch": bool(prefetch),
        **_common.kernel_config(kernel, p["grid"], p["block"], p["smem"]),
    }
    return run
