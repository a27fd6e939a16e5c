"""fp16/bf16 matmul for Hopper (sm_90a): TMA loads into 128-byte-swizzled shared memory, wgmma.mma_async
from shared memory, an mbarrier pipeline, and (the default) warp specialization on a persistent grid.

The CUDA source is ``wgmma.cu`` beside this file (its header comment has the shared-memory layout,
the swizzle, the wgmma descriptors and the accumulator layout), compiled at run time with NVRTC
through ``cupy.RawModule`` for the arch-specific target sm_90a (wgmma and setmaxnreg exist nowhere
else: on any other GPU this implementation is a SKIP). The TMA tensor maps of A and B are encoded on
the host (``kernels/_tensor_map.py``) and passed by value as ``__grid_constant__`` parameters.

``variant=ws`` (default): one producer warpgroup (one thread issues the TMA loads, setmaxnreg 40)
and block_m/64 consumer warpgroups (wgmma m64n<block_n>k16, setmaxnreg 232), ``stages`` buffers
handed between them by full/empty mbarriers; one block per SM walks the tiles in grouped order.
``variant=plain``: no warp specialization, one tile per block, every warpgroup computes and thread 0
also issues the loads: the simpler kernel, with the same loads, descriptors and wgmma.
``block_n=192``: tiles of 128 x 192, for shapes whose last wave of 128 x 256 tiles leaves many SMs idle
(5000 x 3000: 480 tiles of 128 x 256 are 3.6 waves of 132 SMs, 640 of 128 x 192 are 4.8).
``cluster=2`` (ws, block_n of 128 or more): thread-block clusters of two blocks computing neighbouring
tile rows of one tile column, each producer loading every other 64-column box of the shared B tile by
TMA multicast into both. ``cluster=auto`` (the default) takes 2 for the warp-specialized kernel's
128-row tiles of 128 columns or more and 1 otherwise: on an H200 clusters of two ran within 2 % of
single blocks at 4096³ and 8192³ and 1.18-1.21x faster at 5000 x 3000 x 7000 (docs/performance.md).
``epilogue=tma`` (ws): each consumer warpgroup writes its slice of a finished tile into a staging buffer
in shared memory (64 x 64 boxes, 128-byte swizzle) and one thread stores it by TMA through a third
map, so the warpgroup starts its next tile while the copy engine writes C; ``epilogue=direct`` stores C
from the registers. ``epilogue=auto`` (the default) takes tma for the warp-specialized kernel and direct
for the plain one: on an H200 the TMA stores made the default tiles 5-10 % faster at 4096³ and 8192³
and 4-5 % at 5000 x 3000 x 7000 (docs/performance.md). The staging takes block_m x block_n x 2 bytes,
so 128 x 256 tiles fit only with ``stages=3`` (the default; four stages were no faster with the direct
epilogue).

TMA reads A and B in place, so K and N must be multiples of 8 (16-byte row strides) and A and B
16-byte aligned; other shapes are refused with that reason (the other matmul kernels take them).
Tiles that overhang M, N or K are zero-filled by TMA; the stores of C are masked.

    kbench run matmul --m 4096 --n 4096 --k 4096 --dtype fp16,bf16 --impl cublas,wgmma \\
        --param block_n=128,256 --param stages=3,4
    kbench run matmul --m 4096 --n 4096 --k 4096 --impl cublas,wgmma --param cluster=1,2
"""

from pathlib import Path

from kbench.loader import load_helper
from kbench.registry import Unsupported, implementation

SOURCE = Path(__file__).with_suffix(".cu")
ARCH = "sm_90a"
BLOCK_K = 64  # k per stage: 64 16-bit elements, one 128-byte swizzled row (fixed in wgmma.cu)
B_BOX_N = 64  # B is loaded in boxes of 64 (k) x 64 (n): a box row may be no wider than the swizzle
SWIZZLE_ATOM = 1024  # the stage buffers start at a multiple of this; the host adds it as slack
PRODUCER_REGISTERS, CONSUMER_REGISTERS = 40, 232  # setmaxnreg in wgmma.cu's warp-specialized kernel
VARIANTS = ("ws", "plain")
BLOCK_NS = (64, 128, 192, 256)  # wgmma n, B loaded in 64-column boxes
CLUSTERS = (1, 2)  # CTAs a cluster along M (ws only): 2 share each B tile by TMA multicast
EPILOGUES = ("direct", "tma")  # C stored from the registers, or staged in shared memory and stored by TMA
C_BOX = 64  # the TMA-store epilogue writes C in boxes of 64 x 64 (one 128-byte swizzled row of 64 elements)
H200_SMS = 132  # for `kbench explain` without a GPU (kbench.devices has the same figure)

_common = load_helper(Path(__file__).parent / "_cupy_matmul.py")
_tma = load_helper(Path(__file__).parent.parent / "_tensor_map.py")


def resolve_cluster(cluster, variant: str, block_m: int, block_n: int) -> int:
    """cluster=auto as the size it takes: 2 for the warp-specialized kernel's 128-row tiles of at least two
    B boxes (the form measured on an H200), else 1; a number as given."""
    if cluster == "auto":
        return 2 if variant == "ws" and block_m == 128 and block_n >= 128 else 1
    return int(cluster)  # --param gives "1" or "2" (typed as the default, a string)


def resolve_epilogue(epilogue: str, variant: str) -> str:
    """epilogue=auto as the form it takes: the TMA stores for the warp-specialized kernel (the one that
    has them), the register stores for the plain one; a name as given."""
    if epilogue == "auto":
        return "tma" if variant == "ws" else "direct"
    return epilogue


def check_config(block_m: int, block_n: int, stages: int, group_m: int, variant: str, cluster: int = 1,
                 epilogue: str = "direct") -> str | None:
    if variant not in VARIANTS:
        return f"variant={variant!r} is not one of {', '.join(VARIANTS)}"
    if epilogue not in EPILOGUES:
        return f"epilogue={epilogue!r} is not one of {', '.join(EPILOGUES)}"
    if epilogue == "tma" and variant != "ws":
        return "epilogue=tma with variant=plain: the TMA-store epilogue is the warp-specialized kernel's"
    if cluster not in CLUSTERS:
        return f"cluster={cluster}: 1 or 2 CTAs a cluster"
    if cluster == 2 and (variant != "ws" or block_n < 128):
        return (f"cluster=2 with variant={variant}, block_n={block_n}: the two CTAs of a cluster share B by "
                "multicast in the warp-specialized kernel, each loading every other box of a B tile of at least two 64-column boxes")
    if block_m not in (64, 128):
        return f"block_m={block_m}: 64 or 128 (one or two warpgroups of 64 rows)"
    if block_n not in BLOCK_NS:
        return f"block_n={block_n}: 64, 128, 192 or 256 (the n of wgmma m64nNk16)"
    if stages < 2:
        return f"stages={stages}: the pipeline needs at least 2"
    if group_m < 1:
        return f"group_m={group_m} must be at least 1"
    return None


def stage_bytes(block_m: int, block_n: int) -> tuple[int, int]:
    """Bytes of one stage's A tile (block_m x 64) and B tile (64 x block_n), 16-bit elements."""
    return block_m * BLOCK_K * 2, BLOCK_K * block_n * 2


def smem_bytes(block_m: int, block_n: int, stages: int, epilogue: str = "direct") -> int:
    """Dynamic shared memory: the stages, with epilogue=tma the consumers' staging of C (block_m x
    block_n 16-bit elements), a full and an empty mbarrier per stage, and the slack that lets the kernel
    round the buffers' start up to the 1024-byte swizzle atom."""
    a, b = stage_bytes(block_m, block_n)
    staging = block_m * block_n * 2 if epilogue == "tma" else 0
    return stages * (a + b) + staging + 2 * 8 * stages + SWIZZLE_ATOM


def threads(block_m: int, variant: str) -> int:
    """128 per warpgroup: block_m/64 consumers, plus the producer in the warp-specialized kernel."""
    return 128 * (block_m // 64 + (1 if variant == "ws" else 0))


def tiles(case, block_m: int, block_n: int) -> tuple[int, int]:
    return _common.ceil_div(case.m, block_m), _common.ceil_div(case.n, block_n)


def tile_coords(tile: int, tiles_m: int, tiles_n: int, group_m: int) -> tuple[int, int]:
    """(tile row, tile column) of tile number ``tile``: wgmma.cu's tile_coords (column-major within
    groups of group_m tile rows), here for `kbench explain` and the tests."""
    per_group = group_m * tiles_n
    group, in_group = divmod(tile, per_group)
    first_m = group * group_m
    rows_here = min(tiles_m - first_m, group_m)
    return first_m + in_group % rows_here, in_group // rows_here


def tensor_maps(case, a, b, block_m: int, l2_promotion: int = 128):
    """The TMA maps' specifications: A (M x K) in boxes of block_m x 64, B (K x N) in boxes of 64 x 64,
    each read from DRAM into L2 in pieces of ``l2_promotion`` bytes (a box row is 128 bytes: where rows are
    no multiple of 256 bytes apart, such as K = 7000, one box row can straddle two 256-byte pieces, and
    both are read). 128, the default, reads what a box row needs; at 5000 x 3000 x 7000 on the H200 it
    was 1.15x faster than 256 and the same at 4096³ and 8192³ (docs/performance.md)."""
    return (_tma.Tiled2D(case.dtype, a.data_ptr(), case.m, case.k, block_m, BLOCK_K, l2_promotion=l2_promotion),
            _tma.Tiled2D(case.dtype, b.data_ptr(), case.k, case.n, BLOCK_K, B_BOX_N, l2_promotion=l2_promotion))


def plan(case, a, b, out, block_m, block_n, stages, group_m, variant, sms=H200_SMS, smem_limit=None,
         l2_promotion=128, cluster=1, resident_clusters=None, epilogue="direct") -> dict:
    """The launch for one case (raises Unsupported): kernel name, grid, block, shared memory, the tiles and
    the units the persistent blocks (or clusters) take (``cluster`` tiles down a tile column), maps (A, B,
    and C with epilogue=tma). ``resident_clusters``: clusters the GPU holds at once (cluster > 1; None: one
    per ``cluster`` SMs)."""
    reason = check_config(block_m, block_n, stages, group_m, variant, cluster, epilogue)
    if reason:
        raise Unsupported(reason)
    if case.dtype not in ("fp16", "bf16"):
        raise Unsupported(f"{case.dtype}: wgmma takes fp16 or bf16 inputs")
    map_a, map_b = tensor_maps(case, a, b, block_m, l2_promotion)
    for name, spec in (("A", map_a), ("B", map_b)):
        problem = spec.problem()
        if problem:
            raise Unsupported(f"TMA cannot read {name}: {problem}")
    if out.data_ptr() % 4:
        raise Unsupported("C must be 4-byte aligned (pairs of elements are stored as one 32-bit word)")
    maps = (map_a, map_b)
    if epilogue == "tma":
        map_c = _tma.Tiled2D(case.dtype, out.data_ptr(), case.m, case.n, C_BOX, C_BOX)
        problem = map_c.problem()
        if problem:
            raise Unsupported(f"TMA cannot write C: {problem}")
        maps += (map_c,)
    smem = smem_bytes(block_m, block_n, stages, epilogue)
    if smem_limit is not None and smem > smem_limit:
        raise Unsupported(f"needs {smem / 1024:.1f} KiB of shared memory per block; this GPU allows "
                          f"{smem_limit / 1024:.1f} KiB (sharedMemPerBlockOptin)")
    tiles_m, tiles_n = tiles(case, block_m, block_n)
    count = tiles_m * tiles_n
    # ws: one block an SM at most; with clusters, as many whole clusters as run at once, each taking units
    # of `cluster` tiles down a tile column
    units = _common.ceil_div(tiles_m, cluster) * tiles_n
    resident = sms // cluster if resident_clusters is None else resident_clusters
    grid = (cluster * min(units, resident) if variant == "ws" else count,)
    _common.check_grid(grid)
    kernel = ("matmul_wgmma_ws" + ("_cluster2" if cluster == 2 else "") + ("_store" if epilogue == "tma" else "")
              if variant == "ws" else "matmul_wgmma_plain")
    name = _common.instance_name(kernel, block_m, block_n, stages, case.dtype == "bf16")
    return {"name": name, "grid": grid, "block": (threads(block_m, variant),), "smem": smem,
            "tiles": (tiles_m, tiles_n), "units": units, "maps": maps}


def explain(case, params) -> dict:
    """`kbench explain matmul --impl wgmma`: roles, wgmma shape and count, pipeline, tiles and waves."""
    bm, bn, stages, variant = params["block_m"], params["block_n"], params["stages"], params["variant"]
    cluster = resolve_cluster(params["cluster"], variant, bm, bn)
    epilogue = resolve_epilogue(params["epilogue"], variant)
    try:
        p = plan(case, _common.PLACEHOLDER, _common.PLACEHOLDER, _common.PLACEHOLDER, bm, bn, stages,
                 params["group_m"], variant, l2_promotion=params["l2_promotion"], cluster=cluster,
                 epilogue=epilogue)
    except Unsupported as exc:
        return {"configuration": f"not runnable: {exc}"}
    figures = _common.explain_launch(case, p, SOURCE, (bm, bn), p["smem"], arch=ARCH)
    consumers = bm // 64
    k_steps = _common.ceil_div(case.k, BLOCK_K)
    a_bytes, b_bytes = stage_bytes(bm, bn)
    tiles_m, tiles_n = p["tiles"]
    count = tiles_m * tiles_n
    if variant == "ws":
        figures["warpgroups"] = (f"1 producer (one thread issues the TMA loads; setmaxnreg {PRODUCER_REGISTERS}) + "
                                 f"{consumers} consumer{'s' if consumers > 1 else ''} (wgmma, 64 rows each; "
                                 f"setmaxnreg {CONSUMER_REGISTERS})")
        figures["registers per thread by role"] = (f"producer {PRODUCER_REGISTERS}, consumers {CONSUMER_REGISTERS} "
                                                   f"({bn // 2} of them fp32 accumulators); ptxas reports the "
                                                   f"count at entry, before setmaxnreg")
        # Rounds of the persistent schedule: the last one leaves SMs idle unless the units divide evenly.
        units = p["units"]
        workers = p["grid"][0] // cluster
        rounds = _common.ceil_div(units, workers)
        last = units - (rounds - 1) * workers
        who = "clusters" if cluster > 1 else "blocks"
        figures["tile schedule"] = (f"{tiles_m} x {tiles_n} = {count:,} tiles of {bm} x {bn} on {p['grid'][0]} "
                                    f"persistent blocks ({H200_SMS} SMs on an H200): {count / p['grid'][0]:.2f} "
                                    f"tiles a block, grouped {params['group_m']} tile rows at a time; {rounds} "
                                    f"rounds, the last with {last} of {workers} {who} busy ({units / (rounds * workers):.0%} "
                                    f"of the rounds' slots used)")
        if cluster == 2:
            figures["clusters"] = (f"{p['grid'][0] // 2} clusters of 2 blocks on neighbouring tile rows of one tile "
                                   f"column: each producer loads its A box and every other one of the "
                                   f"{bn // B_BOX_N} B boxes, multicast to both (B read from L2 once for two tiles)")
    else:
        figures["warpgroups"] = (f"{consumers} computing warpgroup{'s' if consumers > 1 else ''} (wgmma, 64 rows "
                                 f"each); thread 0 also issues the TMA loads")
        figures["registers per thread by role"] = f"one role: {bn // 2} of them fp32 accumulators"
        figures["tile schedule"] = (f"{tiles_m} x {tiles_n} = {count:,} tiles of {bm} x {bn}, one per block "
                                    f"({count / H200_SMS:.2f} waves of one block per SM on an H200)")
    figures["wgmma"] = (f"m64n{bn}k16 .f32.{'bf16' if case.dtype == 'bf16' else 'f16'}, A and B from shared "
                        f"memory (B transposed: MN-major); {BLOCK_K // 16} per stage and warpgroup, "
                        f"{consumers * BLOCK_K // 16 * k_steps:,} per tile ({k_steps} k-steps of {BLOCK_K})")
    if epilogue == "tma":
        figures["epilogue"] = (f"each consumer stages its 64 x {bn} slice of C in shared memory ({bn // C_BOX} boxes "
                               f"of 64 x 64, {64 * bn * 2 // 1024} KiB, 128-byte swizzle) and one thread stores it "
                               f"by TMA; the next tile's products start while the copy engine writes it")
    else:
        figures["epilogue"] = "C stored from the accumulator registers, a pair of elements (32 bits) a store"
    figures["pipeline"] = (f"{stages} stages of {(a_bytes + b_bytes) // 1024} KiB (A {a_bytes // 1024} KiB in one "
                           f"TMA box, B {b_bytes // 1024} KiB in {bn // B_BOX_N} boxes of 64 x 64), 128-byte "
                           f"swizzle, read into L2 {params['l2_promotion']} bytes at a time; {p['smem']:,} bytes "
                           f"of shared memory with the barriers{', the staging of C' if epilogue == 'tma' else ''} "
                           f"and 1 KiB of alignment slack")
    return figures


@implementation(
    "matmul", "wgmma", backend="cupy", cuda=True, modules=("torch", "cupy"), min_cc=(9, 0),
    dtypes=("fp16", "bf16"),
    params={"block_m": 128, "block_n": 256, "stages": 3, "group_m": 8, "variant": "ws", "l2_promotion": 128,
            "cluster": "auto", "epilogue": "auto"},
    allowed={"variant": VARIANTS, "block_m": (64, 128), "block_n": BLOCK_NS, "l2_promotion": tuple(_tma.L2_PROMOTION),
             "cluster": ("auto", *map(str, CLUSTERS)), "epilogue": ("auto", *EPILOGUES),
             "stages": lambda s: None if s >= 2 else "is fewer than 2 stages",
             "group_m": lambda g: None if g >= 1 else "is below 1"},
    explain=explain,
    description="Hopper wgmma + TMA (CUDA C++, sm_90a): 128x256 tiles, warp-specialized, 3-stage mbarrier "
                "pipeline, persistent grid, clusters of two, TMA stores",
)
def wgmma(case, inputs, out, block_m, block_n, stages, group_m, variant, l2_promotion, cluster, epilogue):
    import numpy as np
    import torch

    a, b, c = _common.operands(case, inputs, out)
    cluster = resolve_cluster(cluster, variant, block_m, block_n)
    epilogue = resolve_epilogue(epilogue, variant)
    capability = torch.cuda.get_device_capability(a.device)
    if tuple(capability) != (9, 0):
        raise Unsupported(f"wgmma and setmaxnreg exist only on sm_90 (Hopper, built for sm_90a); this GPU is "
                          f"sm_{capability[0]}{capability[1]}")
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    p = plan(case, a, b, c, block_m, block_n, stages, group_m, variant, sms=sms,
             smem_limit=_common.smem_optin_limit(a), l2_promotion=l2_promotion, cluster=cluster, epilogue=epilogue)
    kernel = _common.compiled(str(SOURCE), p["name"], ARCH)
    kernel.max_dynamic_shared_size_bytes = p["smem"]
    if cluster > 1:  # a GPC's SMs left over from whole clusters idle: size the persistent grid by the driver
        resident = _common.max_active_clusters(kernel, cluster, p["block"][0], p["smem"])
        if resident < 1:
            raise Unsupported(f"no cluster of {cluster} blocks of {p['block'][0]} threads and {p['smem']:,} bytes "
                              "of shared memory fits this GPU")
        p = plan(case, a, b, c, block_m, block_n, stages, group_m, variant, sms=sms,
                 smem_limit=_common.smem_optin_limit(a), l2_promotion=l2_promotion, cluster=cluster, epilogue=epilogue,
                 resident_clusters=resident)
    maps = tuple(_tma.encode(spec) for spec in p["maps"])  # A, B, and C with epilogue=tma
    args = (*maps, *_common.pointer_args(c), np.int32(case.m), np.int32(case.n), np.int32(case.k),
            np.int32(group_m))
    run = _common.launcher(kernel, p["grid"], p["block"], args, smem=p["smem"])
    run.config = {
        "block_m": block_m, "block_n": block_n, "block_k": BLOCK_K, "stages": stages, "group_m": group_m,
        "variant": variant, "l2_promotion": l2_promotion, "cluster": cluster, "epilogue": epilogue,
        "tiles": list(p["tiles"]),
        **_common.kernel_config(kernel, p["grid"], p["block"], p["smem"]),
    }
    return run
