"""Flash-decoding in Triton: the cache's length split across programs, partial softmax states combined.

One query, or a few, cannot fill a GPU the way a prefill's thousands of query rows do: FlashAttention's
one program per query tile would leave most SMs idle. Flash-decoding splits the L cached tokens into
``splits`` pieces instead, one program per (sequence, K/V head, piece):

1. ``partial``: each program owns one K/V head of one sequence and one piece of the cache. The rows of
   its tile are that head's whole group, every query head that reads it times every new query (GQA:
   Hq / Hkv · Q rows, padded to at least 16 for ``tl.dot``), so each K/V tile loaded serves all of
   them. It runs the online softmax over its piece (a running row maximum ``m``, a row sum ``l`` and an
   fp32 accumulator, base-2 exponentials with the scale folded in) and writes the three, unnormalised,
   to a workspace.
2. ``combine``: one program per (sequence, K/V head, row of the group, 32 channels) loads every
   piece's state at once, rescales each to the largest maximum (log-sum-exp), sums, and divides once.

New queries beyond the first are the cache's last positions: query i sees the keys up to L - Q + i,
masked per row. An int8, int4 or int2 cache is read as its codes (int4 and int2: two and four a byte,
split into their channels in registers), and each tile is dequantized in registers with its groups' scales
and minimums: each code becomes fp16 under the exponent bits of 1024 (no conversion instruction), then
code · scale + minimum is one fp16 fma, rounded once as the product's operand is. ``--param splits=N`` fixes the
number of pieces; ``auto`` takes as many as keep the programs within four an SM, or two where four would
cut a piece under 64 tiles (except for an int4 cache, whose dequantization wants the warps of four),
and at least 64 for an int4 or int8 cache whose groups are whole tiles where its pieces are long (four
programs an SM), fewer where the cache is short, one piece on the CPU interpreter's small
cases; a ragged batch counts as its tokens in sequences of the longest length. ``--param loads=tma`` reads each K/V tile with one TMA copy from a tensor descriptor, ``pointers``
with every thread loading its part; ``auto`` (the default) takes TMA on sm_90 and later except for an
int4 or int2 cache. ``--param pdl=1`` launches the merge as a programmatic dependent of the partial
kernel (sm_90 and later): it starts while the partial programs end and waits on the GPU for them, rather
than being launched after them; ``pdl=auto`` (the default) does so on sm_90 and later, where it was
measured as fast or faster at every size (docs/performance.md), and ``pdl=0`` never. ``--param block_n``
(keys a K/V tile), ``stages``
(Triton's software pipeline depth for the K/V loads; 0 leaves Triton's default, 3 on sm_90) and ``warps``
shape a program. ``stages=auto`` (the default) takes three where each sequence x K/V head is cut into
many pieces (a few sequences: short programs that wait on memory more than they fill it) and two
elsewhere: on an H200 (fp16 cache, GQA 32/8, d 128) three stages were 7-9 % faster than two at one
sequence of 32k and 128k tokens, and 1-3 % slower at eight.
"""

import math
from pathlib import Path

from kbench.loader import load_helper
from kbench.registry import Unsupported, implementation

try:  # Triton is optional: without it this file still registers, and the impl SKIPs.
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised only where triton is absent
    triton = None

utils = load_helper(Path(__file__).parent.parent / "_triton_utils.py")
seq_lengths = load_helper(Path(__file__).parent / "_lengths.py")

LOG2_E = 1.4426950408889634
HEAD_DIMS = (16, 32, 64, 128, 256)  # tl.arange needs a power of two
BLOCK_N = 64  # keys a K/V tile, by default
BLOCK_NS = (32, 64, 128)
MAX_ROWS = 64  # rows of one tile; a larger group x queries takes several row blocks
# splits=auto: as many pieces as keep the programs within PROGRAMS_PER_SM an SM (so that no SM holds
# more than its share), four while each piece keeps LONG_PIECE_TILES tiles, else two. On an H200 (fp16
# cache, GQA 32/8, d 128; docs/performance.md): eight sequences of 32k and 128k tokens in 8 pieces (512
# programs) ran at 1.00x and 0.99x SDPA, in 5 (320 programs) at 0.96x and 0.98x, in 9 (576) at 0.97x and
# 0.96x; one sequence in 64 pieces (8 and 32 tiles) at 0.94x and 0.91x, in 32 or 33 at 1.02x and 1.00x.
PROGRAMS_PER_SM = 4
SHORT_PIECE_PROGRAMS_PER_SM = 2
LONG_PIECE_TILES = 64
# An int4 cache keeps four programs an SM at any piece length: its dequantization, not its bytes, sets
# its speed, and two programs an SM leave it short of warps. On an H100 (GQA 32/8, d 128, groups of 128,
# one sequence, three stages either way) 64 pieces a head (512 programs) ran 1.15x and 1.19x faster
# than 32 or 33 at 32k and 128k tokens (docs/performance.md).
ALWAYS_FULL_BITS = (4,)
# An int4 or int8 cache whose groups are whole tiles takes at least 64 pieces a sequence x head, while
# each keeps 8 tiles or more: many short programs instead of a few long ones. (A tile that gathers its
# scales element by element is left as it was, not measured: at 64 pieces stages=auto takes three
# stages, at which its int4 build for sm_90 takes 255 registers with Triton 3.6 and spills 256 bytes
# with 3.9.) On an H200 (GQA 32/8, d 128, groups of 128, 32k and 128k tokens, interleaved against the
# pieces before this rule) eight sequences in 64 pieces instead of 8 ran 1.31x and 1.37x faster for int8
# and 1.07x and 1.10x for int4 (1.23-1.27x and 1.07-1.08x with the pipeline depth held at two stages);
# one int8 sequence in 64 instead of 32 or 33, 0.97-0.98x (docs/performance.md). So the floor holds where
# the pieces are long (four programs an SM): one int8 sequence keeps its 32 or 33 pieces, which on an H100
# ran 1.08x and 1.11x as fast as 64 at 32k and 128k tokens (records in
# results/experiments/h100-decode-triton-quantized.jsonl; an int4 cache takes four programs an SM anyway).
QUANTIZED_MIN_PIECES = {4: 64, 8: 64}
QUANTIZED_MIN_PIECE_TILES = 8
# stages=auto: three pipeline stages from this many pieces a sequence x head (one sequence: 32 or 33 at
# 32k and 128k tokens on an H200), two below it (eight sequences: 8 pieces).
DEEP_PIPELINE_SPLITS = 16
# The merge of the pieces: a program per row of the group and COMBINE_CHANNELS channels, loading every
# piece's state at once up to MAX_COMBINE_PIECES (in rounds of that many beyond it).
COMBINE_CHANNELS = 32
MAX_COMBINE_PIECES = 64
# splits=auto plans four programs of 4 warps an SM, which 128 registers a thread allow: int4 and int2
# tiles fit them (Triton 3.6, sm_90: 123-128 registers, where Triton takes 140-152 left to itself, three
# programs an SM), so their programs are capped there. None spills but int2 at three stages (one
# sequence, 32 or 33 pieces): 36 bytes, one reload a tile. int8's would spill (112 bytes at 128), and
# 16-bit caches take 72-83.
MAX_REGISTERS = {4: 128, 2: 128}
# _partial's BITS for a cache type: 8, 4 or 2 bits a code (int4's two a byte, int2's four), 0 for the values
CACHE_BITS = {"fp16": 0, "bf16": 0, "int8": 8, "int4": 4, "int2": 2}
# How a program reads its K/V tiles: each thread its part through pointers (cp.async when pipelined), or
# one bulk copy a tile by the Tensor Memory Accelerator from a tensor descriptor (sm_90 and later).
# loads=auto: TMA on sm_90 and later except for an int4 (or int2) cache, whose K tile the TMA form must
# transpose as bytes before splitting the nibbles: on an H200 (GQA 32/8, d 128, 32k and 128k tokens, one and eight
# sequences) TMA was within 1 % of pointers for an fp16 cache, 2-9 % faster for int8 and 10-41 % slower
# for int4 (docs/performance.md).
LOADS = ("auto", "pointers", "tma")

if triton is not None:

    @triton.jit
    def _partial(Q, K, V, KS, KM, VS, VM, PartO, PartM, PartL, Lengths,
                 sq_b, sq_h, sq_q, sk_b, sk_h, sk_l, sv_b, sv_h, sv_l, sks_b, sks_h, sks_g, svs_b, svs_h, svs_l,
                 HKV, GROUP, NQ, L, keys_per_split, splits, row_blocks, scale_log2, QGROUP,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_D: tl.constexpr, MASKED: tl.constexpr,
                 PRECISION: tl.constexpr, BITS: tl.constexpr, K_SPREAD: tl.constexpr, V_SPREAD: tl.constexpr,
                 TMA: tl.constexpr,
                 RAGGED: tl.constexpr, LAUNCH_MERGE: tl.constexpr):
        """K and V are the cache's values (BITS 0), or its 8-, 4- or 2-bit codes (int4, int2: two, four a
        byte along the channels), dequantized in registers as code · scale + minimum: K's scale and minimum (KS, KM) one
        per channel for every QGROUP tokens, V's (VS, VM) one per token for every QGROUP channels.
        K_SPREAD (a tile's keys a K scale serves: QGROUP where it divides BLOCK_N, BLOCK_N where QGROUP is
        a multiple of it; else 0) and V_SPREAD (QGROUP where it divides HEAD_D, else 0): each group's scale
        and minimum are read once a tile and spread over its elements, rather than read once per element.
        The codes become fp16 by the exponent of 1024 (_codes_to_fp16) and are scaled in fp16.
        TMA: K and V are tensor descriptors of [B, Hkv, L, row] with [1, 1, BLOCK_N, row] boxes (row: d
        values, or d · BITS / 8 bytes of codes), each tile one bulk copy by the Tensor Memory Accelerator
        (zeros past L); else pointers, each thread loading its part of the tile. RAGGED: sequence b holds
        Lengths[b] of the cache's L tokens (a piece past them reads nothing, its state weighing 0).
        LAUNCH_MERGE (pdl=1): once its loop is done, a program lets the merge, launched as its programmatic
        dependent, start (it then waits for this kernel to finish before reading the states)."""
        bh = tl.program_id(0)  # sequence x K/V head
        split = tl.program_id(1)
        row_block = tl.program_id(2)
        b = bh // HKV
        kvh = bh % HKV
        rows = row_block * BLOCK_M + tl.arange(0, BLOCK_M)  # row r: query head r // NQ of the group, query r % NQ
        row_ok = rows < GROUP * NQ
        head = kvh * GROUP + rows // NQ
        query = rows % NQ
        offs_d = tl.arange(0, HEAD_D)
        q = tl.load(Q + b * sq_b + head[:, None] * sq_h + query[:, None] * sq_q + offs_d[None, :],
                    mask=row_ok[:, None], other=0.0)
        length = tl.load(Lengths + b) if RAGGED else L  # the sequence's own tokens
        position = length - NQ + query  # where each new query sits in the cache
        start = split * keys_per_split
        end = tl.minimum(start + keys_per_split, length)
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_D], dtype=tl.float32)
        ROW: tl.constexpr = HEAD_D * BITS // 8 if BITS else HEAD_D  # a token's elements (codes: its bytes)
        offs_r = tl.arange(0, ROW)
        for n0 in range(start, end, BLOCK_N):
            offs_n = n0 + tl.arange(0, BLOCK_N)
            key_ok = offs_n < end
            if TMA:  # [keys, row], transposed for the product
                k = tl.trans(tl.reshape(K.load([b, kvh, n0, 0]), (BLOCK_N, ROW)))
            else:  # [row, keys]
                k = tl.load(K + b * sk_b + kvh * sk_h + offs_n[None, :] * sk_l + offs_r[:, None],
                            mask=key_ok[None, :], other=0)
            if BITS == 4:  # [d / 2, keys] bytes: channel 2j in the low nibble, 2j + 1 in the high one
                k = _unpack_rows(k, HEAD_D, BLOCK_N)
            elif BITS == 2:  # [d / 4, keys] bytes: channels 4j .. 4j + 3 in bits 0-1 .. 6-7
                k = _unpack_rows_2bit(k, HEAD_D, BLOCK_N)
            if BITS and K_SPREAD:  # [d, tile's groups], spread over each group's tokens in the tile
                G: tl.constexpr = BLOCK_N // K_SPREAD
                first = n0 // QGROUP + tl.arange(0, G)
                groups = b * sks_b + kvh * sks_h + first[None, :] * sks_g + offs_d[:, None]
                group_ok = (first * QGROUP < end)[None, :]
                ks = _spread(tl.load(KS + groups, mask=group_ok, other=0.0), HEAD_D, G, K_SPREAD)
                km = _spread(tl.load(KM + groups, mask=group_ok, other=0.0), HEAD_D, G, K_SPREAD)
                k = tl.fma(_codes_to_fp16(k), ks, km)
            elif BITS:  # [d, keys]: a scale and a minimum per channel and group of tokens
                groups = b * sks_b + kvh * sks_h + (offs_n // QGROUP)[None, :] * sks_g + offs_d[:, None]
                k = tl.fma(_codes_to_fp16(k), tl.load(KS + groups, mask=key_ok[None, :], other=0.0),
                           tl.load(KM + groups, mask=key_ok[None, :], other=0.0))
            s = utils.dot(q, k, tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32), PRECISION) * scale_log2
            visible = key_ok[None, :]
            if MASKED:
                visible = visible & (offs_n[None, :] <= position[:, None])
            s = tl.where(visible, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing visible yet
            alpha = tl.exp2(m_i - m_safe)
            p = tl.exp2(s - m_safe[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            if TMA:  # [keys, row]
                v = tl.reshape(V.load([b, kvh, n0, 0]), (BLOCK_N, ROW))
            else:
                v = tl.load(V + b * sv_b + kvh * sv_h + offs_n[:, None] * sv_l + offs_r[None, :],
                            mask=key_ok[:, None], other=0)
            if BITS == 4:
                v = tl.reshape(tl.join(v & 0xF, v >> 4), (BLOCK_N, HEAD_D))
            elif BITS == 2:
                v = tl.reshape(_quads(v), (BLOCK_N, HEAD_D))
            if BITS and V_SPREAD:  # [keys, the channels' groups], spread over each group's channels
                C: tl.constexpr = HEAD_D // V_SPREAD
                groups = b * svs_b + kvh * svs_h + offs_n[:, None] * svs_l + tl.arange(0, C)[None, :]
                vs = _spread(tl.load(VS + groups, mask=key_ok[:, None], other=0.0), BLOCK_N, C, V_SPREAD)
                vm = _spread(tl.load(VM + groups, mask=key_ok[:, None], other=0.0), BLOCK_N, C, V_SPREAD)
                v = tl.fma(_codes_to_fp16(v), vs, vm)
            elif BITS:  # [keys, d]: a scale and a minimum per token and group of channels
                groups = b * svs_b + kvh * svs_h + offs_n[:, None] * svs_l + (offs_d // QGROUP)[None, :]
                v = tl.fma(_codes_to_fp16(v), tl.load(VS + groups, mask=key_ok[:, None], other=0.0),
                           tl.load(VM + groups, mask=key_ok[:, None], other=0.0))
            acc = utils.dot(p.to(v.dtype), v, acc * alpha[:, None], PRECISION)
            m_i = m_new
        if LAUNCH_MERGE:
            tl.extra.cuda.gdc_launch_dependents()
        # The workspace: [sequence x K/V head, split, row] (x d for the accumulator), rows padded to whole
        # tiles; the padding rows are not written (nor read by the merge).
        slot = (bh * splits + split) * row_blocks * BLOCK_M + rows
        tl.store(PartM + slot, m_i, mask=row_ok)
        tl.store(PartL + slot, l_i, mask=row_ok)
        tl.store(PartO + slot[:, None] * HEAD_D + offs_d[None, :], acc, mask=row_ok[:, None])

    @triton.jit
    def _codes_to_fp16(codes):
        """Codes (0-255) as fp16 without a conversion instruction: under the exponent bits of 1024 (0x6400)
        a code is 1024 + code exactly, and subtracting 1024 leaves it."""
        return (codes.to(tl.uint16) | 0x6400).to(tl.float16, bitcast=True) - 1024.0

    @triton.jit
    def _spread(x, ROWS: tl.constexpr, GROUPS: tl.constexpr, SIZE: tl.constexpr):
        """[ROWS, GROUPS] as [ROWS, GROUPS x SIZE]: each column repeated SIZE times, side by side."""
        return tl.reshape(tl.broadcast_to(x[:, :, None], (ROWS, GROUPS, SIZE)), (ROWS, GROUPS * SIZE))

    @triton.jit
    def _unpack_rows(packed, HEAD_D: tl.constexpr, BLOCK_N: tl.constexpr):
        """[d / 2, keys] bytes as [d, keys] 4-bit codes: row 2j from byte j's low nibble, 2j + 1 its high."""
        pairs = tl.join(packed & 0xF, packed >> 4)  # [d / 2, keys, 2]
        return tl.reshape(tl.permute(pairs, (0, 2, 1)), (HEAD_D, BLOCK_N))

    @triton.jit
    def _quads(packed):
        """Each byte's four 2-bit codes along two new dimensions [.., 2, 2]: code 2p + q (bits 4p + 2q) at
        [p, q], so that flattening them puts the byte's codes in order."""
        return tl.join(tl.join(packed & 3, (packed >> 4) & 3), tl.join((packed >> 2) & 3, packed >> 6))

    @triton.jit
    def _unpack_rows_2bit(packed, HEAD_D: tl.constexpr, BLOCK_N: tl.constexpr):
        """[d / 4, keys] bytes as [d, keys] 2-bit codes: row 4j + i from bits 2i, 2i + 1 of byte j."""
        return tl.reshape(tl.permute(_quads(packed), (0, 2, 3, 1)), (HEAD_D, BLOCK_N))

    @triton.jit
    def _combine(PartO, PartM, PartL, Out, so_b, so_h, so_q,
                 HKV, GROUP, NQ, splits, row_blocks,
                 BLOCK_M: tl.constexpr, HEAD_D: tl.constexpr, CHANNELS: tl.constexpr, PIECES: tl.constexpr,
                 AFTER_PARTIAL: tl.constexpr):
        # One program per (sequence x K/V head, row of the group, CHANNELS channels): the rows past the
        # group, padding of the partial's tile, are neither read nor written. PIECES (a power of two, at
        # least `splits` up to MAX_COMBINE_PIECES) pieces' maxima, sums and O are loaded at once, none
        # waiting on another, so that a merge of one round costs one trip to memory; more pieces than
        # PIECES are folded in rounds, each rescaling the running sum to the new maximum. AFTER_PARTIAL
        # (pdl=1): launched while the partial kernel still runs, the program waits for that kernel to finish,
        # its states then visible, before it reads them.
        bh = tl.program_id(0)
        row = tl.program_id(1)
        b = bh // HKV
        kvh = bh % HKV
        offs_d = tl.program_id(2) * CHANNELS + tl.arange(0, CHANNELS)
        stride_split = row_blocks * BLOCK_M
        first = bh * splits * stride_split + row  # rows are numbered across the row blocks alike
        m = float("-inf")
        total = 0.0
        acc = tl.zeros([CHANNELS], dtype=tl.float32)
        if AFTER_PARTIAL:
            tl.extra.cuda.gdc_wait()
        for s0 in range(0, splits, PIECES):
            pieces = s0 + tl.arange(0, PIECES)
            inside = pieces < splits
            slot = first + pieces * stride_split
            part_m = tl.load(PartM + slot, mask=inside, other=float("-inf"))
            part_l = tl.load(PartL + slot, mask=inside, other=0.0)
            part_o = tl.load(PartO + slot[:, None] * HEAD_D + offs_d[None, :], mask=inside[:, None], other=0.0)
            m_new = tl.maximum(m, tl.max(part_m, axis=0))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # nothing visible to the row so far
            weight = tl.exp2(part_m - m_safe)  # a piece with nothing visible (m = -inf), or past the last: 0
            alpha = tl.exp2(m - m_safe)
            total = total * alpha + tl.sum(weight * part_l, axis=0)
            acc = acc * alpha + tl.sum(weight[:, None] * part_o, axis=0)
            m = m_new
        head = kvh * GROUP + row // NQ
        tl.store(Out + b * so_b + head * so_h + (row % NQ) * so_q + offs_d, (acc / total).to(Out.dtype.element_ty))


def auto_programs_per_sm(tiles: int, sequences_x_heads: int, sms: int, bits: int = 0) -> int:
    """The programs an SM splits=auto allows for a cache of ``tiles`` K/V tiles of ``bits``-bit codes (0:
    16-bit values): PROGRAMS_PER_SM while each piece keeps LONG_PIECE_TILES tiles, or always for
    ALWAYS_FULL_BITS, else SHORT_PIECE_PROGRAMS_PER_SM."""
    pieces = max(1, PROGRAMS_PER_SM * sms // sequences_x_heads)
    if bits in ALWAYS_FULL_BITS or tiles >= pieces * LONG_PIECE_TILES:
        return PROGRAMS_PER_SM
    return SHORT_PIECE_PROGRAMS_PER_SM


def auto_pieces(tiles: int, sequences_x_heads: int, sms: int, bits: int = 0,
                whole_groups: bool = True) -> tuple[int, str]:
    """splits=auto's pieces a sequence x head for a cache of ``tiles`` K/V tiles of ``bits``-bit codes, and
    what set them (for kbench explain): the programs an SM, or the floor of an int4 or int8 cache whose
    groups are whole tiles (``whole_groups``), where its pieces are long (four programs an SM)."""
    per_sm = auto_programs_per_sm(tiles, sequences_x_heads, sms, bits)
    pieces = max(1, per_sm * sms // sequences_x_heads)
    floored = whole_groups and per_sm == PROGRAMS_PER_SM
    floor = min(QUANTIZED_MIN_PIECES.get(bits, 1), tiles // QUANTIZED_MIN_PIECE_TILES) if floored else 1
    if floor > pieces:
        return floor, (f"at least {floor} for an int{bits} cache, {QUANTIZED_MIN_PIECE_TILES} tiles or more a piece")
    return pieces, f"at most {per_sm} programs an SM"


def split_plan(length: int, sequences_x_heads: int, sms: int, splits="auto", block_n: int = BLOCK_N,
               bits: int = 0, whole_groups: bool = True) -> tuple[int, int]:
    """(splits, keys a split) for a cache of ``length`` tokens of ``bits``-bit codes (0: 16-bit values):
    ``splits`` pieces of whole K/V tiles, ``auto`` as many as keep the programs within
    auto_programs_per_sm an SM, and for an int4 or int8 cache whose groups are whole tiles at least
    QUANTIZED_MIN_PIECES where each piece keeps QUANTIZED_MIN_PIECE_TILES tiles; never more than the cache
    has tiles."""
    tiles = max(1, math.ceil(length / block_n))
    if splits == "auto":
        wanted, _ = auto_pieces(tiles, sequences_x_heads, sms, bits, whole_groups)
    else:
        wanted = int(splits)
        if wanted < 1:
            raise Unsupported(f"splits={splits}: needs at least one")
    tiles_per_split = math.ceil(tiles / min(wanted, tiles))
    keys = tiles_per_split * block_n
    return math.ceil(length / keys), keys


def resolve_loads(loads: str, bits: int, capability: tuple[int, int] | None, readable: bool = True) -> str:
    """loads=auto as the form it takes for a ``bits``-bit cache (0: 16-bit values) on a GPU of compute
    capability ``capability`` (None: Triton's CPU interpreter, where it takes pointers), TMA only where it
    can read the cache (``readable``: see descriptor_refusal); other values as given."""
    if loads != "auto":
        return loads
    return "tma" if readable and capability is not None and capability >= (9, 0) and bits not in (2, 4) else "pointers"


def resolve_pdl(pdl, capability: tuple[int, int] | None) -> bool:
    """pdl=auto as what it takes on a GPU of compute capability ``capability`` (None: Triton's CPU
    interpreter, which runs no griddepcontrol): the dependent launch from sm_90 on; 0 and 1 as given."""
    if str(pdl) == "auto":
        return capability is not None and capability >= (9, 0)
    return str(pdl) == "1"


def partial_options(plan: dict, bits: int, warps: int, loads: str = "pointers") -> dict:
    """_partial's compile options: its warps, its pipeline depth (0: Triton's own default) and, for int4
    and int2 caches in their default form (tiles read through pointers, scales spread), the register cap
    of MAX_REGISTERS; their other forms need more (a scale gathered per element: 412 bytes spilled at 128)."""
    capped = bits in MAX_REGISTERS and loads == "pointers" and plan["whole_groups"]
    return {"num_warps": warps, **({"num_stages": plan["stages"]} if plan["stages"] else {}),
            **({"maxnreg": MAX_REGISTERS[bits]} if capped else {})}


def resolve_stages(stages, splits: int) -> int:
    """stages=auto as the pipeline depth it takes for a cache cut into ``splits`` pieces a sequence x head
    (DEEP_PIPELINE_SPLITS); a number as given (0: Triton's default)."""
    if stages == "auto":
        return 3 if splits >= DEEP_PIPELINE_SPLITS else 2
    return int(stages)


def row_tiling(rows: int) -> tuple[int, int]:
    """(rows a tile, row blocks) for a group of ``rows`` query rows: at least 16 (tl.dot's smallest M)."""
    block = min(MAX_ROWS, max(16, 1 << (rows - 1).bit_length()))  # the next power of two
    return block, math.ceil(rows / block)


def launch_plan(case, sms: int, bits: int, splits="auto", block_n: int = BLOCK_N, stages="auto") -> dict:
    """What a call launches for a case on a GPU of ``sms`` SMs (the wrapper and `kbench explain` alike):
    sequences x K/V heads, pieces and their keys, the row tiling, the pipeline depth, and how many of a
    tile's keys (k_spread) and channels (v_spread) share each scale of a ``bits``-bit cache that a tile
    reads once (0: read once per element)."""
    bh = case.batch * case.hkv
    k_spread = min(case.group, block_n) if bits and (block_n % case.group == 0 or case.group % block_n == 0) else 0
    v_spread = case.group if bits and case.d % case.group == 0 else 0
    whole_groups = bool(k_spread and v_spread)  # a tile reads each of its scales once
    n_splits, keys_per_split = split_plan(seq_lengths.cache_length(case), sequences_x_heads_as_cut(case), sms, splits,
                                          block_n, bits, whole_groups)
    rows = case.hq // case.hkv * case.q
    block_m, row_blocks = row_tiling(rows)
    return {"bh": bh, "splits": n_splits, "keys_per_split": keys_per_split, "rows": rows, "block_m": block_m,
            "row_blocks": row_blocks, "stages": resolve_stages(stages, n_splits), "k_spread": k_spread,
            "v_spread": v_spread, "whole_groups": case.group if whole_groups else 0,
            "merge_channels": min(case.d, COMBINE_CHANNELS),
            "merge_pieces": min(MAX_COMBINE_PIECES, 1 << (n_splits - 1).bit_length())}


def sm90_arguments(case, plan: dict, bits: int, block_n: int = BLOCK_N, loads: str = "pointers") -> dict:
    """_partial's arguments by name as a call on this case passes them (a tensor as its pointer type, or
    with ``loads="tma"`` K and V as tensor descriptors; the strides of contiguous inputs), for compiling
    it without a GPU (kbench explain, the sm_90 build test)."""
    values = "*bf16" if case.kv_dtype == "bf16" else "*fp16"  # the queries' (and a 16-bit cache's) type
    row = case.d * bits // 8 if bits else case.d  # a token's elements (bytes of codes)
    codes = "*u8" if bits else values
    if loads == "tma":
        codes = f"tensordesc<{codes[1:]}[1,1,{block_n},{row}]>"
    length = seq_lengths.cache_length(case)
    k_groups, v_groups = math.ceil(length / case.group), math.ceil(case.d / case.group)
    return {"Q": values, "K": codes, "V": codes, "KS": "*fp16", "KM": "*fp16", "VS": "*fp16", "VM": "*fp16",
            "PartO": "*fp32", "PartM": "*fp32", "PartL": "*fp32", "Lengths": "*i32",
            "sq_b": case.hq * case.q * case.d, "sq_h": case.q * case.d, "sq_q": case.d,
            "sk_b": case.hkv * length * row, "sk_h": length * row, "sk_l": row,
            "sv_b": case.hkv * length * row, "sv_h": length * row, "sv_l": row,
            "sks_b": case.hkv * k_groups * case.d, "sks_h": k_groups * case.d, "sks_g": case.d,
            "svs_b": case.hkv * length * v_groups, "svs_h": length * v_groups, "svs_l": v_groups,
            "HKV": case.hkv, "GROUP": case.hq // case.hkv, "NQ": case.q, "L": length,
            "keys_per_split": plan["keys_per_split"], "splits": plan["splits"], "row_blocks": plan["row_blocks"],
            "scale_log2": case.d**-0.5 * LOG2_E, "QGROUP": case.group}


def partial_constants(case, plan: dict, bits: int, block_n: int = BLOCK_N, precision: str = "native",
                      loads: str = "pointers", pdl: bool = False) -> dict:
    """_partial's constexprs for a call on this case (``precision``: how tl.dot multiplies, "native" on a GPU;
    ``pdl``: the merge launched as its programmatic dependent)."""
    return {"BLOCK_M": plan["block_m"], "BLOCK_N": block_n, "HEAD_D": case.d, "MASKED": case.q > 1,
            "PRECISION": precision, "BITS": bits, "K_SPREAD": plan["k_spread"], "V_SPREAD": plan["v_spread"],
            "TMA": loads == "tma",
            "RAGGED": seq_lengths.is_ragged(case), "LAUNCH_MERGE": pdl}


def sequences_x_heads_as_cut(case) -> int:
    """Sequences x K/V heads as splits=auto counts them: a ragged batch by its tokens (_lengths.py)."""
    return math.ceil(seq_lengths.batch_by_tokens(case) * case.hkv)


def _steps(t) -> list[int]:
    """t's strides with each dimension of size 1 given the stride it would have if t were contiguous
    there: such a dimension is never stepped along, and torch leaves its stride arbitrary (1 for a cache
    of one token), which a tensor descriptor would refuse."""
    steps = list(t.stride())
    for i in range(t.dim() - 2, -1, -1):
        if t.shape[i] == 1:
            steps[i] = steps[i + 1] * t.shape[i + 1]
    return steps


def descriptor_refusal(t) -> str | None:
    """Why K or V cannot be read through a tensor descriptor (the TMA reads rows and steps of whole
    16-byte units), or None."""
    size = t.element_size()
    row_bytes = t.shape[-1] * size
    if row_bytes % 16 or t.data_ptr() % 16 or any(st * size % 16 for st in _steps(t)[:-1]):
        return f"loads=tma needs 16-byte aligned K/V rows and strides (a row here is {row_bytes} bytes)"
    return None


def tensor_descriptor(t, block_n: int):
    """K or V ([B, Hkv, L, row]) as a tensor descriptor of [1, 1, block_n, row] boxes."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor(t, list(t.shape), _steps(t), [1, 1, block_n, t.shape[-1]])


def _supports(case):
    if case.d not in HEAD_DIMS:
        return f"head dim {case.d} is not a power of two from 16 to 256"
    return None



def explain(case, params) -> dict:
    """`kbench explain decode --impl triton-splitkv`: the pieces and programs a call launches on an H200,
    the tiles and products of a program, and (where Triton compiles for sm_90 here) its registers,
    shared memory and programs an SM."""
    from kbench.devices import by_key
    from kbench.kernel_resources import from_triton, launch_figures

    reason = _supports(case)
    if reason:
        return {"configuration": f"not runnable: {reason}"}
    bits, block_n, warps = CACHE_BITS[case.kv_dtype], params["block_n"], params["warps"]
    h200 = by_key("h200")
    plan = launch_plan(case, h200.sms, bits, params["splits"], block_n, params["stages"])
    rows, channels = plan["rows"], plan["merge_channels"]
    programs = plan["bh"] * plan["splits"] * plan["row_blocks"]
    depth = plan["stages"] or "Triton's default"
    loads = resolve_loads(params["loads"], bits, (9, 0))
    figures = {
        "rows of a tile": f"{rows} of the GQA group (query heads x {case.q} queries) in {plan['row_blocks']} "
                          f"tile(s) of {plan['block_m']} rows ({plan['block_m'] * plan['row_blocks'] - rows} zero "
                          "rows: tl.dot's M is at least 16)",
        "pieces of the cache": f"{plan['splits']} of {plan['keys_per_split']:,} keys a sequence x K/V head ("
                               + ("automatic: " + auto_pieces(-(-seq_lengths.cache_length(case) // block_n),
                                                              sequences_x_heads_as_cut(case), h200.sms, bits,
                                                              plan["whole_groups"] > 0)[1]
                                  + " on an H200" if params["splits"] == "auto" else "fixed") + ")",
        **({"pieces a sequence": seq_lengths.pieces_a_sequence(case, plan["splits"], plan["keys_per_split"],
                                                               case.hkv * plan["row_blocks"])}
           if seq_lengths.is_ragged(case) else {}),
        "grid": f"{plan['bh']} (sequences x K/V heads) x {plan['splits']} (pieces) x {plan['row_blocks']} (row "
                f"blocks) = {programs} programs, then the merge: {plan['bh'] * rows * (case.d // channels)} "
                f"programs of one row and {channels} channels, each loading {plan['merge_pieces']} pieces' states at once"
                + ("" if plan["merge_pieces"] >= plan["splits"] else " a round")
                + (", launched while the partial kernel runs (programmatic dependent launch, pdl="
                   f"{params['pdl']}), waiting on the GPU for it to finish" if resolve_pdl(params["pdl"], (9, 0)) else ""),
        "program": f"{warps} warps; K/V tiles of {block_n} keys, "
                   + ("each one TMA copy from a tensor descriptor" if loads == "tma" else "loaded through pointers")
                   + (" (loads=auto)" if params["loads"] == "auto" else "") + f", pipelined {depth} deep"
                   + (f" (stages=auto: {'16 or more' if plan['stages'] == 3 else 'fewer than 16'} pieces a head)"
                      if params["stages"] == "auto" else ""),
        "products per tile (tl.dot)": f"S = Q Kᵀ: [{plan['block_m']} x {case.d}] x [{case.d} x {block_n}]; "
                                      f"O += P V: [{plan['block_m']} x {block_n}] x [{block_n} x {case.d}]",
        "dequantization": "none: the 16-bit values feed tl.dot" if not bits else
                          ({4: "int4 codes two a byte, split by mask and shift; ",
                            2: "int2 codes four a byte, split by mask and shift; "}.get(bits, "int8 codes; "))
                          + "each code fp16 under the exponent of 1024, code · scale + minimum one fp16 fma, on "
                          + "CUDA cores; K's scales " + ("read once a tile" if plan["k_spread"] else "read once an element")
                          + ", V's " + ("read once a tile" if plan["v_spread"] else "read once an element"),
    }
    try:
        resources = from_triton(_partial, sm90_arguments(case, plan, bits, block_n, loads),
                                partial_constants(case, plan, bits, block_n, loads=loads),
                                partial_options(plan, bits, warps, loads))
    except RuntimeError as exc:
        return {**figures, "registers": f"could not compile: {exc}"}
    if resources is None:
        figures["registers"] = "unknown here (no Triton compiler: run on the GPU, or without TRITON_INTERPRET)"
    else:
        figures.update(launch_figures(resources, programs, 32 * warps, resources["dynamic_smem_bytes"]))
    return figures


@implementation("decode", "triton-splitkv", backend="triton", modules=("torch", "triton"), supports=_supports,
                explain=explain,
                params={"splits": "auto", "block_n": BLOCK_N, "stages": "auto", "warps": 4, "loads": "auto", "pdl": "auto"},
                allowed={"splits": lambda value: None if value == "auto" or value.isdigit() and int(value) > 0
                         else "splits takes auto or a positive number",
                         "block_n": BLOCK_NS, "stages": ("auto", "0", "2", "3", "4"), "warps": (4, 8),
                         "loads": LOADS, "pdl": ("auto", "0", "1")},
                description="flash-decoding in Triton: the cache split across programs, each head's GQA "
                            "group as the rows of one tile, partial softmax states combined by log-sum-exp; "
                            "int8, int4 and int2 caches dequantized in registers")
def triton_splitkv(case, inputs, out, splits="auto", block_n=BLOCK_N, stages="auto", warps=4, loads="auto", pdl="auto"):
    if triton is None:
        raise Unsupported("triton is not installed")
    import torch

    q = inputs["q"]
    bits = CACHE_BITS[case.kv_dtype]
    if bits:  # the codes in place of the values, their groups' scales and minimums beside them
        k, v = inputs["k_codes"], inputs["v_codes"]
        ks, km, vs, vm = inputs["k_scale"], inputs["k_min"], inputs["v_scale"], inputs["v_min"]
        group_strides = (ks.stride(0), ks.stride(1), ks.stride(2), vs.stride(0), vs.stride(1), vs.stride(2))
        for scales in (ks, km, vs, vm):
            if not scales.is_contiguous():
                raise Unsupported("triton-splitkv needs contiguous scales and minimums")
    else:
        k, v = inputs["k"], inputs["v"]
        ks = km = vs = vm = k  # not read
        group_strides = (0,) * 6
    for t in (q, k, v, out):
        if t.stride(-1) != 1:
            raise Unsupported("triton-splitkv needs a contiguous last dimension")
    on_gpu = q.device.type == "cuda"
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count if on_gpu else 1
    plan = launch_plan(case, sms, bits, splits, block_n, stages)
    bh, n_splits, keys_per_split = plan["bh"], plan["splits"], plan["keys_per_split"]
    block_m, row_blocks, stages = plan["block_m"], plan["row_blocks"], plan["stages"]
    group = case.hq // case.hkv
    padded = bh * n_splits * row_blocks * block_m
    part_o = torch.empty(padded * case.d, dtype=torch.float32, device=q.device)
    part_m = torch.empty(padded, dtype=torch.float32, device=q.device)
    part_l = torch.empty(padded, dtype=torch.float32, device=q.device)
    capability = torch.cuda.get_device_capability(q.device) if on_gpu else None
    refusal = descriptor_refusal(k) or descriptor_refusal(v)
    loads = resolve_loads(loads, bits, capability, readable=refusal is None)
    if loads == "tma" and refusal:
        raise Unsupported(refusal)
    if loads == "tma" and capability is not None and capability < (9, 0):
        raise Unsupported("loads=tma needs the Tensor Memory Accelerator of sm_90 and later")
    if str(pdl) == "1" and (capability is None or capability < (9, 0)):
        raise Unsupported("pdl=1: programmatic dependent launch needs sm_90 or later (and a GPU: Triton's "
                          "interpreter runs no griddepcontrol)")
    pdl = resolve_pdl(pdl, capability)
    constants = partial_constants(case, plan, bits, block_n, utils.dot_precision("fp16" if bits else case.kv_dtype),
                                  loads, pdl)
    cache_strides = (*k.stride()[:3], *v.stride()[:3])
    if loads == "tma":  # K and V then reach the kernel as descriptors (the strides passed are not read)
        k, v = tensor_descriptor(k, block_n), tensor_descriptor(v, block_n)
    channels = plan["merge_channels"]
    scale_log2 = case.d**-0.5 * LOG2_E
    lengths = inputs.get("lengths", part_l)  # a ragged batch's lengths (else not read)

    options = partial_options(plan, bits, warps, loads)

    def run():
        try:
            _partial[(bh, n_splits, row_blocks)](
                q, k, v, ks, km, vs, vm, part_o, part_m, part_l, lengths,
                q.stride(0), q.stride(1), q.stride(2), *cache_strides, *group_strides,
                case.hkv, group, case.q, seq_lengths.cache_length(case), keys_per_split, n_splits, row_blocks, scale_log2, case.group,
                **constants, **options)
        except utils.OUT_OF_RESOURCES as exc:  # raised at the first launch, where Triton compiles
            raise Unsupported(f"block_n={block_n}, stages={stages or 'default'}, warps={warps}: {exc}") from None
        _combine[(bh, plan["rows"], case.d // channels)](
            part_o, part_m, part_l, out, out.stride(0), out.stride(1), out.stride(2),
            case.hkv, group, case.q, n_splits, row_blocks, BLOCK_M=block_m, HEAD_D=case.d, CHANNELS=channels,
            PIECES=plan["merge_pieces"], AFTER_PARTIAL=pdl, num_warps=warps, **({"launch_pdl": True} if pdl else {}))

    run.config = {"splits": n_splits, "keys_per_split": keys_per_split, "block_m": block_m,
                  "row_blocks": row_blocks, "block_n": block_n, "num_warps": warps, "num_stages": stages or "default",
                  "programs": bh * n_splits * row_blocks, "whole_groups": bool(plan["whole_groups"]), "loads": loads,
                  "pdl": int(pdl), "max_registers": options.get("maxnreg", "unlimited"),
                  "triton": triton.__version__}
    return run
