"""FlashAttention forward for Hopper (sm_90a), built as FlashAttention-3 is: TMA loads, wgmma.mma_async,
a producer warpgroup and two consumer warpgroups (setmaxnreg; at d = 64 three by default, for
FlashAttention-3's 192-row tiles, with 128-key K/V tiles), ping-pong between the consumers and the
next Q Kᵀ overlapped with the current softmax, on a persistent grid (one block per SM walking the
(Q tile, head) units, taking the next from a counter, the next unit's loads under this one's last
products and stores).

The CUDA source is ``cuda_fa3.cu`` beside this file (its header comment has the shared-memory layout,
the wgmma descriptors, the register layouts and the schedule), compiled at run time with NVRTC for
the arch-specific target sm_90a: wgmma and setmaxnreg exist nowhere else, so on any other GPU this
implementation is a SKIP. The TMA maps of Q, K and V are encoded on the host
(``kernels/_tensor_map.py``, one 3-D map each: {d, N, batch x heads}) and passed by value.

    kbench run attention --n 4096 --d 128 --impl cuda-fa3,sdpa-cudnn --param block_n=128,176
    kbench run attention --impl cuda-fa3 --param overlap=0,1 --param pingpong=0,1
    kbench run attention --impl cuda-fa3 --param persistent=0,1 --param dynamic=0,1 --param narrow_tail=0,1
    kbench run attention --d 64 --impl cuda-fa3 --param block_n=128,176 --param consumers=2,3
    kbench run attention --impl cuda-fa3 --param rescale=0,8
    kbench explain attention --impl cuda-fa3

``rescale``: how far (log2 units) a K/V tile's largest score may pass a row's running maximum before the
maximum moves (0: whenever it passes it, O rescaled every tile; 8, the default: FlashAttention-4's
conditional rescaling, P below 2^8 and O rescaled only by a warp one of whose rows moved). On an H100
(B2 H16, d = 128, interleaved; records in results/experiments/h100-attention-rescale.jsonl) 8 ran
1.013x as fast as 0 at N = 4096, 1.017x in bf16 at N = 8192, 1.006x causal, and within the noise at
N = 16384 and at d = 64 (docs/performance.md).
"""

from pathlib import Path

from kbench.loader import load_helper
from kbench.registry import Unsupported, implementation

SOURCE = Path(__file__).with_suffix(".cu")
ARCH = "sm_90a"
LOG2_E = 1.4426950408889634
HEAD_DIMS = (64, 128)
# Consumer warpgroups of 64 query rows (Team in cuda_fa3.cu): 2, or 3 at d = 64 with K/V tiles of at most
# 128 keys, the most whose S, P and O fit the 160 registers a consumer thread has beside two others.
CONSUMERS = (2, 3)
BLOCK_NS = (64, 128, 176, 192)  # K/V tile rows: the wgmma n instantiated in kbench_sm90.cuh
BOX_COLS = 64  # a TMA box row: 64 16-bit elements, the 128-byte swizzle's width
SWIZZLE_ATOM = 1024  # the buffers start at a multiple of this; the host adds it as slack
REGISTERS = {2: (24, 240), 3: (32, 160)}  # consumers -> setmaxnreg of the producer and of a consumer (Team)
H200_SMS = 132  # for `kbench explain` without a GPU
MAX_UNITS = 2**30 - 1  # Q tiles x batch x heads: a unit number plus the grid size stays within an int

_cupy = load_helper(Path(__file__).parent.parent / "_cupy_common.py")
_tma = load_helper(Path(__file__).parent.parent / "_tensor_map.py")


def resolved(d: int, block_n, consumers) -> tuple[int, int]:
    """(block_n, consumers) with "auto" (the defaults) decided by the head dim: at d = 64 three consumers
    with 128-key tiles, at d = 128 two with 176-key tiles, each the faster on the H200 (at d = 64 and
    N = 16384, 1.16x against 1.03x cuDNN with two consumers; docs/performance.md). A block_n over 128
    given at d = 64 keeps two consumers."""
    if consumers == "auto":
        consumers = 3 if d == 64 and (block_n == "auto" or int(block_n) <= 128) else 2
    consumers = int(consumers)
    if block_n == "auto":
        block_n = 128 if consumers == 3 else 176
    return int(block_n), consumers


def block_m(consumers: int = 2) -> int:
    """Query rows of a unit: 64 per consumer warpgroup."""
    return 64 * consumers


def smem_bytes(d: int, block_n: int, stages: int, consumers: int = 2) -> int:
    """Dynamic shared memory: the Q tile, `stages` K and V tiles, 2 + 4 x stages mbarriers, the 8-byte
    unit slot, and the slack that lets the kernel round the buffers' start up to the 1024-byte swizzle
    atom."""
    return block_m(consumers) * d * 2 + 2 * stages * block_n * d * 2 + 8 * (2 + 4 * stages) + 8 + SWIZZLE_ATOM


def check_config(block_n: int, stages: int, d: int = 128, consumers: int = 2) -> str | None:
    if block_n not in BLOCK_NS:
        return f"block_n={block_n}: {', '.join(map(str, BLOCK_NS))} (the n of the S = Q Kᵀ wgmma)"
    if stages < 1:
        return f"stages={stages}: at least 1"
    if consumers == 3 and (d != 64 or block_n > 128):
        return (f"consumers=3 with d={d}, block_n={block_n}: three consumers have 160 registers a thread, "
                "enough for S, P and O at d = 64 with K/V tiles of at most 128 keys")
    return None


def name_expression(d: int, block_n: int, stages: int, bf16: bool, causal: bool, overlap: bool,
                    pingpong: bool, chains: int = 1, consumers: int = 2, rescale: int = 0) -> str:
    """The template instantiation NVRTC compiles (and `kbench explain` hands to ptxas)."""
    return _cupy.instance_name("fa3_forward", d, block_n, stages, bf16, causal, overlap, pingpong, chains, consumers,
                               rescale)


def units(case, consumers: int = 2) -> int:
    """The work units: one per block_m(consumers) query rows of each (batch, head)."""
    return -(-case.n // block_m(consumers)) * case.batch * case.heads


def grid(case, persistent: bool, sms: int, consumers: int = 2) -> tuple[int]:
    """One block per SM (persistent: each takes several units), at most one per unit; or one block per
    unit."""
    count = units(case, consumers)
    return (min(count, sms) if persistent else count,)


def tensor_maps(case, q, k, v, block_n: int, consumers: int = 2):
    """Q in boxes of block_m rows, K and V in boxes of block_n rows, 64 columns each, of each head's N x d."""
    heads = case.batch * case.heads

    def spec(t, rows):
        return _tma.Batched3D(case.dtype, t.data_ptr(), case.n, case.d, rows, BOX_COLS, batches=heads)

    return spec(q, block_m(consumers)), spec(k, block_n), spec(v, block_n)


def plan(case, q, k, v, out, block_n, stages, overlap, pingpong, persistent=True, sms=H200_SMS,
         smem_limit=None, chains=1, consumers=2, rescale=0) -> dict:
    """The launch for one case (raises Unsupported): kernel name, grid, block, shared memory, maps."""
    if case.d not in HEAD_DIMS:
        raise Unsupported(f"head dim {case.d}: cuda-fa3 is built for d = 64 and 128")
    reason = check_config(block_n, stages, case.d, consumers)
    if reason:
        raise Unsupported(reason)
    maps = tensor_maps(case, q, k, v, block_n, consumers)
    for name, m in zip("QKV", maps):
        problem = m.problem()
        if problem:
            raise Unsupported(f"TMA cannot read {name}: {problem}")
    if out.data_ptr() % 4:
        raise Unsupported("O must be 4-byte aligned (pairs of elements are stored as one 32-bit word)")
    smem = smem_bytes(case.d, block_n, stages, consumers)
    if smem_limit is not None and smem > smem_limit:
        raise Unsupported(f"needs {smem / 1024:.1f} KiB of shared memory per block (block_n={block_n}, "
                          f"stages={stages}, d={case.d}); this GPU allows {smem_limit / 1024:.1f} KiB")
    if units(case, consumers) > MAX_UNITS:
        raise Unsupported(f"{units(case, consumers):,} units of {block_m(consumers)} query rows (Q tiles x batch "
                          f"x heads): more than {MAX_UNITS:,}")
    g = grid(case, persistent, sms, consumers)
    name = name_expression(case.d, block_n, stages, case.dtype == "bf16", bool(case.causal), bool(overlap),
                           bool(pingpong), chains, consumers, rescale)
    return {"name": name, "grid": g, "block": ((consumers + 1) * 128,), "smem": smem, "maps": maps}


NARROW = 64  # the narrowest wgmma n: a last K/V tile of at most this many keys is multiplied at this width


def narrow(case, tile: int, block_n: int, narrow_tail: bool) -> bool:
    """Whether K/V tile number ``tile``, a unit's last, is multiplied NARROW keys wide (narrow_tile in
    cuda_fa3.cu): it holds at most NARROW keys before N."""
    return bool(narrow_tail) and block_n > NARROW and case.n - tile * block_n <= NARROW


def last_tile(case, block_n: int, narrow_tail: bool) -> str:
    """How the last K/V tile of a row of tiles is multiplied (`NARROW` in cuda_fa3.cu)."""
    last = -(-case.n // block_n) - 1
    keys = case.n - last * block_n
    if keys == block_n:
        return f"full ({block_n} keys)"
    if narrow(case, last, block_n, narrow_tail):
        return (f"{keys} of {block_n} keys: narrow, S by m64n{NARROW}k16 and P V by {NARROW // 16} k-steps, the "
                f"keys past N not multiplied")
    return f"{keys} of {block_n} keys, multiplied at full width (the keys past N masked)"


def kv_tiles_per_block(case, block_n: int) -> str:
    tiles = -(-case.n // block_n)
    if not case.causal:
        return f"{tiles} of {block_n} keys"
    return f"1 to {tiles} of {block_n} keys (causal: up to the diagonal of the block's last row)"


def wgmma_per_call(case, block_n: int, narrow_tail: bool, consumers: int = 2) -> int:
    """Warp-level wgmma instructions one call issues, as ncu counts them (sm__inst_executed_pipe_tensor_op_gmma:
    each of a warpgroup's 4 warps issues every wgmma): per unit and consumer, d / 16 k-steps of S = Q Kᵀ per
    K/V tile and block_n / 16 of O += P V (NARROW / 16 on a narrow last tile)."""
    bm = block_m(consumers)
    q_tiles, all_tiles = -(-case.n // bm), -(-case.n // block_n)
    per_unit_group = 0
    for q_tile in range(q_tiles):
        tiles = all_tiles
        if case.causal:  # up to the tile holding the Q tile's last row (kv_tiles in cuda_fa3.cu)
            tiles = min(all_tiles, (min((q_tile + 1) * bm, case.n) - 1) // block_n + 1)
        last_width = NARROW if narrow(case, tiles - 1, block_n, narrow_tail) else block_n
        per_unit_group += tiles * case.d // 16 + (tiles - 1) * block_n // 16 + last_width // 16
    return per_unit_group * consumers * 4 * case.batch * case.heads


L2_SECTION_BYTES = 32 * 2**20  # the K and V of a causal section's heads, kept within the H200's 60 MiB of L2


def section_heads(case) -> int:
    """Causal units come in sections of this many heads (a power of two, at least 1), as many as keep
    their K and V within L2_SECTION_BYTES together; the longest units of a section run first."""
    kv_bytes = 2 * case.n * case.d * 2
    fit = max(1, L2_SECTION_BYTES // kv_bytes)
    return min(1 << (fit.bit_length() - 1), case.batch * case.heads)


def explain(case, params) -> dict:
    """`kbench explain attention --impl cuda-fa3`: warpgroup roles and registers, wgmma shapes and counts
    per K/V tile, TMA boxes, shared memory per stage, blocks per SM."""
    bn, consumers = resolved(case.d, params["block_n"], params["consumers"])
    stages = params["stages"]
    overlap, pingpong, persistent = bool(params["overlap"]), bool(params["pingpong"]), bool(params["persistent"])
    dynamic = bool(params["dynamic"])
    try:
        p = plan(case, _cupy.PLACEHOLDER, _cupy.PLACEHOLDER, _cupy.PLACEHOLDER, _cupy.PLACEHOLDER, bn, stages,
                 overlap, pingpong, persistent, chains=params["chains"], consumers=consumers,
                 rescale=params["rescale"])
    except Unsupported as exc:
        return {"configuration": f"not runnable: {exc}"}
    d, bm = case.d, block_m(consumers)
    producer_registers, consumer_registers = REGISTERS[consumers]
    ty = "bf16" if case.dtype == "bf16" else "f16"
    blocks, count = p["grid"][0], units(case, consumers)
    kv_tile = bn * d * 2
    work = (f"{-(-case.n // bm)} Q tiles of {bm} rows x {case.batch * case.heads} (batch x heads) = "
            f"{count:,} units" + (f", the longest (last) Q tiles first in sections of {section_heads(case)} "
                                  f"heads" if case.causal else ""))
    figures = {
        "grid": f"{work}; one block each" if not persistent else (
            f"{work}; {blocks} persistent blocks, "
            + ("each taking the next unit nobody has taken from a counter" if dynamic
               else "block b taking units b, b + blocks, ...")
            + f" ({H200_SMS} SMs on an H200, {count / blocks:.2f} units a block), the next unit's Q and K/V "
              f"loaded under this one's last products"),
        "warpgroups": f"1 producer (one thread issues every TMA load; setmaxnreg {producer_registers}) + "
                      f"{consumers} consumers of 64 query rows each (wgmma and softmax; setmaxnreg "
                      f"{consumer_registers})",
        "registers per consumer thread": f"O {d // 2} + S {bn // 2} fp32 accumulators, P {bn // 4} x 32-bit "
                                         f"(16-bit pairs); ptxas reports the count at entry, before setmaxnreg",
        "wgmma per K/V tile and consumer": f"S = Q Kᵀ: {d // 16} x m64n{bn}k16.f32.{ty} (A and B from shared "
                                           f"memory, both K-major); O += P V: {bn // 16} x m64n{d}k16.f32.{ty} "
                                           f"(A = P from registers, B = V MN-major)",
        "wgmma per call": f"{wgmma_per_call(case, bn, bool(params['narrow_tail']), consumers):,} warp-level "
                          f"instructions (each of a warpgroup's 4 warps issues every wgmma, as ncu's "
                          f"sm__inst_executed_pipe_tensor_op_gmma.sum counts them)",
        "K/V tiles per block": kv_tiles_per_block(case, bn),
        "last K/V tile": last_tile(case, bn, bool(params["narrow_tail"])),
        "TMA boxes": f"Q {d // BOX_COLS} x {{64, {bm}, 1}} once; K and V {d // BOX_COLS} x {{64, {bn}, 1}} "
                     f"each per tile ({kv_tile // 1024} KiB a tile), 128-byte swizzle, rows past N zero-filled",
        "pipeline": f"{stages} stage{'s' if stages > 1 else ''} of K + V = {2 * kv_tile // 1024} KiB each, "
                    f"full/empty mbarriers per tile; Q {bm * d * 2 // 1024} KiB; {p['smem']:,} bytes of "
                    f"shared memory with the barriers and 1 KiB of alignment slack",
        "schedule": ("next S = Q Kᵀ issued with the previous O += P V, then the softmax (ptxas puts the wait "
                     "for O += P V before its exponents)" if overlap else "S, softmax, O += P V in sequence")
                    + (f"; the {consumers} consumers take turns at the tensor cores (ping-pong"
                       + (", in a ring)" if consumers > 2 else ")") if pingpong else ""),
        "softmax": f"a thread's {bn // 4} scores of each of its two rows reduced (max, then sum) in "
                   f"{params['chains']} independent chain{'s' if params['chains'] > 1 else ''} of "
                   f"{bn // 4 // params['chains']}, then 2 shuffles for the quad's max; exp2 by ex2.approx; "
                   + ("O rescaled every tile" if not params["rescale"] else
                      f"a row's maximum moved only when a tile passes it by more than 2^{params['rescale']}, "
                      f"O rescaled only by a warp one of whose rows moved"),
    }
    figures.update(_cupy.resource_figures(SOURCE, p["name"], blocks, p["block"][0], p["smem"], arch=ARCH))
    return figures


def _supports(case):
    if case.d not in HEAD_DIMS:
        return f"head dim {case.d} (cuda-fa3 is built for d = 64 and 128)"
    return None


@implementation(
    "attention", "cuda-fa3", backend="cupy", cuda=True, modules=("torch", "cupy"), min_cc=(9, 0),
    dtypes=("fp16", "bf16"), supports=_supports,
    params={"block_n": "auto", "stages": 2, "overlap": 1, "pingpong": 1, "persistent": 1, "dynamic": 1,
            "narrow_tail": 1, "chains": 1, "consumers": "auto", "rescale": 8},
    allowed={"block_n": ("auto", *map(str, BLOCK_NS)), "stages": lambda s: None if s >= 1 else "is fewer than 1 stage",
             "overlap": (0, 1), "pingpong": (0, 1), "persistent": (0, 1), "dynamic": (0, 1), "narrow_tail": (0, 1),
             "chains": (1, 2, 4), "consumers": ("auto", *map(str, CONSUMERS)), "rescale": (0, 8)},
    explain=explain,
    description="FlashAttention-3 style in CUDA C++ (sm_90a): TMA, wgmma, producer + 2 (or 3) consumer warpgroups, "
                "ping-pong and softmax overlapped with the next Q Kᵀ",
)
def cuda_fa3(case, inputs, out, block_n, stages, overlap, pingpong, persistent, dynamic, narrow_tail, chains,
             consumers, rescale):
    import numpy as np
    import torch

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    block_n, consumers = resolved(case.d, block_n, consumers)
    capability = torch.cuda.get_device_capability(q.device)
    if tuple(capability) != (9, 0):
        raise Unsupported(f"wgmma and setmaxnreg exist only on sm_90 (Hopper, built for sm_90a); this GPU is "
                          f"sm_{capability[0]}{capability[1]}")
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
        if not t.is_contiguous():
            raise Unsupported(f"cuda-fa3 reads {name} through a TMA map of a contiguous B x H x N x d tensor")
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    p = plan(case, q, k, v, out, block_n, stages, overlap, pingpong, persistent, sms=sms,
             smem_limit=_cupy.smem_optin_limit(q), chains=chains, consumers=consumers, rescale=rescale)
    kernel = _cupy.compiled(str(SOURCE), p["name"], ARCH)
    kernel.max_dynamic_shared_size_bytes = p["smem"]
    maps = [_tma.encode(spec) for spec in p["maps"]]
    # The dynamic schedule's counter {next unit, blocks done}: zero before each launch, set back to zero
    # by its last block (so one launch at a time may use it: this closure's own).
    scheduler = torch.zeros(2, dtype=torch.int32, device=q.device) if persistent and dynamic else None
    args = (*maps, *_cupy.pointer_args(out), np.int32(case.n), np.int32(case.batch * case.heads),
            np.float32(case.d**-0.5 * LOG2_E), np.int32(narrow_tail), np.int32(section_heads(case)),
            np.uint64(scheduler.data_ptr() if scheduler is not None else 0))
    run = _cupy.launcher(kernel, p["grid"], p["block"], args, smem=p["smem"])
    run.scheduler = scheduler  # the kernel holds only its address: kept alive with the closure
    run.config = {
        "block_m": block_m(consumers), "block_n": block_n, "stages": stages, "overlap": bool(overlap),
        "pingpong": bool(pingpong), "persistent": bool(persistent), "dynamic": bool(persistent and dynamic),
        "narrow_tail": bool(narrow_tail), "chains": chains, "consumers": consumers, "rescale": rescale,
        **_cupy.kernel_config(kernel, p["grid"], p["block"], p["smem"]),
    }
    return run
