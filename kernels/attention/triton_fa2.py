"""FlashAttention-2 forward in Triton.

Each program owns one BLOCK_M tile of queries of one (batch, head) and loops
over the K/V tiles with an online softmax: a running row max ``m`` and row sum
``l`` rescale the fp32 accumulator, and the division by ``l`` happens once at
the end (deferred normalisation). The scale is folded into base-2 exponentials
(exp(x·s) = exp2(x·s·log2 e)). Tails of any N are masked; with ``causal`` the
loop stops at the diagonal, so fully masked K/V tiles are never loaded.
"""

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

if triton is not None:

    _dot = utils.dot

    @triton.jit
    def _fa2_forward(
        Q, K, V, O,
        stride_qb, stride_qh, stride_qn,
        stride_kb, stride_kh, stride_kn,
        stride_vb, stride_vh, stride_vn,
        stride_ob, stride_oh, stride_on,
        heads, n_ctx, qk_scale_log2,
        HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
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
        q = tl.load(q_base + offs_m[:, None] * stride_qn + offs_d[None, :], mask=row_ok[:, None], other=0.0)

        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

        if CAUSAL:
            hi = tl.minimum((start_m + 1) * BLOCK_M, n_ctx)
        else:
            hi = n_ctx
        for start_n in range(0, hi, BLOCK_N):
            cols = start_n + offs_n
            col_ok = cols < n_ctx
            # K loaded transposed ([HEAD_DIM, BLOCK_N]) so S = Q·Kᵀ is a plain dot.
            k = tl.load(k_base + cols[None, :] * stride_kn + offs_d[:, None], mask=col_ok[None, :], other=0.0)
            s = _dot(q, k, tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32), PRECISION) * qk_scale_log2
            keep = col_ok[None, :]
            if CAUSAL:
                keep = keep & (cols[None, :] <= offs_m[:, None])
            s = tl.where(keep, s, float("-inf"))

            m_new = tl.maximum(m_i, tl.max(s, 1))
            p = tl.math.exp2(s - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None]

            v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :], mask=col_ok[:, None], other=0.0)
            acc = _dot(p.to(v.dtype), v, acc, PRECISION)
            m_i = m_new

        acc = acc / l_i[:, None]
        tl.store(o_base + offs_m[:, None] * stride_on + offs_d[None, :], acc.to(O.dtype.element_ty),
                 mask=row_ok[:, None])


def config_for(case, device_type):
    """Tile shape and launch parameters for a case (fixed here; autotuning is issue 10's)."""
    if device_type == "cpu":
        # The interpreter runs every program on the CPU: fewer, larger tiles are faster there.
        return {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 1}
    if case.d <= 64:
        return {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}
    return {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3}


def explain(case, params) -> dict:
    """`kbench explain attention --impl triton-fa2`: the launch on a GPU, without running it."""
    cfg = config_for(case, "cuda")
    q_tiles = -(-case.n // cfg["BLOCK_M"])
    return {
        "grid": f"{q_tiles} Q tiles x {case.batch * case.heads} (batch x heads) = "
                f"{q_tiles * case.batch * case.heads} programs",
        "program": f"{cfg['num_warps']} warps; a {cfg['BLOCK_M']}-row Q tile against {cfg['BLOCK_N']}-key K/V tiles, "
                   f"{cfg['num_stages']} pipeline stages",
        "K/V tiles per program": f"{-(-case.n // cfg['BLOCK_N'])}" + (" (causal: up to the diagonal)" if case.causal else ""),
        "matrix instructions": "tl.dot: wgmma on sm_90 (Triton picks the layout; no mma.sync count)",
    }


def _supports(case):
    if case.d not in HEAD_DIMS:
        return f"head dim {case.d} is not a power of two from 16 to 256"
    return None


@implementation("attention", "triton-fa2", backend="triton", modules=("torch", "triton"),
                supports=_supports, explain=explain,
                description="FlashAttention-2 forward in Triton (online softmax, exp2, deferred normalisation)")
def triton_fa2(case, inputs, out):
    if triton is None:
        raise Unsupported("triton is not installed")
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    for t in (q, k, v, out):
        if t.stride(-1) != 1:
            raise Unsupported("triton-fa2 needs a contiguous last dimension")
    cfg = config_for(case, q.device.type)
    grid = (triton.cdiv(case.n, cfg["BLOCK_M"]), case.batch * case.heads)
    qk_scale_log2 = case.d**-0.5 * LOG2_E
    precision = utils.dot_precision(case.dtype)  # fp32: exact, never silently TF32

    def run():
        _fa2_forward[grid](
            q, k, v, out,
            q.stride(0), q.stride(1), q.stride(2),
            k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2),
            out.stride(0), out.stride(1), out.stride(2),
            case.heads, case.n, qk_scale_log2,
            HEAD_DIM=case.d, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
            CAUSAL=case.causal, PRECISION=precision,
            num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
        )

    run.config = dict(cfg, triton=triton.__version__)
    return run
