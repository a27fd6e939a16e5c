"""FlashAttention-2 forward in Triton.

Each program owns one BLOCK_M tile of queries of one (batch, head) and loops
over the K/V tiles with an online softmax: a running row max ``m`` and row sum
``l`` rescale the fp32 accumulator, and the division by ``l`` happens once at
the end (deferred normalisation). The scale is folded into base-2 exponentials
(exp(x·s) = exp2(x·s·log2 e)), and on unmasked tiles applied in the FMA that subtracts
the row max (the max is taken of the unscaled scores): one multiply per score fewer.

Loads: on sm_90 and later (fp16/bf16, 16-byte aligned), Q, K, V and O go through tensor
descriptors built in the kernel (TMA: whole tiles copied to shared memory by the copy
engine, rows past N read as zeros, never written); elsewhere, and on the CPU interpreter
unless ``--param tma=1``, through masked pointer loads. ``--param tma=0`` forces those.

Masks cost work in every tile they touch, so the K/V loop runs in two phases:
the whole tiles without any mask, then the tiles that need one. Non-causal:
every whole tile, then the tail past the last multiple of BLOCK_N (if N has
one). Causal: the tiles left of the diagonal block (no mask: every key is at or
before every query of the tile), then the tiles on the
diagonal with the causal mask; tiles right of it are never loaded.

Tile shapes: on a GPU, Triton's autotuner picks one of CONFIGS per (N, head
dim, causal, dtype), and keeps its timings in Triton's cache directory
(``cache_results=True``), so a later process does not tune again. The choice,
the tuning time, whether it came from the cache and every candidate's median as the
autotuner timed it (``candidates_ms``: how close the runners-up were) go in the record's config.
``--param config=3`` pins CONFIGS[3] instead (on the CPU interpreter too, which
is how the tests check every configuration the autotuner can pick).

The K/V loop is not warp-specialized: Triton 3.6's ``tl.range(..., warp_specialize=True)`` on it
gave NaN in most outputs at N = 4096, d = 128 (non-causal, fp16) on an H200, and ran causal attention
at 0.74x cuDNN against 0.82x without.
"""

import time
from pathlib import Path

from kbench.loader import load_helper
from kbench.registry import Unsupported, implementation

try:  # Triton is optional: without it this file still registers, and the impl SKIPs.
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised only where triton is absent
    triton = None

utils = load_helper(Path(__file__).parent.parent / "_triton_utils.py")

LOG2_E = 1.4426950408889634
HEAD_DIMS = (16, 32, 64, 128, 256)  # tl.arange needs a power of two
# --param rescale: the largest margin (log2 units) by which a tile's scores may pass a row's maximum without
# moving it; P is then at most 2^margin, which fp16 holds up to 2^15.
MAX_RESCALE = 15

# What the autotuner chooses from: each entry was the fastest, or within 3 %, at some H200 case
# (fp16, d 64 and 128, causal and not; docs/performance.md), where `kbench explain attention
# --impl triton-fa2` shows what each costs an SM. One that does not fit a GPU is timed
# as infinitely slow by the autotuner and never chosen.
CONFIGS = (
    # One program an SM (shared memory): its two warpgroups meet at a barrier every K/V tile.
    {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3},  # d=64
    {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 3},
    {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 4},  # d=64
    {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3},  # d=64 non-causal (spills 68 bytes at d=128)
    # Two or three programs an SM: while one runs its softmax, another's matrix products keep the
    # tensor cores busy, as FlashAttention-3's two ping-ponging warpgroups do by hand. maxnreg caps
    # a thread's registers so that one more program fits.
    {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3},  # d=64 causal
    {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2, "maxnreg": 128},
    {"BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 4, "num_stages": 1},  # d=128 non-causal
    {"BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 4, "num_stages": 1, "maxnreg": 168},  # d=128 causal, three an SM
)
# The interpreter runs every program on the CPU, and its cost is per program and per K/V tile (it
# patches Triton's language for each call it interprets), not per element: fewer, larger tiles are
# faster there. 128 x 128 runs the README's N=256 case about 3x faster than 64 x 64 did; tests pin the
# other configurations (--param config=N) to check each one's tails and masks.
CPU_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4, "num_stages": 1}

# Tuning time of each autotuner key, first seen in this process (later makes of the same
# case reuse the choice and would otherwise report 0 s).
_tuning_log: dict = {}


def _launch_options(cfg) -> dict:
    """The compile options of a CONFIGS entry (maxnreg only where it sets one)."""
    return {key: cfg[key] for key in ("num_warps", "num_stages", "maxnreg") if key in cfg}


if triton is not None:

    _dot = utils.dot

    @triton.jit
    def _attend(acc, l_i, m_i, q, k_src, v_src, stride_kn, stride_vn, lo, hi, offs_m, offs_n, offs_d,
                n_ctx, qk_scale_log2, BLOCK_N: tl.constexpr, MASK: tl.constexpr, PRECISION: tl.constexpr,
                TMA: tl.constexpr, RESCALE: tl.constexpr):
        """K/V tiles lo .. hi into the running (acc, l, m). MASK: 0 none, 1 the N tail, 2 causal and tail.
        TMA: k_src and v_src are tensor descriptors (rows past n_ctx read as zeros), else base pointers.
        RESCALE > 0: the rows' maxima move (and acc and l are rescaled) only in a tile where some row's
        scores pass its maximum by more than RESCALE (log2 units), as FlashAttention-4 does; otherwise the
        tile's P is taken against the old maxima, at most 2^RESCALE, and the rescale's multiplies are skipped."""
        for start_n in tl.range(lo, hi, BLOCK_N):
            cols = start_n + offs_n
            col_ok = cols < n_ctx
            # K as [HEAD_DIM, BLOCK_N] so S = Q·Kᵀ is a plain dot.
            if TMA:
                k = k_src.load([start_n, 0]).T
            elif MASK == 0:
                k = tl.load(k_src + cols[None, :] * stride_kn + offs_d[:, None])
            else:
                k = tl.load(k_src + cols[None, :] * stride_kn + offs_d[:, None], mask=col_ok[None, :], other=0.0)
            qk = _dot(q, k, tl.zeros([q.shape[0], BLOCK_N], dtype=tl.float32), PRECISION)
            if MASK == 0:
                # The scale applied in the same FMA that subtracts the max (the row max of the
                # unscaled scores, scaled once: the scale is positive).
                m_tile = tl.max(qk, 1) * qk_scale_log2
            else:
                qk = qk * qk_scale_log2
                if MASK == 1:
                    qk = tl.where(col_ok[None, :], qk, float("-inf"))
                else:
                    qk = tl.where(col_ok[None, :] & (cols[None, :] <= offs_m[:, None]), qk, float("-inf"))
                m_tile = tl.max(qk, 1)
            if RESCALE > 0:
                # Comparisons, not differences: a row with no visible key yet (-inf) never makes NaN here.
                if tl.max((m_tile > m_i + RESCALE).to(tl.int32), 0) > 0:
                    m_new = tl.maximum(m_i, m_tile)
                    alpha = tl.math.exp2(m_i - m_new)
                    l_i = l_i * alpha
                    acc = acc * alpha[:, None]
                    m_i = m_new
                m_new = m_i
            else:
                m_new = tl.maximum(m_i, m_tile)
                alpha = tl.math.exp2(m_i - m_new)
                l_i = l_i * alpha
                acc = acc * alpha[:, None]
            if MASK == 0:
                p = tl.math.exp2(qk * qk_scale_log2 - m_new[:, None])
            else:
                p = tl.math.exp2(qk - m_new[:, None])
            l_i = l_i + tl.sum(p, 1)

            if TMA:
                v = v_src.load([start_n, 0])
            elif MASK == 0:
                v = tl.load(v_src + cols[:, None] * stride_vn + offs_d[None, :])
            else:
                v = tl.load(v_src + cols[:, None] * stride_vn + offs_d[None, :], mask=col_ok[:, None], other=0.0)
            acc = _dot(p.to(v.dtype), v, acc, PRECISION)
            m_i = m_new
        return acc, l_i, m_i

    @triton.jit
    def _fa2_forward(
        Q, K, V, O,
        stride_qb, stride_qh, stride_qn,
        stride_kb, stride_kh, stride_kn,
        stride_vb, stride_vh, stride_vn,
        stride_ob, stride_oh, stride_on,
        heads, n_ctx, qk_scale_log2,
        HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr, TMA: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr, RESCALE: tl.constexpr,
    ):
        start_m = tl.program_id(0)
        bh = tl.program_id(1)
        b = bh // heads
        h = bh % heads
        q_base = Q + b * stride_qb + h * stride_qh
        k_base = K + b * stride_kb + h * stride_kh
        v_base = V + b * stride_vb + h * stride_vh
        o_base = O + b * stride_ob + h * stride_oh

        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, HEAD_DIM)
        row_ok = offs_m < n_ctx

        # The last dimension is contiguous (the wrapper checks it).
        if TMA:
            # One (n_ctx x HEAD_DIM) descriptor per tensor of this (batch, head): TMA copies whole
            # tiles to shared memory, reads rows past n_ctx as zeros and never writes them.
            k_src = tl.make_tensor_descriptor(k_base, shape=[n_ctx, HEAD_DIM], strides=[stride_kn, 1],
                                              block_shape=[BLOCK_N, HEAD_DIM])
            v_src = tl.make_tensor_descriptor(v_base, shape=[n_ctx, HEAD_DIM], strides=[stride_vn, 1],
                                              block_shape=[BLOCK_N, HEAD_DIM])
            q_src = tl.make_tensor_descriptor(q_base, shape=[n_ctx, HEAD_DIM], strides=[stride_qn, 1],
                                              block_shape=[BLOCK_M, HEAD_DIM])
            q = q_src.load([start_m * BLOCK_M, 0])
        else:
            k_src = k_base
            v_src = v_base
            q = tl.load(q_base + offs_m[:, None] * stride_qn + offs_d[None, :], mask=row_ok[:, None], other=0.0)

        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

        if CAUSAL:
            # Every key before the K/V tile holding this Q tile's first row is before every query of
            # the tile (no mask); from that tile on, the causal mask. BLOCK_N divides BLOCK_M: the
            # diagonal's BLOCK_M / BLOCK_N tiles; BLOCK_N > BLOCK_M: the one tile holding the diagonal.
            diagonal = (start_m * BLOCK_M // BLOCK_N) * BLOCK_N
            acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_src, v_src, stride_kn, stride_vn, 0, diagonal,
                                    offs_m, offs_n, offs_d, n_ctx, qk_scale_log2, BLOCK_N, 0, PRECISION, TMA, RESCALE)
            acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_src, v_src, stride_kn, stride_vn, diagonal,
                                    tl.minimum(start_m * BLOCK_M + BLOCK_M, n_ctx), offs_m, offs_n, offs_d, n_ctx,
                                    qk_scale_log2, BLOCK_N, 2, PRECISION, TMA, RESCALE)
        else:
            whole = (n_ctx // BLOCK_N) * BLOCK_N
            acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_src, v_src, stride_kn, stride_vn, 0, whole,
                                    offs_m, offs_n, offs_d, n_ctx, qk_scale_log2, BLOCK_N, 0, PRECISION, TMA, RESCALE)
            # EVEN_N (N a multiple of BLOCK_N): no masked tail, and no second loop in the kernel.
            if not EVEN_N:
                acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_src, v_src, stride_kn, stride_vn, whole, n_ctx,
                                        offs_m, offs_n, offs_d, n_ctx, qk_scale_log2, BLOCK_N, 1, PRECISION, TMA, RESCALE)

        acc = acc / l_i[:, None]
        if TMA:
            o_dst = tl.make_tensor_descriptor(o_base, shape=[n_ctx, HEAD_DIM], strides=[stride_on, 1],
                                              block_shape=[BLOCK_M, HEAD_DIM])
            o_dst.store([start_m * BLOCK_M, 0], acc.to(O.dtype.element_ty))
        else:
            tl.store(o_base + offs_m[:, None] * stride_on + offs_d[None, :], acc.to(O.dtype.element_ty),
                     mask=row_ok[:, None])

    _fa2_autotuned = triton.autotune(
        configs=[triton.Config({"BLOCK_M": c["BLOCK_M"], "BLOCK_N": c["BLOCK_N"]}, **_launch_options(c))
                 for c in CONFIGS],
        key=["n_ctx", "HEAD_DIM", "CAUSAL", "PRECISION", "TMA", "RESCALE"],  # and the tensors' dtypes, which Triton adds
        **utils.autotune_cache_option(),
    )(triton.heuristics({"EVEN_N": lambda args: even_n(args["n_ctx"], args["BLOCK_N"])})(_fa2_forward))


def even_n(n: int, block_n: int) -> bool:
    """Whether the K/V tiles cover N exactly (no masked tail tile): the kernel's EVEN_N."""
    return n % block_n == 0


def pinned_config(choice, device_type) -> dict | None:
    """The tile configuration ``--param config=`` asks for; None: the autotuner's (on a GPU)."""
    if choice in ("auto", None):
        return CPU_CONFIG if device_type == "cpu" else None
    try:
        return CONFIGS[int(choice)]
    except (ValueError, IndexError):
        raise Unsupported(f"config={choice!r}: use auto or 0 .. {len(CONFIGS) - 1}") from None


def tma_reason(choice, tensors, dtype: str, device_type: str) -> str | None:
    """Why the TMA path cannot run (None: it can). ``choice``: 'auto', '1' or '0'."""
    if str(choice) == "0":
        return "tma=0 asked for"
    if not hasattr(tl, "make_tensor_descriptor"):
        return f"Triton {triton.__version__} has no tl.make_tensor_descriptor"
    if device_type == "cpu" and str(choice) == "auto":
        return "the interpreter takes the pointer path unless tma=1"  # CI tests both on purpose
    if device_type == "cuda":
        import torch

        if torch.cuda.get_device_capability(tensors[0].device)[0] < 9:
            return "TMA needs sm_90 or later"
    if dtype not in ("fp16", "bf16"):
        return f"{dtype}: the TMA path is for fp16 and bf16"
    size = tensors[0].element_size()
    for t in tensors:  # TMA: 16-byte aligned base of every (batch, head), row strides of 16-byte multiples
        if t.data_ptr() % 16 or any(st * size % 16 for st in t.stride()[:-1]):
            return "a tensor's base or strides are not 16-byte aligned"
    return None


def explain(case, params) -> dict:
    """`kbench explain attention --impl triton-fa2`: the launch on a GPU, without running it. Autotuned
    (no --param config): every configuration's registers, spills, shared memory and programs an SM on
    sm_90, so the autotuner's choices can be read side by side; --param config=N: that one's launch."""
    cfg = pinned_config(params.get("config", "auto"), "cuda")
    tma = case.dtype in ("fp16", "bf16") and str(params.get("tma", "auto")) != "0"  # as on an H200
    rescale = int(params.get("rescale", 0))
    if cfg is None:
        return {
            "configuration": f"autotuned on first use among {len(CONFIGS)} tile shapes (BLOCK_M x BLOCK_N, warps, "
                             "stages; below, what each costs an SM; --param config=N pins one and shows its launch)",
            "matrix instructions": "tl.dot: wgmma on sm_90 (Triton picks the layout; no mma.sync count)",
            **_every_configuration(case, tma, rescale),
        }
    q_tiles = -(-case.n // cfg["BLOCK_M"])
    return {
        "grid": f"{q_tiles} Q tiles x {case.batch * case.heads} (batch x heads) = "
                f"{q_tiles * case.batch * case.heads} programs",
        "program": f"{cfg['num_warps']} warps; a {cfg['BLOCK_M']}-row Q tile against {cfg['BLOCK_N']}-key K/V tiles, "
                   f"{cfg['num_stages']} pipeline stage{'s' if cfg['num_stages'] > 1 else ''}"
                   + (f", at most {cfg['maxnreg']} registers a thread" if "maxnreg" in cfg else ""),
        "K/V tiles per program": f"{-(-case.n // cfg['BLOCK_N'])}" + (" (causal: up to the diagonal)" if case.causal else ""),
        "shared memory (estimate)": _smem_estimate(case, cfg, tma),
        "loads": "TMA tensor descriptors on sm_90+ for fp16/bf16 (--param tma=0: masked pointer loads)",
        "matrix instructions": "tl.dot: wgmma on sm_90 (Triton picks the layout; no mma.sync count)",
        **_compiled_figures(case, cfg, tma, q_tiles * case.batch * case.heads, rescale),
    }


def compiled_resources(case, cfg, tma: bool, rescale: int = 0) -> dict | None:
    """ptxas's registers and spills and Triton's shared memory of one configuration for this case on
    sm_90, compiled here without a GPU (kbench.kernel_resources.from_triton); None under Triton's
    interpreter or without Triton. The arguments are those of contiguous [B, H, N, d] tensors."""
    from kbench.kernel_resources import from_triton

    if triton is None:
        return None
    args = {name: f"*{case.dtype}" for name in "QKVO"}
    for t in "qkvo":
        args.update({f"stride_{t}b": case.heads * case.n * case.d, f"stride_{t}h": case.n * case.d,
                     f"stride_{t}n": case.d})
    args.update(heads=case.heads, n_ctx=case.n, qk_scale_log2=case.d**-0.5 * LOG2_E)
    constexprs = {"HEAD_DIM": case.d, "CAUSAL": case.causal, "PRECISION": utils.dot_precision(case.dtype),
                  "TMA": tma, "BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"],
                  "EVEN_N": even_n(case.n, cfg["BLOCK_N"]), "RESCALE": rescale}
    return from_triton(_fa2_forward, args, constexprs, _launch_options(cfg))


NOT_COMPILED = "Triton's interpreter is on, TRITON_INTERPRET, or no Triton"


def _compiled_figures(case, cfg, tma: bool, programs: int, rescale: int = 0) -> dict:
    from kbench.kernel_resources import launch_figures
    from kbench.occupancy import blocks_per_sm

    try:
        res = compiled_resources(case, cfg, tma, rescale)
    except RuntimeError as exc:
        return {"registers per thread": f"could not compile: {exc}"}
    if res is None:
        # Without the compile, what the shared-memory estimate alone allows: registers may allow fewer.
        fit = blocks_per_sm(cfg["num_warps"] * 32, 0, _smem_bytes(case, cfg, tma), (9, 0))
        return {"registers per thread": f"unknown here ({NOT_COMPILED}): run on the GPU, or unset TRITON_INTERPRET",
                "blocks per SM (sm_90)": f"at most {fit['blocks_per_sm']}, limited by "
                                         f"{' and '.join(fit['limited_by'])} (the shared-memory estimate; "
                                         "the registers may allow fewer)"}
    return launch_figures(res, programs, cfg["num_warps"] * 32, res["dynamic_smem_bytes"])


def _every_configuration(case, tma: bool, rescale: int = 0) -> dict:
    """One line per CONFIGS entry: what a program of it costs an SM on sm_90 for this case and how many
    programs an SM holds. With one, the two warpgroups of a 128-row tile meet at a barrier every K/V
    tile and the tensor cores idle during the softmax; with two or more, one program's softmax
    overlaps another's matrix products; a configuration that spills ran several times slower on the
    H200. Compiled (ptxas's registers and spills, Triton's shared memory) where a GPU is present: a
    compile takes about a second, paid where the kernel is about to run. Elsewhere the shared-memory
    estimate and the programs it allows (--param config=N still compiles that one, GPU or not)."""
    from kbench.occupancy import blocks_per_sm
    from kbench.runner import host_has_gpu

    compile_here = host_has_gpu()
    figures, how = {}, None
    for index, cfg in enumerate(CONFIGS):
        name = (f"config {index}: {cfg['BLOCK_M']}x{cfg['BLOCK_N']}, {cfg['num_warps']} warps, "
                f"{cfg['num_stages']} stage{'s' if cfg['num_stages'] > 1 else ''}"
                + (f", maxnreg {cfg['maxnreg']}" if "maxnreg" in cfg else ""))
        threads = cfg["num_warps"] * 32
        res, why = None, "no GPU here"
        if compile_here:
            try:
                res = compiled_resources(case, cfg, tma, rescale)
            except RuntimeError as exc:
                figures[name] = f"could not compile: {exc}"
                continue
            why = NOT_COMPILED
        if res is None:
            smem = _smem_bytes(case, cfg, tma)
            fit = blocks_per_sm(threads, 0, smem, (9, 0))  # registers unknown: not a limit here
            figures[name] = (f"about {smem:,} bytes of shared memory: at most {fit['blocks_per_sm']} "
                             f"program{'s' if fit['blocks_per_sm'] != 1 else ''} an SM "
                             f"({' and '.join(fit['limited_by'])})")
            how = how or (f"shared memory estimated, registers unknown ({why}): --param config=N, or "
                          f"config=0,...,{len(CONFIGS) - 1}, compiles each for sm_90 with Triton's ptxas")
            continue
        smem = res["dynamic_smem_bytes"]
        fit = blocks_per_sm(threads, res["registers"], smem, (9, 0))
        figures[name] = (f"{res['registers']} registers, {res['spill_stores']} bytes spilled, {smem:,} bytes of "
                         f"shared memory: {fit['blocks_per_sm']} program{'s' if fit['blocks_per_sm'] != 1 else ''} "
                         f"an SM ({' and '.join(fit['limited_by'])})" + ("; SPILLS" if res["spill_stores"] else ""))
        how = how or f"{res['source']}, {'TMA' if tma else 'pointer-load'} path"
    return {"resources of each configuration (sm_90)": how or "none compiled", **figures}


def _smem_parts(case, cfg, tma: bool) -> tuple[int, int, int]:
    """(Q's tile, one K or V tile, buffers of each) in bytes, as Triton 3.6's pipeliner allocates them on
    sm_90: TMA path, num_stages buffers; pointer path (cp.async), num_stages - 1 (see _smem_estimate)."""
    from kbench.dtypes import ELEMENT_BYTES

    e = ELEMENT_BYTES[case.dtype]
    buffers = cfg["num_stages"] if tma else max(1, cfg["num_stages"] - 1)
    return cfg["BLOCK_M"] * case.d * e, cfg["BLOCK_N"] * case.d * e, buffers


def _smem_bytes(case, cfg, tma: bool) -> int:
    """Shared memory a program (one buffer: K and V take turns in it)."""
    q, tile, buffers = _smem_parts(case, cfg, tma)
    return q + (tile if buffers == 1 else 2 * tile * buffers)


def _smem_estimate(case, cfg, tma: bool) -> str:
    """Shared memory a program, as Triton 3.6's pipeliner allocates it on sm_90. TMA path: Q's tile plus
    num_stages buffers of K and V (one stage: K and V take turns in one buffer); 229,376 bytes for
    config 1 at d=128 fp16, where ncu read 230,400 on the H200 (the rest: barriers). Pointer path
    (cp.async): num_stages - 1 buffers; 163,840 for config 1, as ncu read it before the TMA path existed."""
    q, tile, buffers = _smem_parts(case, cfg, tma)
    path = "TMA" if tma else "pointer loads"
    if buffers == 1:
        return f"about {q + tile:,} bytes ({path}): Q {q:,} + one {tile:,}-byte buffer K and V take turns in"
    kv = 2 * tile * buffers
    return f"about {q + kv:,} bytes ({path}): Q {q:,} + K/V {kv:,} ({buffers} buffers of each)"


def _supports(case):
    if case.d not in HEAD_DIMS:
        return f"head dim {case.d} is not a power of two from 16 to 256"
    return None


@implementation("attention", "triton-fa2", backend="triton", modules=("torch", "triton"),
                supports=_supports, explain=explain, params={"config": "auto", "tma": "auto", "rescale": 0},
                # What pinned_config and tma_reason take, checked by --param before anything runs.
                allowed={"config": ("auto", *map(str, range(len(CONFIGS)))), "tma": ("auto", "0", "1"),
                         "rescale": lambda r: None if 0 <= r <= MAX_RESCALE else f"is outside 0-{MAX_RESCALE}"},
                description="FlashAttention-2 forward in Triton (online softmax, exp2, deferred normalisation, "
                            "masks only where needed, autotuned tiles)")
def triton_fa2(case, inputs, out, config="auto", tma="auto", rescale=0):
    if triton is None:
        raise Unsupported("triton is not installed")
    import torch

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    for t in (q, k, v, out):
        if t.stride(-1) != 1:
            raise Unsupported("triton-fa2 needs a contiguous last dimension")
    cfg = pinned_config(config, q.device.type)
    if str(tma) not in ("auto", "0", "1"):
        raise Unsupported(f"tma={tma!r}: use auto, 0 or 1")
    no_tma = tma_reason(tma, (q, k, v, out), case.dtype, q.device.type)
    if no_tma and str(tma) == "1":
        raise Unsupported(f"tma=1: {no_tma}")
    use_tma = no_tma is None
    if use_tma:
        # Global memory Triton asks for, at every launch, to build the tensor descriptors inside the kernel:
        # on the inputs' device, worked out here rather than in each timed call.
        utils.global_memory_from_torch(q.device)
    qk_scale_log2 = case.d**-0.5 * LOG2_E
    precision = utils.dot_precision(case.dtype)  # fp32: exact, never silently TF32
    args = (q, k, v, out,
            q.stride(0), q.stride(1), q.stride(2),
            k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2),
            out.stride(0), out.stride(1), out.stride(2),
            case.heads, case.n, qk_scale_log2)

    if cfg is not None:
        grid = (triton.cdiv(case.n, cfg["BLOCK_M"]), case.batch * case.heads)

        def run():
            _fa2_forward[grid](*args, HEAD_DIM=case.d, CAUSAL=case.causal, PRECISION=precision, TMA=use_tma,
                               BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
                               EVEN_N=even_n(case.n, cfg["BLOCK_N"]), RESCALE=int(rescale), **_launch_options(cfg))

        run.config = dict(cfg, config=config, tma=use_tma, rescale=int(rescale), triton=triton.__version__)
        return run

    def tiles(meta):
        return (triton.cdiv(case.n, meta["BLOCK_M"]), case.batch * case.heads)

    launch = {"HEAD_DIM": case.d, "CAUSAL": case.causal, "PRECISION": precision, "TMA": use_tma,
              "RESCALE": int(rescale)}

    def run():
        _fa2_autotuned[tiles](*args, **launch)

    # Tune now (set-up, outside every timing): the first call of a new key benchmarks each
    # config, or reads the timings Triton's cache kept from an earlier process.
    key = (case.n, case.d, case.causal, case.dtype, use_tma, int(rescale))
    _fa2_autotuned.bench_time = None
    started = time.perf_counter()
    run()
    torch.cuda.synchronize()
    if key not in _tuning_log:
        benchmarked = _fa2_autotuned.bench_time is not None
        _tuning_log[key] = {"tuning_seconds": round(time.perf_counter() - started, 3),
                            "tuned_here": benchmarked,  # False: Triton's on-disk cache had the timings
                            "candidates": len(CONFIGS)}
    best = _fa2_autotuned.best_config
    chosen = _as_config(best)
    run.config = dict(chosen, config="auto", tma=use_tma, rescale=int(rescale), chosen=CONFIGS.index(chosen) if chosen in CONFIGS else None,
                      triton=triton.__version__, candidates_ms=_candidate_medians(_fa2_autotuned), **_tuning_log[key])
    return run


def _as_config(config) -> dict:
    """A triton.Config as an entry of CONFIGS."""
    as_dict = {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}
    if getattr(config, "maxnreg", None) is not None:
        as_dict["maxnreg"] = config.maxnreg
    return as_dict


def _candidate_medians(tuner) -> dict:
    """The autotuner's median time (ms) of each configuration it timed (or read back from Triton's
    cache) for the last key, by index in CONFIGS: how close the runners-up were."""
    medians = {}
    for config, timing in (getattr(tuner, "configs_timings", None) or {}).items():
        as_dict = _as_config(config)
        median = timing[0] if isinstance(timing, (list, tuple)) else timing
        if as_dict in CONFIGS and median is not None:
            medians[str(CONFIGS.index(as_dict))] = round(float(median), 4)
    return medians
