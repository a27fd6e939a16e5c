"""Quantizing K and V into the cache in Triton: the fp16 values read once, each group's fp16 scale and
minimum and every code written from registers.

K's groups run along the tokens and V's along the channels, so each has its own kernel (one launch
each):

- ``_quantize_k``: one program per (sequence x head, group of ``group`` tokens), over every channel,
  CHUNK tokens at a time: a first pass takes each channel's minimum and maximum, a second (the same
  tiles again, which the first left in L1/L2) writes the codes. A group of any length fits: it is only
  walked in more chunks.
- ``_quantize_v``: one program per (sequence x head, BLOCK_T tokens), each token's whole row in
  registers; each group of channels' minimum and maximum is taken in turn (a channel's group is its
  index // group, so a group that ends inside an int4 byte pair needs nothing special), then the codes
  of the whole row at once.

Everything is fp32: the scale is (max - min) / (2^bits - 1) rounded to fp16, the codes floor(t + 0.5)
of t = (x - minimum) / scale against the stored fp16 pair. Exact ties therefore round up where the
definition rounds to even; the suite accepts either (nothing in the format depends on it), as it does
the last-bit differences of fp32 division near a tie. int4 codes are paired along the channels
(tl.reshape into pairs, tl.split), channel 2j into the low nibble; int2 codes four a byte, channel 4j
into the lowest two bits.
"""

from kbench.loader import BUILTIN_SUITES, load_helper
from kbench.registry import Unsupported, implementation

try:  # Triton is optional: without it this file still registers, and the impl SKIPs.
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised only where triton is absent
    triton = None

# The cache's format: where each of its tensors goes in the output buffer.
kv = load_helper(BUILTIN_SUITES / "_common" / "kv_quantization.py")

TILE = 4096  # elements of a program's tile (128 a thread at 4 warps): tokens x channels
WARPS = 4

if triton is not None:

    @triton.jit
    def _codes(x, minimum, scale, LEVELS: tl.constexpr):
        """round((x - minimum) / scale), half up, clamped to the codes, as uint8; 0 where the scale is 0
        (a constant group: every code decodes to its minimum)."""
        nonzero = scale > 0
        t = (x - minimum) / tl.where(nonzero, scale, 1.0)
        code = tl.minimum(tl.maximum(tl.floor(t + 0.5), 0.0), LEVELS)
        return tl.where(nonzero, code, 0.0).to(tl.uint8)

    @triton.jit
    def _store_codes(Codes, rows, rows_ok, codes, D, ROWS: tl.constexpr, BLOCK_D: tl.constexpr,
                     BITS: tl.constexpr):
        """codes [ROWS, BLOCK_D] into their tokens' rows of the cache: a byte a code, or two or four a byte."""
        if BITS == 8:
            cols = tl.arange(0, BLOCK_D)
            tl.store(Codes + rows[:, None] * D + cols[None, :], codes,
                     mask=rows_ok[:, None] & (cols < D)[None, :])
        elif BITS == 2:  # channels 4j + 2p + q at [.., p, q]: split on q, then on p
            even, odd = tl.split(tl.reshape(codes, (ROWS, BLOCK_D // 4, 2, 2)))  # channels 4j + 2p and + 1
            c0, c2 = tl.split(even)
            c1, c3 = tl.split(odd)
            cols = tl.arange(0, BLOCK_D // 4)
            tl.store(Codes + rows[:, None] * (D // 4) + cols[None, :],
                     (c0 | (c1 << 2) | (c2 << 4) | (c3 << 6)).to(tl.uint8),
                     mask=rows_ok[:, None] & (cols < D // 4)[None, :])
        else:
            low, high = tl.split(tl.reshape(codes, (ROWS, BLOCK_D // 2, 2)))  # channels 2j and 2j + 1
            cols = tl.arange(0, BLOCK_D // 2)
            tl.store(Codes + rows[:, None] * (D // 2) + cols[None, :], (low | (high << 4)).to(tl.uint8),
                     mask=rows_ok[:, None] & (cols < D // 2)[None, :])

    @triton.jit
    def _quantize_k(X, Codes, Scale, Min, L, D, GROUP, N_GROUPS,
                    LEVELS: tl.constexpr, BITS: tl.constexpr, CHUNK: tl.constexpr, BLOCK_D: tl.constexpr):
        bh = tl.program_id(0).to(tl.int64)  # sequence x head
        g = tl.program_id(1)  # group of tokens
        start = g * GROUP
        end = tl.minimum(start + GROUP, L)
        cols = tl.arange(0, BLOCK_D)
        cols_ok = cols < D
        x_base = X + bh * L * D
        low = tl.full([BLOCK_D], float("inf"), tl.float32)
        high = tl.full([BLOCK_D], float("-inf"), tl.float32)
        for t0 in range(start, end, CHUNK):
            rows = t0 + tl.arange(0, CHUNK)
            ok = (rows < end)[:, None] & cols_ok[None, :]
            x = tl.load(x_base + rows[:, None] * D + cols[None, :], mask=ok, other=0.0).to(tl.float32)
            low = tl.minimum(low, tl.min(tl.where(ok, x, float("inf")), 0))
            high = tl.maximum(high, tl.max(tl.where(ok, x, float("-inf")), 0))
        low = tl.where(cols_ok, low, 0.0)  # padding channels: kept finite
        high = tl.where(cols_ok, high, 0.0)
        scale = tl.maximum((high - low) / LEVELS, 1e-8).to(tl.float16)
        minimum = low.to(tl.float16)
        groups = (bh * N_GROUPS + g) * D + cols
        tl.store(Scale + groups, scale, mask=cols_ok)
        tl.store(Min + groups, minimum, mask=cols_ok)
        code_base = Codes + bh * L * (D * BITS // 8)
        for t0 in range(start, end, CHUNK):
            rows = t0 + tl.arange(0, CHUNK)
            rows_ok = rows < end
            ok = rows_ok[:, None] & cols_ok[None, :]
            x = tl.load(x_base + rows[:, None] * D + cols[None, :], mask=ok, other=0.0).to(tl.float32)
            codes = _codes(x, minimum.to(tl.float32)[None, :], scale.to(tl.float32)[None, :], LEVELS)
            _store_codes(code_base, rows, rows_ok, codes, D, CHUNK, BLOCK_D, BITS)

    @triton.jit
    def _quantize_v(X, Codes, Scale, Min, L, D, GROUP, N_GROUPS,
                    LEVELS: tl.constexpr, BITS: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
        bh = tl.program_id(0).to(tl.int64)  # sequence x head
        rows = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)  # tokens
        rows_ok = rows < L
        cols = tl.arange(0, BLOCK_D)
        ok = rows_ok[:, None] & (cols < D)[None, :]
        x = tl.load(X + bh * L * D + rows[:, None] * D + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        which = cols // GROUP  # each channel's group
        minimums = tl.zeros([BLOCK_T, BLOCK_D], tl.float32)  # each element's group's, for the codes
        scales = tl.zeros([BLOCK_T, BLOCK_D], tl.float32)
        groups = bh * L * N_GROUPS + rows * N_GROUPS
        for gi in range(0, N_GROUPS):
            member = (which == gi)[None, :]
            low = tl.where(rows_ok, tl.min(tl.where(member & ok, x, float("inf")), 1), 0.0)
            high = tl.where(rows_ok, tl.max(tl.where(member & ok, x, float("-inf")), 1), 0.0)
            scale = tl.maximum((high - low) / LEVELS, 1e-8).to(tl.float16)
            minimum = low.to(tl.float16)
            tl.store(Scale + groups + gi, scale, mask=rows_ok)
            tl.store(Min + groups + gi, minimum, mask=rows_ok)
            minimums = tl.where(member, minimum.to(tl.float32)[:, None], minimums)
            scales = tl.where(member, scale.to(tl.float32)[:, None], scales)
        codes = _codes(x, minimums, scales, LEVELS)
        _store_codes(Codes + bh * L * (D * BITS // 8), rows, rows_ok, codes, D, BLOCK_T, BLOCK_D, BITS)


def tiles(case) -> dict:
    """The tile shapes: BLOCK_D the head dim to a power of two, K's chunks of tokens and V's blocks of
    tokens filling a tile of TILE elements (a K chunk never longer than a group)."""
    block_d = triton.next_power_of_2(case.d)
    rows = max(1, TILE // block_d)
    return {"block_d": block_d, "chunk": min(triton.next_power_of_2(case.group), rows), "block_t": rows}


@implementation("kv-quantize", "triton", backend="triton", modules=("torch", "triton"), unit="memory",
                description="one pass in Triton: K's groups along the tokens and V's along the channels, "
                            "min/max, fp16 scale and minimum, codes and int4/int2 packing in registers")
def triton_quantize(case, inputs, out):
    if triton is None:
        raise Unsupported("triton is not installed")
    k, v = inputs["k"], inputs["v"]
    for t in (k, v):
        if not t.is_contiguous():
            raise Unsupported("triton needs contiguous K and V")
    bits = kv.QUANTIZED[case.kv_dtype]
    cache = kv.views(out, kv.cache_layout(case.batch, case.hkv, case.l, case.d, case.group, bits))
    shape = tiles(case)
    bh = case.batch * case.hkv
    k_groups = triton.cdiv(case.l, case.group)
    v_groups = triton.cdiv(case.d, case.group)
    levels = 2**bits - 1

    def run():
        _quantize_k[(bh, k_groups)](
            k, cache["k_codes"], cache["k_scale"], cache["k_min"], case.l, case.d, case.group, k_groups,
            LEVELS=levels, BITS=bits, CHUNK=shape["chunk"], BLOCK_D=shape["block_d"], num_warps=WARPS)
        _quantize_v[(bh, triton.cdiv(case.l, shape["block_t"]))](
            v, cache["v_codes"], cache["v_scale"], cache["v_min"], case.l, case.d, case.group, v_groups,
            LEVELS=levels, BITS=bits, BLOCK_T=shape["block_t"], BLOCK_D=shape["block_d"], num_warps=WARPS)

    run.config = {**shape, "num_warps": WARPS, "k_programs": bh * k_groups,
                  "v_programs": bh * triton.cdiv(case.l, shape["block_t"]), "triton": triton.__version__}
    return run
