"""FlashAttention-2 forward as a CuPy RawKernel: mma.sync PTX, ldmatrix, cp.async double buffering.

The CUDA source is ``cupy_fa2.cu`` beside this file, compiled at run time with
NVRTC through ``cupy.RawModule`` (CuPy caches the binary on disk, so a second run
does not recompile). Tile shape and warps are parameters:

    kbench run attention --impl cupy-fa2 --param block_m=128 --param block_n=128 --param warps=4
    kbench run attention --impl cupy-fa2 --param smem_layout=swizzle,pad,plain
    kbench run attention --impl cupy-fa2 --param rescale=0,8

``rescale``: how far (log2 units) a K/V tile's largest score may pass a row's running maximum before
the maximum moves and O is rescaled. 0: whenever it passes it, every tile's O rescaled, as
FlashAttention-2; 8 (the default): P may reach 2^8 before the maximum moves (FlashAttention-4's
conditional rescaling), after the first tiles few tiles move any row's maximum, and O is rescaled only
when some row of a warp moved (a kernel instance of its own). O / l is the same either way.

``loads``: how the loop issues the next K/V tile's cp.async copies. ``checked``: each copy's address a
64-bit product and its row checked against N (about 14 instructions a copy); ``stepped``: one product
a tile, then a 64-bit add a copy, the rows checked only when the tile reaches past N (ptxas for sm_90,
d = 128, 128 x 64 tiles: a K/V tile's copies are 224 instructions checked, 87 stepped; with rescale=8
as well, the loop runs about 890 instructions a tile where no row's maximum moves, against 1,129).
``auto`` (the default): stepped where a thread's copies are rows apart by a multiple of 8 that divides
block_n (every default tile), else checked.

``order``: which query tiles the blocks take first. Under a causal mask the last query tile of a head
visits every K/V tile and the first one, so ``heaviest`` (the default there, ``order=auto``) turns the
grid to (batch x heads, query tiles) and hands out every head's last tile before any head's next: the
end of the launch is left to the lightest tiles instead of a mix. ``rows`` keeps each head's tiles in
order (the default without a mask, where every tile is the same work), ``reverse`` each head's last
tile first.

On an H200 (d = 128, B 2, H 16, fp16) rescale=8 with stepped loads ran 1.14x the rescale=0,
checked form at N = 4096 and 16384, and 1.06x at N = 4096 causal (docs/performance.md).

Each record's ``config`` carries the compiled kernel's registers per thread,
shared memory per block and local-memory (spill) bytes per thread, read from
the function's attributes.
"""

from pathlib import Path

from kbench.loader import load_helper
from kbench.registry import Unsupported, implementation

_cupy = load_helper(Path(__file__).parent.parent / "_cupy_common.py")

SOURCE = Path(__file__).with_suffix(".cu")
LOG2_E = 1.4426950408889634
HEAD_DIMS = (64, 128)


LAYOUTS = {"swizzle": 0, "pad": 1, "plain": 2}  # shared-memory layouts (see Tile in the .cu)
LOADS = ("auto", "checked", "stepped")  # how the loop copies the next K/V tile (the .cu's load_tile, load_tile_stepped)
# Which query tiles run first (the .cu's Order): "rows" in order head by head, "reverse" each head's
# last (under a causal mask, heaviest) first, "heaviest" every head's heaviest before any head's next.
# "auto" (the default): heaviest under a causal mask, where tiles differ in work, else rows.
ORDERS = {"rows": 0, "reverse": 1, "heaviest": 2}
RESCALE_CHOICES = (0, 8)  # log2 margin before a row's running maximum moves (0: FlashAttention-2's way; 8: the .cu's MARGIN)


def smem_bytes(d: int, block_m: int, block_n: int, layout: str = "swizzle") -> int:
    """Q tile, plus two K and two V tiles (double buffering), 2 bytes an element (+16 a row padded)."""
    row_bytes = d * 2 + (16 if layout == "pad" else 0)
    return (block_m + 4 * block_n) * row_bytes


def stepping_problem(d: int, block_n: int, warps: int) -> str | None:
    """Why loads=stepped cannot copy this tile shape (None: it can)."""
    row_step = warps * 32 // (d // 8)  # rows between one thread's 16-byte copies of a tile
    if row_step % 8 or block_n % row_step:
        return (f"loads=stepped with {warps} warps at d={d}: a thread's copies are {row_step} rows apart, and "
                f"stepping needs a multiple of 8 that divides block_n={block_n}")
    return None


def resolve_loads(loads: str, d: int, block_n: int, warps: int) -> str:
    """loads=auto as the form it takes: stepped where it fits the tile, else checked."""
    if loads == "auto":
        return "checked" if stepping_problem(d, block_n, warps) else "stepped"
    return loads


def resolve_order(order: str, causal: bool) -> str:
    """order=auto as the order it takes for this case."""
    if order == "auto":
        return "heaviest" if causal else "rows"
    return order


def check_config(d: int, block_m: int, block_n: int, warps: int, layout: str = "swizzle",
                 loads: str = "checked") -> str | None:
    if layout not in LAYOUTS:
        return f"smem_layout={layout!r} is not one of {', '.join(LAYOUTS)}"
    if warps < 1 or block_m % (16 * warps):
        return f"block_m={block_m} must give each of the {warps} warps a multiple of 16 rows"
    if block_n < 16 or block_n % 16:
        return f"block_n={block_n} must be a positive multiple of 16"
    if warps * 32 > 1024:
        return f"{warps} warps exceed 1024 threads per block"
    if loads == "stepped":
        return stepping_problem(d, block_n, warps)
    return None


def name_expression(d: int, block_m: int, block_n: int, warps: int, bf16: bool, causal: bool, layout: str,
                    rescale: int = 0, loads: str = "checked", order: str = "rows") -> str:
    """The template instantiation NVRTC compiles (and `kbench explain` hands to ptxas)."""
    return _cupy.instance_name("fa2_forward", d, block_m, block_n, warps, bf16, causal, LAYOUTS[layout], rescale > 0,
                               loads == "stepped", ORDERS[order])


def kv_tile_visits(n: int, block_m: int, block_n: int, causal: bool) -> int:
    """K/V tiles visited by all the Q-tile blocks of one (batch, head): every tile by each block, or,
    when causal, those up to the diagonal: block i (rows up to r_i = min((i+1)·block_m, n) - 1) visits
    r_i // block_n + 1 tiles. Summed in closed form, not block by block: `kbench explain` is asked
    about any N, and a loop over N / block_m blocks takes minutes at N = 10^11."""
    q_tiles = -(-n // block_m)
    kv_tiles = -(-n // block_n)
    if not causal:
        return q_tiles * kv_tiles
    # Blocks 0 .. q_tiles-2 end at row (i+1)·block_m - 1 (below n); the last one ends at row n - 1.
    whole = _floor_sum(q_tiles - 1, block_n, block_m, block_m - 1)
    return whole + (q_tiles - 1) + kv_tiles


def _floor_sum(count: int, m: int, a: int, b: int) -> int:
    """sum((a·i + b) // m for i in range(count)) for a, b >= 0, m >= 1, in O(log m) steps (the
    Euclid-like reduction of the AtCoder Library's floor_sum)."""
    total = 0
    while count > 0:
        if a >= m:
            total += count * (count - 1) // 2 * (a // m)
            a %= m
        if b >= m:
            total += count * (b // m)
            b %= m
        top = a * count + b
        if top < m:
            break
        count, b = top // m, top % m
        m, a = a, m
    return total


def explain(case, params) -> dict:
    """The FlashAttention walkthrough's figures for this case and configuration: launch geometry,
    shared memory, mma.sync counts, registers and spills (ptxas), occupancy."""
    from kbench.kernel_resources import from_nvcc
    from kbench.occupancy import blocks_per_sm

    bm, bn, warps, layout = params["block_m"], params["block_n"], params["warps"], params["smem_layout"]
    loads = resolve_loads(params["loads"], case.d, bn, warps)
    order = resolve_order(params["order"], bool(case.causal))
    reason = check_config(case.d, bm, bn, warps, layout, loads)
    if reason:
        return {"configuration": f"not runnable: {reason}"}
    rows = bm // warps
    q_tiles = -(-case.n // bm)
    kv_tiles = -(-case.n // bn)
    s_mma = (rows // 16) * (bn // 8) * (case.d // 16)  # m16 x n8 tiles of S, k16 steps over d
    pv_mma = (rows // 16) * (case.d // 8) * (bn // 16)  # m16 x n8 tiles of O, k16 steps over keys
    visits = kv_tile_visits(case.n, bm, bn, bool(case.causal))
    smem = smem_bytes(case.d, bm, bn, layout)
    row_bytes = case.d * 2 + (16 if layout == "pad" else 0)
    figures = {
        "grid": f"{q_tiles} Q tiles x {case.batch * case.heads} (batch x heads) = "
                f"{q_tiles * case.batch * case.heads} blocks, "
                + {"rows": "each head's Q tiles in order", "reverse": "each head's last Q tile first",
                   "heaviest": "every head's last Q tile before any head's next"}[order],
        "block": f"{warps} warps = {warps * 32} threads; each warp owns {rows} query rows (split-Q)",
        "K/V tiles per block": f"{kv_tiles} of {bn} keys" + (" (causal: up to the diagonal)" if case.causal else ""),
        "shared memory per block": f"{smem:,} bytes = Q {bm * row_bytes:,} + K/V {2 * bn * row_bytes:,} "
                                   f"x 2 buffers ({layout} layout)",
        "mma.sync m16n8k16 per warp per K/V tile": f"S=QKᵀ {rows // 16} x {bn // 8} x {case.d // 16} = {s_mma}, "
                                                   f"O+=PV {rows // 16} x {case.d // 8} x {bn // 16} = {pv_mma}",
        "mma.sync in the whole launch": f"{(s_mma + pv_mma) * warps * visits * case.batch * case.heads:,}",
    }
    try:
        resources = from_nvcc(SOURCE, name_expression(case.d, bm, bn, warps, case.dtype == "bf16",
                                                      bool(case.causal), layout, params["rescale"], loads,
                                                      order))
    except RuntimeError as exc:
        resources = None
        figures["registers"] = f"could not compile: {exc}"
    if resources:
        occupancy = blocks_per_sm(warps * 32, resources["registers"], smem, (9, 0))
        figures.update({
            "registers per thread": f"{resources['registers']} ({resources['source']})",
            "spills per thread": f"{resources['spill_stores']} bytes stored, {resources['spill_loads']} loaded "
                                 f"(stack frame {resources['stack_bytes']} bytes)",
            "blocks per SM (sm_90)": f"{occupancy['blocks_per_sm']}, limited by "
                                     f"{' and '.join(occupancy['limited_by'])}: {occupancy['warps_per_sm']} warps, "
                                     f"occupancy {occupancy['occupancy']:.1%}",
        })
        if resources.get("main_loop"):  # where cuobjdump is installed: one K/V tile's instructions
            figures["largest innermost loop (SASS)"] = resources["main_loop"]
    elif "registers" not in figures:
        figures["registers"] = "unknown here (no nvcc): run on the GPU, where each record's config has them"
    return figures


def _supports(case):
    if case.d not in HEAD_DIMS:
        return f"head dim {case.d} (cupy-fa2 is built for d = 64 and 128)"
    return None


def _multiple_of_16(value: int) -> str | None:
    return None if value >= 16 and value % 16 == 0 else "must be a positive multiple of 16"


@implementation(
    "attention", "cupy-fa2", backend="cupy", cuda=True, modules=("torch", "cupy"), min_cc=(8, 0),
    dtypes=("fp16", "bf16"), supports=_supports,
    params={"block_m": 128, "block_n": 64, "warps": 4, "smem_layout": "swizzle", "lse": 0, "rescale": 8,
            "loads": "auto", "order": "auto"},
    explain=explain,
    # Values check_config refuses whatever the others are; block_m and warps that do not fit together
    # are SKIPs, so a sweep of both can run the pairs that fit.
    allowed={"block_m": _multiple_of_16, "block_n": _multiple_of_16,
             "warps": lambda warps: None if 1 <= warps <= 32 else "must be 1 to 32 (1024 threads a block)",
             "smem_layout": tuple(LAYOUTS), "lse": (0, 1), "rescale": RESCALE_CHOICES, "loads": LOADS,
             "order": ("auto", *ORDERS)},
    description="FlashAttention-2 in CUDA C++: mma.sync m16n8k16, ldmatrix, cp.async double buffering",
)
def cupy_fa2(case, inputs, out, block_m, block_n, warps, smem_layout, lse, rescale, loads, order):
    import numpy as np
    import torch

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    loads = resolve_loads(loads, case.d, block_n, warps)
    order = resolve_order(order, bool(case.causal))
    reason = check_config(case.d, block_m, block_n, warps, smem_layout, loads)
    if reason:
        raise Unsupported(reason)
    smem = smem_bytes(case.d, block_m, block_n, smem_layout)
    limit = _cupy.smem_optin_limit(q)
    if smem > limit:
        raise Unsupported(f"needs {smem // 1024} KiB of shared memory per block; this GPU allows {limit // 1024} KiB")
    for t in (q, k, v, out):
        if t.stride(-1) != 1:
            raise Unsupported("cupy-fa2 needs a contiguous last dimension")

    kernel = _cupy.compiled(str(SOURCE), name_expression(case.d, block_m, block_n, warps, case.dtype == "bf16",
                                                         bool(case.causal), smem_layout, rescale, loads, order))
    if smem > 48 * 1024:  # above 48 KiB a block must opt in to its dynamic shared memory
        kernel.max_dynamic_shared_size_bytes = smem
    lse_out = torch.empty(case.batch * case.heads, case.n, device=q.device, dtype=torch.float32) if lse else None

    def strides(t):
        return tuple(np.int64(s) for s in t.stride()[:3])

    args = (*_cupy.pointer_args(q, k, v, out), np.uint64(lse_out.data_ptr() if lse_out is not None else 0),
            np.int32(case.heads), np.int32(case.n), *strides(q), *strides(k), *strides(v), *strides(out),
            np.float32(case.d**-0.5 * LOG2_E))
    q_tiles = (case.n + block_m - 1) // block_m
    grid = (case.batch * case.heads, q_tiles) if order == "heaviest" else (q_tiles, case.batch * case.heads)
    block = (warps * 32,)
    run = _cupy.launcher(kernel, grid, block, args, smem)
    run.config = {
        "block_m": block_m, "block_n": block_n, "warps": warps, "smem_layout": smem_layout, "lse": bool(lse),
        "rescale": rescale, "loads": loads, "order": order,
        **_cupy.kernel_config(kernel, grid, block, smem),
    }
    run.lse = lse_out  # for tests that check the log-sum-exp
    return run
