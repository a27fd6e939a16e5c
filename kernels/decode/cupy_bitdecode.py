"""Decode attention over a quantized KV cache on tensor cores, in CUDA C++ (after BitDecoding, HPCA 2026).

The CUDA source is ``cupy_bitdecode.cu`` beside this file, compiled at run time by NVRTC through
``cupy.RawModule``. Flash-decoding's structure (as ``triton-splitkv``): the cache's L tokens split
into pieces, one block per (sequence x K/V head, piece, block of query rows), partial softmax
states merged by log-sum-exp. What differs is the inner loop:

- Both products are ``mma.sync.m16n8k16`` (fp16 in, fp32 accumulators) through inline PTX, in one of
  two forms (``--param form``). ``rows``: S = Q Kᵀ and O += P V, the K/V head's GQA group (Hq / Hkv
  query heads x Q new queries; 32/8 x 1: 4 rows) the M rows of an m16 tile, zero-padded to 16.
  ``keys`` (``form=auto``, the default, wherever it can run): Sᵀ = K Qᵀ and Oᵀ += Vᵀ Pᵀ, the keys (then
  V's channels) the M rows and the group the N columns of an n8 tile, padded to 8; P's C fragments of
  Sᵀ become Pᵀ's B fragments by ``movmatrix.trans``. The keys form takes half the ``mma.sync``, half
  the accumulator registers, and keeps Q in registers: 16 warps an SM for int4 codes (12 for the
  others), 8-19 % faster than the rows form on an H200 for int4, 5-13 % for int8 and 0-2 % for fp16
  (docs/performance.md). Larger groups take several row blocks, which read the same piece of cache
  one after the other (from L2 when the blocks run together: they are neighbours in the grid).
- int4 and int8 codes go from global memory into registers (64/128-bit loads, no shared memory) and
  are dequantized there, straight into the fragments (B in the rows form, A in the keys form): ``lop3`` picks nibbles (``prmt`` bytes) under
  the exponent of fp16 1024 (int4's high nibbles under 64's), that offset is subtracted, and ``fma.rn.f16x2`` applies the group's scale and
  minimum with one rounding (the same fp16 value as the suite's dequantization). The channels and
  keys sit in the k slots in the order the bit tricks produce them, Q's fragments permuted to match
  (the .cu's header has the lane table; :func:`lane_elements` gives it here).
- Inside a block, each warp walks its own tiles of ``tile`` keys; the warps' states are merged in
  shared memory, and one piece writes the output directly (no second kernel).

``--param splits=N`` fixes the number of pieces; 0 (the default) picks enough blocks for one wave at
the kernel's occupancy (from its registers and shared memory), each piece at least one tile per warp.
``--param tile=16|32|64`` and ``--param warps=auto|2|4|8`` shape the block (warps=auto, the default: 8
in the keys form at d = 128, else 4; AUTO_WARPS). ``--param stages=0`` (the
default) loads each tile's codes into registers when the warp starts it; ``stages=2|3|4`` keeps a ring
of that many tiles a warp in shared memory, filled by ``cp.async`` that many tiles minus one ahead
(the rows form only).
``--param prefetch=N`` (the keys form, over a cache whose tokens follow one another): as a warp starts a
tile it asks L2 for its tile N ahead (``prefetch.global.L2``, a 128-byte line a lane, no registers), so
that tile's loads wait on L2 instead of HBM; 0 asks for nothing. ``--param lead=N`` (the same caches):
before it reads Q, a warp asks L2 for its first N tiles, so that their bytes stream in while Q's arrive
(without it the first tile's loads are issued only once Q is in registers); 0, the default, asks for
nothing: on an H100 every lead made every call 0.89-1.00x as fast (docs/performance.md). Q itself is read
as 16-byte vectors, 4 loads a lane at d = 128.
``--param pipe=k|kv`` (the keys form, int4 and int8 caches): each tile loads the next one's K codes into
registers once its own products with K are done (``k``), and also the next one's V codes (with V's
scales) once its products with V are (``kv``), so that they arrive while the tile's softmax and products
run; the loop without masks stops a round early so that its tiles' next ones are unmasked too; ``none``
loads a tile's codes as the warp starts it. ``k`` keeps the warps an SM (int4: 128 registers a thread,
4 bytes spilled; int8: 168, none); ``kv`` holds two tiles' codes, 168 registers for int4 (12 warps an
SM instead of 16) and up to 255 for int8 (8 instead of 12). ``pipe=auto`` (the default) takes kv for an
int8 cache whose tokens follow one another and none elsewhere: on an H200, kv ran int8 1.02-1.05x as fast
as none and int4 0.96-1.00x. prefetch is off by default: on an H200 it made every call 2-12 % slower
(docs/performance.md).
``--param ring=N`` (the keys form over a cache whose tokens follow one another, sm_90 and newer; 0, the
default, none): the tiles without masks come through a ring of N stages in shared memory, each holding a
round of the block's tiles (warp w's tile of round r is r x warps + w, so a round's keys follow one
another), filled by the copy engine (``cp.async.bulk``: one copy of the round's K rows, one of its V rows,
one each of the rows of K's scales and minimums its keys touch where a tile is one group of them, and with
V's scales on P one each of its keys' scales and minimums) and waited for on an mbarrier. One thread asks
for the first N rounds before Q is read; each warp counts itself in (a shared-memory atomic) as it finishes
its tile of a round, and the last one asks for the round N on into the same stage. So N rounds' bytes are on
their way without a register, and the codes come from shared memory instead of global memory (the same
bytes a lane, the same bits). The stages take the merge's bytes: int4 in groups of 128 at d = 128 with 8
warps is 35 KiB a stage, so ring=3 keeps two blocks an SM (16 warps). On an H100 ring=2 and 3 made every
call 0.76-0.93x as fast: a stage is filled again only once the block's slowest warp is done with it, and
a third of the warps' time went to waiting for a round to land (docs/performance.md).
``--param ring_fill=lanes`` (with ``ring=N``; ``bulk``, the default, is the ring above) gives each warp its own
N stages, each one of its tiles (its K rows, V rows, where a tile is one group of K's scales that group's row of
scales and of minimums, and with V's scales on P its keys' scales and minimums), copied by the warp's own lanes
(``cp.async``, 16 bytes a copy, sm_80 and newer) N tiles ahead: the first N before Q is read, the next as the
warp finishes a tile, waited for with ``cp.async.wait_group``. No warp waits for another, at the cost of
about ten copies a lane a tile. int4 in groups of 128 at d = 128 with 8 warps is 4.7 KiB a stage a warp:
ring=3 keeps two blocks an SM. On an H100 both fills ran 0.77-0.96x as fast as ring=0 with every warp an SM
holds, and 1.09-1.26x with half of them (two pieces a K/V head), the lanes' fill fastest at one sequence
(docs/performance.md): the loads ahead pay where fewer warps must keep the bytes coming.
``--param merge=last`` (the default) has the last block of each sequence x K/V head x row block to finish
merge the pieces' states in the partial kernel: each block counts itself in once its state is written (a
fenced atomic add), and the one that takes the last count reads the others' states from L2 and writes the
output, so there is no second launch. On an H200 (GQA 32/8, d = 128, 32k and 128k keys, one and eight
sequences) it ran 1.00-1.05x as fast as ``merge=kernel`` (a second kernel, bitdecode_combine) at eight
sequences, 0.99-1.02x at one (docs/performance.md).
``--param masks=all``: every tile clamps its keys' addresses to the cache and masks its scores;
``masks=edge``: only a piece's last tiles do, the tiles before them (whose keys are all in the cache
and visible to every query) run a copy of the loop without either, about 6-13 % fewer instructions a
tile (ptxas for sm_90: 875 against 928 for an int4 cache at d = 128, 842 against 901 for int8, 409
against 468 for fp16, in the rows form). ``masks=auto`` (the default) takes the one measured faster on
an H200 for the cache's element width in the rows form (AUTO_MASKS; docs/performance.md): edge for fp16,
bf16 and int4, all for int8; in the keys form the two are within 1 % for fp16 and int8, and edge is 2 %
faster for int4.
``--param v_scales=p`` (``auto``, the default, wherever it can run: the keys form over a cache whose V
groups span the head, ``--group`` >= d; ``values`` elsewhere, each key's scale and minimum applied to its
V elements) applies V's scales to P instead: a token's row of V is scale · (codes - c) + (minimum + c ·
scale), c the middle code (8 for int4, 128 for int8), so P V is (P scaled key by key) times the centred
codes, as fp16 integers, plus each row's sum of P x middle value, kept beside the row's sum and added to
O at the end. That takes the
``fma.rn.f16x2`` of every V pair and the loads of V's scales in pairs out of the loop (ptxas, sm_90, int4
at d = 128: 694 instructions a tile of 32 keys against 759): on an H200, int4 in groups of 128 at d =
128, GQA 32/8, 1.07-1.10x faster than ``values`` at 32k x 8, 128k x 1 and 128k x 8 keys, int8 1.03x at
128k x 8, with the same error (docs/performance.md). P x scale is rounded to fp16 once, as P alone is
with ``values``. The codes are centred so that the products' fp32 sums stay as large as the values'
spread about their middle: with the codes as they are, those sums hold the large and opposite sums of the
minimums and of the codes, whose rounding grows with the tiles a warp adds up (past kbench's error bound
for an int8 cache of 128k keys and 8 sequences; centred, its error is that of ``values``).
``--param k_scales=q`` (the keys form over a quantized cache whose groups of tokens are whole tiles;
``values``, the default, applies each group's scale and minimum to every dequantized K pair) applies K's
scales to the queries instead: a key's channel c is scale_c · code + minimum_c, and the bit tricks alone
give raw fp16 numbers offset + code (1024 + code, or 64 + code for int4's high nibbles, whose nibble then
sits under the exponent of 64), so S is the product of the raw numbers with Q' = Q x scale (one
``mul.rn.f16x2`` a Q register, rounded to fp16 as a dequantized value is) plus two terms common to the tile's
keys, each row's sum of Q x minimum and of the offsets x Q' (negated), from two more ``mma`` a k16 step. That
takes the subtraction to the code and the scale's ``fma.rn.f16x2`` of every K register out of the loop
(ptxas, sm_90, int4 in groups of 128 at d = 128, 8 warps, V's scales on P: 632 instructions a tile of 32
keys against 694). The raw terms cancel exactly (the same Q' on both sides, products exact in fp32); each
q' must be below fp16's largest number, 65504.
``--param v_codes=raw`` (where V's scales are on P; ``converted``, the default, turns V's codes into the
centred codes as fp16 integers, a sub a register) puts V's raw numbers into O += P V as well, and
one more ``mma`` a k16 step and m16 tile of channels, the offsets plus the middle code negated against the
same Pᵀ, takes them off in the same accumulator: 665 instructions a tile against 694, 601 with
``k_scales=q`` (ptxas, sm_90, as above). Within a k16 step the accumulator briefly holds the offsets'
terms, about 1032 times the step's sum of P', which cancel before the next.
Where a cache's tokens follow one another (each row's stride its size: the suite's caches, and caches
cut from longer ones along the tokens), the keys form addresses a tile's rows from its first by
constants folded into the loads; other strides take an instance with run-time strides.
Where K's groups of tokens are whole tiles (the group a multiple of ``tile``, as the default 32 and
32), a k16 step's scales are loaded once for the tile's keys instead of once per n8 tile. fp16 and bf16 caches run the
same kernel with the 16-bit values as the fragments (no conversion). A quantized cache's V groups must
be at least d / 8 channels (a lane's strip of V channels spans at most two groups).
"""

import math
from pathlib import Path

from kbench.loader import load_helper
from kbench.registry import Unsupported, implementation

_cupy = load_helper(Path(__file__).parent.parent / "_cupy_common.py")
seq_lengths = load_helper(Path(__file__).parent / "_lengths.py")

SOURCE = Path(__file__).with_suffix(".cu")
LOG2_E = 1.4426950408889634
HEAD_DIMS = (64, 128)
TILES = (16, 32, 64)
WARPS = (2, 4, 8)
# warps=auto: 8 in the keys form at d = 128, else 4. On an H100 (d = 128, GQA 32/8, 32k and 128k keys,
# interleaved; records in results/experiments/h100-decode-warps.jsonl) the keys form at 8 warps a block ran
# 1.03-1.06x as fast as at 4 for int4 and fp16 caches at one sequence (half the pieces, so the last block's
# merge takes fewer rounds) and 1.00-1.01x at eight; int8 1.00-1.02x. The rows form and d = 64 keep the 4 they were measured at.
AUTO_WARPS = 8
ROWS = 16  # query rows of a block: one m16 tile
FORMS = ("auto", "rows", "keys")  # the products' M rows: the query rows (S = Q Kᵀ), or the keys (Sᵀ = K Qᵀ)
# form=auto is keys wherever it can run (no ring of stages): on an H200 (d = 128, GQA 32/8, 32k and
# 128k keys, batch 1 and 8) it ran an int4 cache 8-19 % faster than form=rows, int8 5-13 % and fp16
# 0-2 % (docs/performance.md).
FORM_ROWS = {"rows": ROWS, "keys": 8}  # query rows of a block in each form (keys: one n8 tile)
COMBINE_CHANNELS = 32  # a warp of the merge of the pieces, a lane a channel (the .cu's COMBINE_CHANNELS)
COMBINE_PIECES = 32  # pieces each lane of the merge loads at once (the .cu's COMBINE_PIECES)
COMBINE_WARPS = 2  # warps of a merge block, each its own pieces of a round (the .cu's COMBINE_WARPS)
MERGE_PIECES = {128: 16, 64: 32}  # pieces a warp's round of the partial kernel's merge loads (merge=last; the .cu's)
CODE_BITS = {"int4": 4, "int8": 8, "fp16": 16, "bf16": 16}  # what a cache's elements are read as
STAGES = (0, 2, 3, 4)
MASKS = ("auto", "all", "edge")  # which tiles clamp addresses and mask scores: every one, or a piece's last ones
# masks=auto by the bits a cache element is read as. On an H200 (d = 128, GQA 32/8, 32k and 128k keys,
# batch 1 and 8) the edge-free loop of the rows form ran 2-9 % faster for fp16 and int4 caches and 4-7 %
# slower for int8; in the keys form it is 2 % faster for int4, and within 1 % either way for the others.
AUTO_MASKS = {4: "edge", 8: "all", 16: "edge"}
# Where V's scales are applied: to every dequantized V pair (values), or, where a token has one scale
# and minimum for all its channels (group >= d), to P key by key and to a running sum of P x middle value
# per row (p; the keys form only).
V_SCALES = ("auto", "values", "p")
# Where K's scales are applied: to every dequantized K pair (values), or to the queries (q: Q times each
# channel's scale, the codes as raw fp16 numbers in the products, and each row's minimum and offset terms
# from two more mma a k16 step; the keys form over a cache whose groups of tokens are whole tiles).
K_SCALES = ("values", "q")
# How V's codes enter O += P V where V's scales are on P (v_scales=p): converted to the centred codes as
# fp16 integers (a sub a register), or raw (the bit tricks' fp16 numbers, offset + code, their
# offsets and middle code taken off by one more mma a k16 step and m16 tile of channels).
V_CODES = ("converted", "raw")


def resolve_form(form: str, stages: int = 0) -> str:
    """form=auto as the form it takes: keys, but rows where a ring of stages is asked for (form=keys
    loads into registers only); rows or keys as given."""
    if form != "auto":
        return form
    return "rows" if stages else "keys"


def v_whole(d: int, group: int, bits: int) -> bool:
    """Whether a quantized cache's V has one scale and minimum a token (its groups of channels span the head)."""
    return bits < 16 and group >= d


def resolve_v_scales(v_scales: str, case, form: str) -> str:
    """v_scales=auto as where V's scales are applied: p where they can fold into P (the keys form, one
    group a token), values elsewhere; values or p as given."""
    if v_scales != "auto":
        return v_scales
    return "p" if form == "keys" and v_whole(case.d, case.group, CODE_BITS[case.kv_dtype]) else "values"


def resolve_warps(warps, form: str, d: int) -> int:
    """warps=auto as the warps a block takes in ``form`` (keys or rows, resolved) at head dim ``d``:
    AUTO_WARPS in the keys form at d = 128, else 4; 2, 4 or 8 as given."""
    if warps != "auto":
        return warps
    return AUTO_WARPS if form == "keys" and d == 128 else 4


def resolve_masks(masks: str, bits: int, ring: int = 0) -> str:
    """masks=auto as the loop form it takes for a cache of ``bits``-bit elements (edge with a ring, which
    feeds the loop without masks); all or edge as given."""
    if masks != "auto":
        return masks
    return "edge" if ring else AUTO_MASKS[bits]


PREFETCH = range(0, 5)  # tiles ahead a warp asks L2 for (form=keys over a dense cache); 0: none
LEADS = (0, 1, 2, 4, 8)  # a warp's first tiles it asks L2 for before it reads Q (form=keys over a dense cache)
# Which of the next tile's codes each tile loads into registers (form=keys, int4 and int8 caches): none,
# K's, or K's and V's; the .cu's PIPE 0, 1, 2.
PIPE = {"none": 0, "k": 1, "kv": 2}
PIPES = ("auto", *PIPE)
# pipe=auto: kv for an int8 cache whose tokens follow one another in the keys form, none elsewhere. On an
# H200 (GQA 32/8, d = 128, groups of 128, 32k and 128k keys, one and eight sequences, interleaved) pipe=kv
# ran int8 1.02-1.05x as fast as none, int4 0.96-1.00x (docs/performance.md).
AUTO_PIPE_BITS = (8,)


# A ring of stages in shared memory for the tiles without masks (form=keys over a dense cache): 0 (none) or its
# stages, the host passing them at run time. How its stages are filled (ring_fill): `bulk`, each stage a round of
# the block's tiles filled by sm_90's bulk copies (the .cu's PIPE 3); `lanes`, each warp its own stages, one of
# its tiles each, filled by its lanes' cp.async (PIPE 4).
RINGS = (0, 2, 3, 4)
RING_FILLS = ("bulk", "lanes")
RING_PIPES = {"bulk": "ring", "lanes": "ring-lanes"}
LOADS = {**PIPE, "ring": 3, "ring-lanes": 4}  # the .cu's PIPE for each way a tile's codes arrive


def resolve_pipe(pipe: str, bits: int, form: str, dense: bool = True, ring: int = 0, ring_fill: str = "bulk") -> str:
    """pipe=auto as the loads it takes (the ring where ``ring`` asks for one, by its ``ring_fill``; else kv where
    AUTO_PIPE_BITS, the keys form and a dense cache meet, else none); none, k or kv as given."""
    if ring:
        return RING_PIPES[ring_fill]
    if pipe != "auto":
        return pipe
    return "kv" if bits in AUTO_PIPE_BITS and form == "keys" and dense else "none"


def ring_stage_bytes(d: int, bits: int, tile: int, warps: int, v_fold: bool, group: int = 0) -> int:
    """Bytes of one stage of the ring (the .cu's RingStage): the K and V rows of a round of the block's
    tiles (one a warp); where each tile is one group of K's scales (``group``, a quantized cache; 0: not so),
    the rows of d scales and of d minimums the round's keys can touch; and with V's scales on P (``v_fold``)
    the round's V scales and minimums, each from the 16 bytes holding its first."""
    keys = warps * tile
    k_rows = (keys - 1) // group + 2 if group else 0
    return 2 * keys * d * bits // 8 + 2 * k_rows * d * 2 + (2 * (2 * keys + 16) if v_fold else 0)


def warp_stage_bytes(d: int, bits: int, tile: int, v_fold: bool, one_group: bool = False) -> int:
    """Bytes of one stage of a warp's own ring (the .cu's WarpStage): one tile's K and V rows; where the tile is
    one group of K's scales (``one_group``), that group's row of d scales and of d minimums; and with V's scales on
    P (``v_fold``) its keys' V scales and minimums, each from the 16 bytes holding its first."""
    return 2 * tile * d * bits // 8 + (2 * d * 2 if one_group else 0) + (2 * (2 * tile + 16) if v_fold else 0)


# How the pieces' states are merged: a second kernel (bitdecode_combine) after the partial one, or the
# last block of each sequence x K/V head x row block to finish, in the partial kernel (no second launch).
MERGES = ("kernel", "last")
DEFAULT_PARAMS = {"splits": 0, "tile": 32, "warps": "auto", "stages": 0, "masks": "auto", "form": "auto",
                  "v_scales": "auto", "k_scales": "values", "v_codes": "converted", "prefetch": 0, "lead": 0, "pipe": "auto", "ring": 0,
                  "ring_fill": "bulk", "merge": "last"}


def v_span(d: int, group: int, bits: int) -> int | None:
    """How many of V's channel groups a lane's strip of d/8 channels can touch: 1 where the groups
    are whole strips, 2 where a group is longer than a strip (at most one boundary inside it), None
    (unsupported) where groups are shorter than strips. A 16-bit cache has no groups: 1."""
    strip = d // 8
    if bits == 16 or group % strip == 0:
        return 1
    return 2 if group > strip else None


def one_group_a_tile(group: int, tile: int, bits: int) -> bool:
    """Whether every tile's keys share one group of K's scales (KG1 in the .cu): a quantized cache whose
    group of tokens is a multiple of the tile (pieces and tiles start at multiples of the tile)."""
    return bits < 16 and group % tile == 0


def name_expression(bits: int, bf16: bool, d: int, tile: int, warps: int, vspan: int, one_group: bool = False,
                    stages: int = 0) -> str:
    """The template instance of the partial kernel that NVRTC compiles (and kbench explain hands to ptxas)."""
    return _cupy.instance_name("bitdecode_partial", bits, bf16, d, tile, warps, vspan, one_group, stages)


def keys_form_name(bits: int, bf16: bool, d: int, tile: int, warps: int, vspan: int, one_group: bool = False,
                   v_fold: bool = False, dense: bool = True, pipe: str = "none", k_fold: bool = False,
                   v_raw: bool = False) -> str:
    """The template instance of the keys-as-rows partial kernel (form=keys); ``v_fold``: V's scales
    applied to P (v_scales=p); ``dense``: the cache's tokens one after the other (see :func:`dense_rows`);
    ``pipe``: which of the next tile's codes each tile loads, or the ring (PIPE); ``k_fold``: K's scales applied to Q
    (k_scales=q); ``v_raw``: V's codes as raw fp16 numbers (v_codes=raw)."""
    return _cupy.instance_name("bitdecode_partial_keys", bits, bf16, d, tile, warps, vspan, one_group, v_fold, k_fold,
                               v_raw, dense, LOADS[pipe])


def instance(case, tile: int, warps: int, stages: int, form: str = "rows", v_scales: str = "values",
             dense: bool = True, pipe: str = "none", k_scales: str = "values", v_codes: str = "converted") -> str:
    """The partial kernel's instance for a case (``v_scales``: values or p; ``k_scales``: values or q;
    ``v_codes``: converted or raw)."""
    bits = CODE_BITS[case.kv_dtype]
    fold = v_scales == "p"
    shape = (bits, case.kv_dtype == "bf16", case.d, tile, warps, 1 if fold else v_span(case.d, case.group, bits),
             one_group_a_tile(case.group, tile, bits))
    if form == "keys":
        return keys_form_name(*shape, fold, dense, pipe, k_fold=k_scales == "q", v_raw=v_codes == "raw")
    return name_expression(*shape, stages)


def dense_rows(k, v, v_scale=None) -> bool:
    """Whether each token's row of K and of V (codes or 16-bit values) follows the one before it, and,
    given ``v_scale`` (v_scales=p: one a token), V's scales one element a token: the keys form then
    addresses a tile's rows from its first one by constants (the .cu's DENSE). A dimension of one token
    is never stepped along."""
    rows = [(t.shape[2], t.stride(2), t.shape[-1]) for t in (k, v)]
    if v_scale is not None:
        rows.append((v_scale.shape[2], v_scale.stride(2), 1))
    return all(n == 1 or stride == row for n, stride, row in rows)


def combine_name(d: int, bf16: bool) -> str:
    return _cupy.instance_name("bitdecode_combine", d, bf16)


def smem_bytes(d: int, warps: int, bits: int = 16, tile: int = 32, stages: int = 0, form: str = "rows",
               ring: int = 0, v_fold: bool = False, group: int = 0, ring_fill: str = "bulk") -> int:
    """The partial kernel's dynamic shared memory (PartialSmem in the .cu): Q's fragments and the ring of
    ``stages`` code tiles a warp (a lane's words of a tile rounded up to 16 bytes), then, in the same
    bytes, each warp's 16 maxima, 16 sums and 16 rows of d + 8 floats of O. form=keys keeps Q in
    registers: only each warp's 8 maxima, 8 sums and 8 rows of d + 4 floats, in the bytes of the ring of
    ``ring`` stages (:func:`ring_stage_bytes`; the cache's ``group``, its rows of K scales where a tile is
    one group of them) where there is one, whose 8-byte barriers and 4-byte counts follow; with
    ``ring_fill=lanes``, ``ring`` stages a warp (:func:`warp_stage_bytes`) and no barriers."""
    if form == "keys":
        merge = warps * FORM_ROWS["keys"] * (2 + d + 4) * 4
        if not ring:
            return merge
        k_group = group if one_group_a_tile(group, tile, bits) else 0
        if ring_fill == "lanes":
            return max(ring * warps * warp_stage_bytes(d, bits, tile, v_fold, bool(k_group)), merge)
        stages_bytes = ring * ring_stage_bytes(d, bits, tile, warps, v_fold, k_group)
        return -(-max(stages_bytes, merge) // 8) * 8 + (8 + 4) * ring
    lane_words = (tile // 8) * (d // 4) * bits // 32 + (tile // 16) * 4 * (d // 8) * bits // 32
    ring = stages * warps * math.ceil(lane_words / 4) * 512
    return max(d // 16 * 32 * 16 + ring, warps * ROWS * (2 + d + 8) * 4)


def divisor(d: int) -> tuple[int, int]:
    """(magic, shift) with floor(x / d) == (x * magic) >> shift for every 0 <= x < 2**31, magic < 2**32: how
    the kernel divides a key by the group (its ``divide``) with a multiply and a shift. With
    shift = 31 + ceil(log2 d) and magic = ceil(2**shift / d) = (2**shift + e) / d, 0 <= e < d, the product
    over 2**shift is x / d + x e / (d 2**shift), and that excess is below 2**31 / 2**shift <= 1 / d, too
    little to reach the next integer."""
    if d < 1:
        raise Unsupported(f"group {d}: a positive number of elements")
    shift = 31 + (d - 1).bit_length()
    return -(-(1 << shift) // d), shift


def row_blocks(rows: int, form: str = "rows") -> int:
    return math.ceil(rows / FORM_ROWS[form])


def split_plan(length: int, programs: int, sms: int, resident: int, tile: int, warps: int,
               splits: int = 0) -> tuple[int, int]:
    """(pieces, keys a piece) for a cache of ``length`` tokens, each piece whole tiles of ``tile`` keys.

    ``programs`` blocks share each piece (sequences x K/V heads x row blocks); ``resident`` is how
    many blocks of the kernel fit on an SM at once. ``splits`` 0 asks for as many pieces as fit in one
    wave of ``sms x resident`` blocks (rounded down: a few blocks past a wave run alone after it,
    nearly doubling the time), but no piece shorter than one tile per warp (a shorter one leaves
    warps idle, and a short cache is better served by fewer, fuller blocks); N asks for N pieces, at
    most one a tile."""
    if splits < 0:
        raise Unsupported(f"splits={splits}: 0 (automatic) or a positive number")
    tiles = max(1, math.ceil(length / tile))
    if splits == 0:
        wanted = min(max(1, sms * max(1, resident) // programs), max(1, tiles // warps))
    else:
        wanted = min(splits, tiles)
    tiles_per_split = math.ceil(tiles / max(1, wanted))
    keys = tiles_per_split * tile
    return math.ceil(length / keys), keys


def check_config(case, tile: int, warps: int, form: str = "auto", stages: int = 0,
                 v_scales: str = "auto", prefetch: int = 0, pipe: str = "none", k_scales: str = "values",
                 v_codes: str = "converted", lead: int = 0, ring: int = 0, masks: str = "auto",
                 ring_fill: str = "bulk") -> str | None:
    """Why this case, block shape and form cannot run, or None."""
    if seq_lengths.is_ragged(case):  # --l 1000+130000
        return "a ragged batch (one length a sequence): cupy-bitdecode takes one length for every sequence"
    if case.kv_dtype not in CODE_BITS:
        return f"{case.kv_dtype} cache: cupy-bitdecode is built for {', '.join(CODE_BITS)} caches"
    if case.d not in HEAD_DIMS:
        return f"head dim {case.d} (cupy-bitdecode is built for d = 64 and 128)"
    if tile not in TILES:
        return f"tile={tile} is not one of {', '.join(map(str, TILES))}"
    if warps != "auto" and warps not in WARPS:
        return f"warps={warps} is not one of auto, {', '.join(map(str, WARPS))}"
    if v_span(case.d, case.group, CODE_BITS[case.kv_dtype]) is None:
        return (f"group {case.group} is shorter than d/8 = {case.d // 8} channels: a lane's strip of V "
                "channels would span more than two scale groups")
    if form == "keys" and stages:
        return "form=keys loads each tile into registers: stages=0 only"
    if prefetch and resolve_form(form, stages) != "keys":
        return "prefetch asks L2 for the tiles ahead in the keys form: form=keys (or auto) and stages=0"
    if lead and resolve_form(form, stages) != "keys":
        return "lead asks L2 for a warp's first tiles in the keys form: form=keys (or auto) and stages=0"
    if ring and not (resolve_form(form, stages) == "keys" and pipe in ("none", "auto") and masks != "all"):
        return ("ring fills shared memory for the keys form's tiles without masks: form=keys (or auto), stages=0, "
                "pipe=none (or auto) and masks=edge (or auto)")
    if ring_fill != "bulk" and not ring:
        return f"ring_fill={ring_fill} says how a ring's stages are filled: with ring=2, 3 or 4"
    if pipe not in ("none", "auto") and (resolve_form(form, stages) != "keys" or CODE_BITS[case.kv_dtype] == 16):
        return (f"pipe={pipe} loads the next tile's codes into registers: the keys form (form=keys or auto, "
                "stages=0) over an int4 or int8 cache")
    if v_scales == "p" and not (resolve_form(form, stages) == "keys"
                                and v_whole(case.d, case.group, CODE_BITS[case.kv_dtype])):
        return ("v_scales=p folds V's scales into P: the keys form over a quantized cache whose V groups "
                f"span the head (--group >= d = {case.d})")
    if k_scales == "q" and not (resolve_form(form, stages) == "keys"
                                and one_group_a_tile(case.group, tile, CODE_BITS[case.kv_dtype])):
        return ("k_scales=q folds K's scales into the queries: the keys form over a quantized cache whose groups "
                f"of tokens are whole tiles (--group a multiple of tile={tile})")
    if v_codes == "raw" and resolve_v_scales(v_scales, case, resolve_form(form, stages)) != "p":
        return ("v_codes=raw puts V's raw codes into the products where V's scales are on P: the keys form over a "
                f"quantized cache whose V groups span the head (--group >= d = {case.d}), v_scales=auto or p")
    return None


def default_instances() -> list[str]:
    """The template instances kbench launches with the default tile and warps, in both forms, over every
    case it runs: the .cu's KBENCH_INSTANTIATE list, which the nvcc build test compiles, must hold these."""
    names = []
    tile, warps, stages = DEFAULT_PARAMS["tile"], DEFAULT_PARAMS["warps"], DEFAULT_PARAMS["stages"]
    for bits, bf16 in ((4, False), (8, False), (16, False), (16, True)):
        for d in HEAD_DIMS:
            # groups spanning two V groups a strip are never whole tiles (a strip of d/8 divides the tile)
            shapes = ((1, True), (1, False), (2, False)) if bits < 16 else ((1, False),)
            keys = [(vspan, one_group, False) for vspan, one_group in shapes]
            if bits < 16:  # V's scales folded into P (v_scales=p): one group a token, the keys whole tiles or not
                keys += [(1, one_group, True) for one_group in (True, False)]
            rows_warps, keys_warps = resolve_warps(warps, "rows", d), resolve_warps(warps, "keys", d)
            names += [name_expression(bits, bf16, d, tile, rows_warps, vspan, one_group, stages)
                      for vspan, one_group in shapes]
            names += [keys_form_name(bits, bf16, d, tile, keys_warps, vspan, one_group, fold, dense)
                      for vspan, one_group, fold in keys for dense in (True, False)]
            # a ring of tiles in shared memory (ring=N) filled either way, over dense caches
            names += [keys_form_name(bits, bf16, d, tile, keys_warps, vspan, one_group, fold, True, ring_pipe)
                      for ring_pipe in RING_PIPES.values() for vspan, one_group, fold in keys]
            if bits < 16:  # each tile loading the next one's codes (pipe=k|kv), over dense caches
                names += [keys_form_name(bits, bf16, d, tile, keys_warps, vspan, one_group, fold, True, pipe)
                          for pipe in ("k", "kv") for vspan, one_group, fold in keys]
                # K's scales folded into Q (k_scales=q: tiles of one group), and V's raw codes (v_codes=raw, where
                # V's scales are on P) with K's scales on the values or on Q; loads as a warp starts a tile
                names += [keys_form_name(bits, bf16, d, tile, keys_warps, 1, True, fold, dense, k_fold=True)
                          for fold in (False, True) for dense in (True, False)]
                names += [keys_form_name(bits, bf16, d, tile, keys_warps, 1, one_group, True, True, k_fold=k_fold,
                                         v_raw=True)
                          for one_group, k_fold in ((True, False), (False, False), (True, True))]
    names += [combine_name(d, bf16) for d in HEAD_DIMS for bf16 in (False, True)]
    return names


def k_channel(bits: int, step: int, reg: int, half: int) -> int:
    """The channel (within a lane's chunk of d/4) in half ``half`` of B register ``reg`` of k16 step
    ``step`` of S = Q Kᵀ: int4's pairs are the channels 4 apart that one lop3 takes from a 32-bit word
    of 8 nibbles; int8 and 16-bit values' pairs are neighbours (k_channel in the .cu)."""
    if bits == 4:
        return 8 * (step // 2) + 2 * (step % 2) + reg + 4 * half
    return 4 * step + 2 * reg + half


def lane_elements(bits: int, d: int, lane: int, form: str = "keys") -> dict:
    """Which K and V elements lane ``lane`` holds in its fragments after dequantization, and which of O's
    it accumulates (keys relative to the tile's first; rows of the block's GQA group). Each list is in
    the PTX order of the fragment's halves (a0..a7, b0..b3, d0..d3).

    ``form="keys"`` (Sᵀ = K Qᵀ, Oᵀ += Vᵀ Pᵀ): ``k`` per m16 tile mt and k16 step s, the A fragment's
    [(key, channel)]; ``v`` per k16 step j of keys and m16 tile mi of channels, V's A fragment's
    [(key, channel)]; ``o`` per m16 tile mi, the C fragment's [(row, channel)].
    ``form="rows"`` (S = Q Kᵀ, O += P V): ``k`` per n8 tile nt and k16 step s, the B fragment's
    [(key, channel)]; ``v`` per k16 step j and n8 tile jn of O, the B fragment's [(key, channel)];
    ``o`` per n8 tile jn, the C fragment's [(row, channel)]."""
    g, t = divmod(lane, 4)
    kch, vch = d // 4, d // 8
    chunk = [[t * kch + k_channel(bits, s, r, e) for r in (0, 1) for e in (0, 1)] for s in range(d // 16)]
    if form == "keys":
        k = {(mt, s): [(16 * mt + g + 8 * h, chunk[s][2 * r + e]) for r in (0, 1) for h in (0, 1) for e in (0, 1)]
             for mt in range(2) for s in range(d // 16)}
        v = {(j, mi): [(16 * j + 2 * t + 8 * pr + e, g * vch + 2 * mi + c) for pr in (0, 1) for c in (0, 1)
                       for e in (0, 1)]
             for j in range(2) for mi in range(d // 16)}
        o = {mi: [(2 * t + e, g * vch + 2 * mi + c) for c in (0, 1) for e in (0, 1)] for mi in range(d // 16)}
    else:
        k = {(nt, s): [(8 * nt + g, channel) for channel in chunk[s]] for nt in range(2) for s in range(d // 16)}
        v = {(j, jn): [(16 * j + 2 * t + 8 * r + e, g * vch + jn) for r in (0, 1) for e in (0, 1)]
             for j in range(2) for jn in range(d // 8)}
        o = {jn: [(g + 8 * h, (2 * t + e) * vch + jn) for h in (0, 1) for e in (0, 1)] for jn in range(d // 8)}
    return {"k": k, "v": v, "o": o}


def lane_table(bits: int, d: int, form: str) -> list[dict]:
    """`kbench explain`'s lane table: each lane's elements of the tile's first fragments (K's first k16
    step, V's and O's first tile), as ``kbench explain mma`` shows the instruction's."""
    def pairs(elements):
        return " ".join(f"({a},{b})" for a, b in elements)

    keys = form == "keys"
    rows = []
    for lane in range(32):
        m = lane_elements(bits, d, lane, form)
        rows.append({"lane": str(lane),
                     ("K: A of keys 0-15" if keys else "K: B of keys 0-7") + ", k16 step 0 (key,channel)": pairs(m["k"][(0, 0)]),
                     "V: " + ("A of channels' m16 tile 0" if keys else "B of O's n8 tile 0") + ", keys 0-15 (key,channel)":
                         pairs(m["v"][(0, 0)]),
                     "O: C of tile 0 (row,channel)": pairs(m["o"][0])})
    return rows


def _plan(case, tile: int, warps: int, splits: int, sms: int, resident: int, form: str = "rows") -> dict:
    bits = CODE_BITS[case.kv_dtype]
    rows = case.hq // case.hkv * case.q
    blocks = row_blocks(rows, form)
    programs = case.batch * case.hkv * blocks
    n_splits, keys = split_plan(case.l, programs, sms, resident, tile, warps, splits)
    return {"bits": bits, "rows": rows, "row_blocks": blocks, "programs": programs, "splits": n_splits,
            "keys_per_split": keys, "grid": (blocks * n_splits, case.batch * case.hkv), "block": (32 * warps,),
            "block_rows": FORM_ROWS[form]}


def explain(case, params) -> dict:
    """`kbench explain decode --impl cupy-bitdecode`: the launch, the lanes' elements, and ptxas's
    registers, with the pieces chosen for the occupancy they give on an H200."""
    from kbench.devices import by_key
    from kbench.kernel_resources import from_nvcc, launch_figures
    from kbench.occupancy import blocks_per_sm

    tile, warps, stages = params["tile"], params["warps"], params["stages"]
    reason = check_config(case, tile, warps, params["form"], stages, params["v_scales"], params["prefetch"],
                          params["pipe"], params["k_scales"], params["v_codes"], params["lead"], params["ring"],
                          params["masks"], params["ring_fill"])
    if reason:
        return {"configuration": f"not runnable: {reason}"}
    bits, ring, ring_fill = CODE_BITS[case.kv_dtype], params["ring"], params["ring_fill"]
    masks = resolve_masks(params["masks"], bits, ring)
    form = resolve_form(params["form"], stages)
    warps = resolve_warps(warps, form, case.d)
    v_scales = resolve_v_scales(params["v_scales"], case, form)
    pipe = resolve_pipe(params["pipe"], bits, form, ring=ring, ring_fill=ring_fill)
    name = instance(case, tile, warps, stages, form, v_scales, pipe=pipe, k_scales=params["k_scales"],
                    v_codes=params["v_codes"])
    smem = smem_bytes(case.d, warps, bits, tile, stages, form, ring, v_scales == "p", case.group, ring_fill)
    try:
        resources, failure = from_nvcc(SOURCE, name), None
    except RuntimeError as exc:
        resources, failure = None, f"could not compile: {exc}"
    resident = blocks_per_sm(32 * warps, resources["registers"], smem)["blocks_per_sm"] if resources else 1
    h200 = by_key("h200")
    plan = _plan(case, tile, warps, params["splits"], h200.sms, resident, form)
    blocks = plan["grid"][0] * plan["grid"][1]
    block_rows, keys_form = plan["block_rows"], form == "keys"
    # what a stage of either ring holds (a round's keys can touch several rows of K scales)
    ring_parts = ("K rows, V rows"
                  + ((", rows of K scales" if ring_fill == "bulk" else ", K scales")
                     if one_group_a_tile(case.group, tile, bits) else "")
                  + (", V scales" if v_scales == "p" else ""))
    figures = {
        "rows of a block": f"{plan['rows']} of the GQA group (query heads x {case.q} queries) in "
                           f"{plan['row_blocks']} block(s) of {block_rows} ({'an n8' if keys_form else 'an m16'} tile; "
                           f"{block_rows * plan['row_blocks'] - plan['rows']} zero rows)",
        "pieces of the cache": f"{plan['splits']} of {plan['keys_per_split']} keys ("
                               + ("automatic: one wave on an H200" + ("" if resources else ", at 1 block an SM")
                                  if params["splits"] == 0 else "fixed") + ")",
        "grid": f"{plan['grid'][0]} (row blocks x pieces) x {plan['grid'][1]} (sequences x K/V heads) = {blocks} "
                "blocks, then " + ("no second kernel (one piece)" if plan["splits"] == 1 else
                                   f"in each of the {plan['programs']} sequence x K/V head x row block, the last block "
                                   "to finish merges the pieces by log-sum-exp (no second kernel; a warp a row, a lane "
                                   f"{case.d // 32} channels, {MERGE_PIECES[case.d]} pieces' states loaded at a time)"
                                   if params["merge"] == "last" else
                                   f"the log-sum-exp merge: {plan['programs'] * min(block_rows, plan['rows']) * (case.d // COMBINE_CHANNELS)} "
                                   f"blocks of {COMBINE_WARPS} warps (a row, a lane a channel), each lane loading "
                                   f"{COMBINE_PIECES} pieces' states at a time"),
        "form": ("the keys as the mma rows (Sᵀ = K Qᵀ, Oᵀ += Vᵀ Pᵀ), the query rows an n8 tile" if keys_form else
                 "the query rows as the mma rows (S = Q Kᵀ, O += P V), an m16 tile")
                + (" (form=auto for this cache)" if params["form"] == "auto" else ""),
        "block": f"{warps} warps, each its own tiles of {tile} keys"
                 + (" (warps=auto for this form and d)" if params["warps"] == "auto" else ""),
        "loads": (f"a ring of {ring} stages in shared memory, each a round of the block's tiles (one a warp): its "
                  f"{ring_parts} one bulk copy each (cp.async.bulk, sm_90), asked for {ring} rounds ahead: the first "
                  "before Q is read, the next by the last warp done with a stage; the tiles with masks load into "
                  "registers as a warp starts them" if ring and ring_fill == "bulk" else
                  f"a ring of {ring} stages a warp in shared memory, each one of its tiles: its {ring_parts}, copied "
                  f"by the warp's lanes (cp.async, 16 bytes each) {ring} tiles ahead: the first before Q is read, the "
                  "next as the warp finishes a tile, no warp waiting for another; the tiles with masks load into "
                  "registers as a warp starts them" if ring else
                  "K's codes into registers during the tile before (after its products with K), V's as a warp "
                  "starts a tile" if pipe == "k" else
                  "codes into registers during the tile before (K's after its products with K, V's after its own), "
                  "two tiles' codes in registers" if pipe == "kv" else
                  "codes into registers as a warp starts a tile" if stages == 0 else
                  f"a ring of {stages} tiles a warp in shared memory, cp.async {stages - 1} tiles ahead")
                 + (" (pipe=auto for this cache)" if params["pipe"] == "auto" and stages == 0 and not ring else "")
                 + ("; K's scales once a k16 step for the tile's one group" if one_group_a_tile(case.group, tile, bits)
                    else ("; K's scales once a k16 step and n8 tile" if bits < 16 else "")),
        "prefetch": (f"as a warp starts a tile, it asks L2 for its tile {params['prefetch']} ahead, a 128-byte line "
                     "a lane (where the cache's tokens follow one another)" if params["prefetch"] else
                     "none"),
        "lead": (f"before it reads Q, a warp asks L2 for its first {params['lead']} tile(s), a 128-byte line a lane "
                 "(where the cache's tokens follow one another)" if params["lead"] else "none"),
        "masks": ("every tile clamps its keys to the cache and masks its scores" if masks == "all" else
                  "a piece's last tiles clamp and mask; the tiles before them run a loop without either")
                 + (" (masks=auto for this cache)" if params["masks"] == "auto" else ""),
        "mma.sync m16n8k16 per warp and tile": (
            f"Sᵀ=KQᵀ {tile // 16} x {case.d // 16}, Oᵀ+=VᵀPᵀ {case.d // 16} x {tile // 16}" if keys_form else
            f"S=QKᵀ {tile // 8} x {case.d // 16}, O+=PV {tile // 16} x {case.d // 8}"),
        "K fragment of lane 4g+t": ("keys 16mt+g and +8 (A rows of m16 tile mt)" if keys_form else
                                    "key 8nt+g (n8 tile nt)") + "; channels t·d/4 + "
                                   + ("8(s/2) + 2(s%2) + r + {0, 4}" if bits == 4 else "4s + 2r + {0, 1}")
                                   + " (k16 step s, register r)",
        "V fragment of lane 4g+t": ("channels g·d/8 + 2mi and +1 (A rows of m16 tile mi of Oᵀ); keys 16j + 2t + 8r + {0, 1} "
                                    "(k16 step j); Pᵀ from Sᵀ's C fragments by movmatrix.trans" if keys_form else
                                    "channel g·d/8 + jn (n8 tile jn of O); keys 16j + 2t + 8r + {0, 1} "
                                    "(k16 step j, register r)"),
        "lane table": lane_table(bits, case.d, form),
        "dequantization": {4: "lop3 (nibbles under 0x6400, high nibbles under 0x5400), sub to the code, fma.rn.f16x2 with "
                              "scale and minimum",
                           8: "prmt (bytes under 0x64), sub to the code, fma.rn.f16x2 with scale and minimum",
                           16: "none: the 16-bit values are the fragments (V's pairs of keys by prmt)"}[bits]
                          + ("; V's codes stay codes, less the middle code: each key's scale multiplies its P (fp32, "
                             "before the rounding to fp16), its middle value goes into a running sum of P x middle value "
                             "per row, added to O at the end"
                             + (" (v_scales=auto: one group a token)" if params["v_scales"] == "auto" else "")
                             if v_scales == "p" else "")
                          + ("; K's codes stay raw fp16 numbers (1024 + code; 64 + code for int4's high nibbles): "
                             "each channel's scale multiplies Q (mul.rn.f16x2, once a k16 step), and two more mma a "
                             "k16 step add each row's sum of Q x minimum less the raw numbers' offsets x Q' to "
                             "every key (k_scales=q)" if params["k_scales"] == "q" else "")
                          + ("; V's codes go into the products raw too, their offsets and middle code taken off by "
                             "one more mma a k16 step and m16 tile of channels (v_codes=raw)"
                             if params["v_codes"] == "raw" else ""),
    }
    if resources:
        figures.update(launch_figures(dict(resources), blocks, 32 * warps, smem))
    else:
        figures["registers"] = failure or "unknown here (no nvcc): run on the GPU, where each record's config has them"
    return figures


def _supports(case):
    return check_config(case, DEFAULT_PARAMS["tile"], DEFAULT_PARAMS["warps"])


@implementation(
    "decode", "cupy-bitdecode", backend="cupy", cuda=True, modules=("torch", "cupy"), min_cc=(8, 0),
    supports=_supports, params=dict(DEFAULT_PARAMS), explain=explain,
    allowed={"splits": lambda value: None if value >= 0 else "splits takes 0 (automatic) or a positive number",
             "tile": TILES, "warps": ("auto", *WARPS), "stages": STAGES, "masks": MASKS, "form": FORMS, "v_scales": V_SCALES,
             "k_scales": K_SCALES, "v_codes": V_CODES,
             "prefetch": PREFETCH, "lead": LEADS, "pipe": PIPES, "ring": RINGS, "ring_fill": RING_FILLS,
             "merge": MERGES},
    description="BitDecoding-style decode in CUDA C++: mma.sync m16n8k16 with the keys (or the GQA group) as "
                "the rows, int4/int8 codes dequantized into the fragments by lop3/prmt, split-KV merged by "
                "log-sum-exp",
)
def cupy_bitdecode(case, inputs, out, splits, tile, warps, stages, masks, form, v_scales, k_scales, v_codes, prefetch,
                   lead, pipe, ring, ring_fill, merge):
    import numpy as np
    import torch

    from kbench.occupancy import LIMITS, blocks_per_sm

    reason = check_config(case, tile, warps, form, stages, v_scales, prefetch, pipe, k_scales, v_codes, lead, ring,
                          masks, ring_fill)
    if reason:
        raise Unsupported(reason)
    if ring and ring_fill == "bulk" and torch.cuda.get_device_capability(inputs["q"].device) < (9, 0):
        raise Unsupported("ring fills shared memory by bulk copies (cp.async.bulk): sm_90 and newer")
    q = inputs["q"]
    quantized = "k_codes" in inputs
    if quantized:
        k, v = inputs["k_codes"], inputs["v_codes"]
        scales = (inputs["k_scale"], inputs["k_min"], inputs["v_scale"], inputs["v_min"])
        bits = 8 * k.shape[-1] // case.d  # int4's codes are two a byte
    else:
        k, v = inputs["k"], inputs["v"]
        scales = ()
        bits = 16
    masks = resolve_masks(masks, bits, ring)
    for t in (q, k, v, out, *scales):
        if t.stride(-1) != 1:
            raise Unsupported("cupy-bitdecode needs a contiguous last dimension")
    # K and V rows, and K's scale rows, are read with vector loads of up to 16 bytes (a dimension of
    # size 1 is never stepped along: its stride does not matter, and torch leaves it arbitrary).
    for t in (k, v, *scales[:2]):
        if t.data_ptr() % 16 or any(st * t.element_size() % 16 for st, n in zip(t.stride()[:-1], t.shape) if n > 1):
            raise Unsupported("cupy-bitdecode needs 16-byte aligned K, V and K-scale rows")
    # Within a head the kernel steps along the tokens with 32-bit offsets (bytes of the codes, elements
    # of the scales): a head's extent must fit in them.
    extents = [t.shape[2] * t.stride(2) * t.element_size() for t in (k, v)] + [t.shape[2] * t.stride(2) for t in scales]
    if max(extents) >= 2**31:
        raise Unsupported("cupy-bitdecode needs each head's cache within 2 GiB (its offsets are 32-bit)")
    if scales and not (scales[0].shape == scales[1].shape and scales[0].stride() == scales[1].stride()
                       and scales[2].stride() == scales[3].stride()):
        raise Unsupported("cupy-bitdecode needs each scale and minimum laid out alike")

    bf16 = q.dtype == torch.bfloat16
    vspan = v_span(case.d, case.group, bits)
    form = resolve_form(form, stages)
    warps = resolve_warps(warps, form, case.d)
    v_scales = resolve_v_scales(v_scales, case, form)
    dense = dense_rows(k, v, scales[2] if v_scales == "p" else None)
    # the kernel asks L2 for a tile's rows as whole lines: dense caches only
    prefetch, lead = (prefetch, lead) if dense else (0, 0)
    if ring:  # a stage's K rows, V rows (and V's scales and minimums) are each one run of bytes
        if not dense:
            raise Unsupported("ring copies a tile's rows as one run of bytes: a cache whose tokens follow one another")
        # a round's rows of K scales are one copy (ring_fill=lanes copies one row a tile)
        if (ring_fill == "bulk" and one_group_a_tile(case.group, tile, bits) and scales[0].shape[2] > 1
                and scales[0].stride(2) != case.d):
            raise Unsupported("ring copies a round's rows of K scales as one run: rows of d scales one after another")
    pipe = resolve_pipe(pipe, bits, form, dense, ring, ring_fill)
    kernel = _cupy.compiled(str(SOURCE), instance(case, tile, warps, stages, form, v_scales, dense, pipe, k_scales,
                                                            v_codes))
    smem = smem_bytes(case.d, warps, bits, tile, stages, form, ring, v_scales == "p", case.group, ring_fill)
    if smem > 48 * 1024:  # above 48 KiB a block must opt in to its dynamic shared memory
        if smem > _cupy.smem_optin_limit(q):
            raise Unsupported(f"needs {smem // 1024} KiB of shared memory per block")
        kernel.max_dynamic_shared_size_bytes = smem
    props = torch.cuda.get_device_properties(q.device)
    capability = (props.major, props.minor) if (props.major, props.minor) in LIMITS else (9, 0)
    resident = blocks_per_sm(32 * warps, kernel.num_regs, smem + kernel.shared_size_bytes, capability)["blocks_per_sm"]
    plan = _plan(case, tile, warps, splits, props.multi_processor_count, resident, form)
    n_splits, rbs = plan["splits"], plan["row_blocks"]
    group_heads = case.hq // case.hkv

    if n_splits > 1:
        slots = plan["programs"] * n_splits * ROWS
        part_o = torch.empty(slots * case.d, dtype=torch.float32, device=q.device)
        part_m = torch.empty(slots, dtype=torch.float32, device=q.device)
        part_l = torch.empty(slots, dtype=torch.float32, device=q.device)
        parts = _cupy.pointer_args(part_o, part_m, part_l)
    else:
        parts = (np.uint64(0),) * 3  # the kernel writes O itself
    fused = n_splits > 1 and merge == "last"
    # merge=last: a count a program of the blocks whose state is written; the last block resets it to zero
    counts = torch.zeros(plan["programs"], dtype=torch.int32, device=q.device) if fused else None

    def strides(t):
        return tuple(np.int64(s) for s in t.stride()[:3])

    def byte_strides(t):  # the codes (or 16-bit values) are addressed in bytes
        return tuple(np.int64(s * t.element_size()) for s in t.stride()[:3])

    if quantized:
        ks, km, vs, vm = scales
        scale_ptrs = _cupy.pointer_args(ks, km, vs, vm)
        scale_strides = (*strides(ks), *strides(vs))
    else:
        scale_ptrs = (np.uint64(0),) * 4
        scale_strides = (np.int64(0),) * 6
    args = (*_cupy.pointer_args(q, k, v), *scale_ptrs, *_cupy.pointer_args(out), *parts,
            *(_cupy.pointer_args(counts) if fused else (np.uint64(0),)),
            np.int32(case.hkv), np.int32(group_heads), np.int32(case.q), np.int32(case.l),
            np.int32(plan["keys_per_split"]), np.int32(n_splits), np.int32(rbs), np.int32(case.group),
            np.int32(masks == "edge"), *(np.uint32(x) for x in divisor(case.group)),
            *strides(q), *byte_strides(k), *byte_strides(v), *scale_strides, *strides(out),
            np.float32(case.d**-0.5 * LOG2_E), np.int32(prefetch), np.int32(lead),
            np.int32(ring))
    grid, block = plan["grid"], plan["block"]
    if n_splits > 1 and not fused:
        combine = _cupy.compiled(str(SOURCE), combine_name(case.d, bf16))
        combine_args = (*parts, *_cupy.pointer_args(out), np.int32(case.hkv), np.int32(group_heads),
                        np.int32(case.q), np.int32(n_splits), np.int32(rbs), np.int32(plan["block_rows"]),
                        *strides(out))
        combine_grid = (plan["programs"], min(plan["block_rows"], plan["rows"]), case.d // COMBINE_CHANNELS)
        combine_block = (COMBINE_CHANNELS * COMBINE_WARPS,)

        def body():
            kernel(grid, block, args, shared_mem=smem)
            combine(combine_grid, combine_block, combine_args)
    else:
        def body():
            kernel(grid, block, args, shared_mem=smem)

    run = _cupy.on_torch_stream(body)
    # The kernels get raw pointers: the closure must keep the workspace alive (freed, its memory
    # would go to the next tensors allocated, which the kernel would then overwrite).
    run.workspace = (part_o, part_m, part_l, counts) if n_splits > 1 else ()
    run.config = {"splits": n_splits, "keys_per_split": plan["keys_per_split"], "tile": tile, "warps": warps,
                  "stages": stages, "masks": masks, "form": form, "v_scales": v_scales, "k_scales": k_scales,
                  "v_codes": v_codes,
                  "prefetch": prefetch, "lead": lead, "ring": ring, "ring_fill": ring_fill if ring else "none",
                  "pipe": pipe, "merge": merge if n_splits > 1 else "none (one piece)", "dense_rows": dense, "one_group_a_tile": one_group_a_tile(case.group, tile, bits),
                  "row_blocks": rbs, "resident_blocks_per_sm": resident, "v_span": vspan,
                  **_cupy.kernel_config(kernel, grid, block, smem)}
    return run
