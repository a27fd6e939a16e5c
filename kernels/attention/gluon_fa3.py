"""FlashAttention forward in Gluon, Triton's tile-level language, for Hopper (sm_90): FlashAttention-3's
schedule written out where tl.dot leaves it to the compiler.

What tl.dot cannot say and Gluon can: Triton 3.6 follows each chain of wgmma it emits for triton-fa2 with
``wgmma.wait_group 0`` (docs/performance.md), so the softmax of a K/V tile never runs under a matrix
product. Here the products are issued by hand (``warpgroup_mma(..., is_async=True)``):

- S = Q Kᵀ of tile j goes to the tensor cores first, O += P V of tile j-1 behind it (P from registers), and
  the softmax of tile j waits only for the first (``warpgroup_mma_wait(1)``): it runs while P V does.
- K and V come by TMA into a ring of ``stages`` buffers each, an mbarrier per buffer counting the bytes.
- Online softmax in fp32 with exp2, the scale folded into the exponent, the division by the row sum once
  at the end; a tile is masked only where it crosses N or, causal, the diagonal.

Two forms (``--param ws``):

- ``ws=1``, warp-specialized (``gl.warp_specialize``): one loader warp issues every TMA copy (24 registers,
  setmaxnreg) and two consumer warpgroups of 64 query rows each (240 registers) tell it through an
  mbarrier when their products have read a buffer. With ``pingpong=1`` the consumers take turns at the
  tensor cores: each issues its two products, then hands the turn to the other (an mbarrier each way), so
  one's softmax runs while the other's products do, as FlashAttention-3's two warpgroups do.
- ``ws=0``: one partition of two warpgroups (128 rows) that issues its own TMA copies; its warps meet at a
  CTA barrier once a tile, before the buffers they read are loaded again.

One program per 128 query rows of one (batch, head). Q, K and V are read through 2-D TMA descriptors of
the [B·H·N, d] tensors: the last tile of a head reads the next head's rows (zeros past the last), whose
keys are masked and whose queries are never stored. Causal: the programs with the most K/V tiles start
first. O is stored from the registers the products left it in, rows past N masked.

Gluon kernels do not run under Triton's interpreter, and wgmma exists only on sm_90: elsewhere a SKIP.

    kbench run attention --n 4096 --d 128 --impl gluon-fa3,triton-fa2,sdpa-cudnn --baseline sdpa-cudnn
    kbench run attention --impl gluon-fa3 --param ws=0,1 --param pingpong=0,1 --param stages=2,3
    kbench explain attention --impl gluon-fa3
"""

from pathlib import Path

from kbench.loader import load_helper
from kbench.registry import Unsupported, implementation

# Gluon as this file writes it: Triton 3.6 and later. Without it this file still registers, and the impl SKIPs.
try:
    import triton
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
except ImportError:  # pragma: no cover - exercised only where Gluon is absent
    gl = None

utils = load_helper(Path(__file__).parent.parent / "_triton_utils.py")

LOG2_E = 1.4426950408889634
HEAD_DIMS = (64, 128)
BLOCK_M = 128  # query rows a program: two warpgroups of 64
BLOCK_NS = (64, 128)  # keys a K/V tile (the n of S = Q Kᵀ)
CONSUMER_ROWS = 64  # a warpgroup's rows: wgmma's m
# ws=1: registers a thread of a consumer warpgroup and of the loader (setmaxnreg), and the launch's cap that
# the two are drawn from: 12 warps (two consumer warpgroups and the loader's, rounded up to a warpgroup) of
# 168 use the SM's 64 K registers; 4 x 240 + 4 x 240 + 4 x 24 = 12 x 168.
WS_REGISTERS = (240, 24)
WS_MAXNREG = 168
H200_SMEM = 232_448  # bytes of shared memory a block may opt in to on sm_90
MAX_ELEMENTS = 2**31 - 1  # B x H x N x d: the kernels' offsets and row coordinates are 32-bit ints
MAX_HEADS = 65_535  # B x H: the grid's second dimension

if gl is not None:
    # Triton 3.7 renamed the TMA load and the CTA barrier: 3.6 (the GPU image's) has only the old names,
    # 3.9 only the new.
    _tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
    _cta_barrier = getattr(gl, "barrier", None) or gl.thread_barrier
    # The module's sizes as the kernels see them (a @gluon.jit function reads only constexpr globals).
    _BLOCK_M = gl.constexpr(BLOCK_M)
    _ROWS = gl.constexpr(CONSUMER_ROWS)
    _CONSUMER_REGISTERS = gl.constexpr(WS_REGISTERS[0])
    _LOADER_REGISTERS = gl.constexpr(WS_REGISTERS[1])

    @gluon.constexpr_function
    def _mma_layout(warps, n):
        """The register layout of a wgmma accumulator m64 x n a warpgroup (k16: 16-bit inputs)."""
        return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[warps, 1], instr_shape=[16, n, 16])

    @gluon.jit
    def _softmax(s, m_i, l_i, rows, cols, n_ctx, qk_scale_log2, p_layout: gl.constexpr,
                 alpha_layout: gl.constexpr, DTYPE: gl.constexpr, MASK: gl.constexpr, CAUSAL: gl.constexpr):
        """One K/V tile's scores into the running row max m and row sum l. Returns P (16-bit, in the layout
        of the A operand of O += P V: no data moves), m, l and alpha = exp2(m_old - m_new), by which O is
        rescaled. The scale is folded into the exponent (exp(x·s) = exp2(x·s·log2 e)); MASK: keys past N
        and, causal, after the query are -inf."""
        if MASK:
            keep = gl.expand_dims(cols, 0) < n_ctx
            if CAUSAL:
                keep = keep & (gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1))
            s = gl.where(keep, s, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale_log2)  # the scale is positive: max first
        p = gl.exp2(s * qk_scale_log2 - gl.expand_dims(m_new, 1))
        alpha = gl.exp2(m_i - m_new)
        l_i = l_i * alpha + gl.sum(p, 1)
        return gl.convert_layout(p.to(DTYPE), p_layout), m_new, l_i, gl.convert_layout(alpha, alpha_layout)

    @gluon.jit
    def _softmax_tile(s, m_i, l_i, rows, start_n, offs_n, mask_from, n_ctx, qk_scale_log2, p_layout: gl.constexpr,
                      alpha_layout: gl.constexpr, DTYPE: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
        """_softmax of the tile of keys from start_n, masked only if it reaches past mask_from."""
        if start_n + BLOCK_N > mask_from:
            p, m_i, l_i, alpha = _softmax(s, m_i, l_i, rows, start_n + offs_n, n_ctx, qk_scale_log2, p_layout,
                                          alpha_layout, DTYPE, True, CAUSAL)
        else:
            p, m_i, l_i, alpha = _softmax(s, m_i, l_i, rows, start_n + offs_n, n_ctx, qk_scale_log2, p_layout,
                                          alpha_layout, DTYPE, False, CAUSAL)
        return p, m_i, l_i, alpha

    @gluon.jit
    def _load(desc, row, bar, dst, pred):
        """A TMA copy of the tile at ``row`` into ``dst``, counted on ``bar`` (skipped if not pred)."""
        mbarrier.expect(bar, desc.block_type.nbytes, pred=pred)
        _tma_load(desc, [row, 0], bar, dst, pred=pred)

    @gluon.jit
    def _finish(acc, p, alpha, l_i, v_bars, v_smem, n_tiles, O, stride_ob, stride_oh, stride_on, heads, bh, first, n_ctx,
                o_layout: gl.constexpr, alpha_layout: gl.constexpr, DTYPE: gl.constexpr, ROWS: gl.constexpr,
                HEAD_DIM: gl.constexpr, STAGES: gl.constexpr):
        """The last K/V tile's O += P V (its scores' softmax done), then O stored."""
        last = n_tiles - 1
        acc = acc * gl.expand_dims(alpha, 1)
        mbarrier.wait(v_bars.index(last % STAGES), (last // STAGES) & 1)
        acc_tok = warpgroup_mma(p, v_smem.index(last % STAGES), acc, is_async=True)
        acc, p = warpgroup_mma_wait(0, deps=(acc_tok, p))
        _store(acc, l_i, O, stride_ob, stride_oh, stride_on, heads, bh, first, n_ctx, o_layout, alpha_layout, DTYPE,
               ROWS, HEAD_DIM)

    @gluon.jit
    def _store(acc, l_i, O, stride_ob, stride_oh, stride_on, heads, bh, first, n_ctx, o_layout: gl.constexpr,
               alpha_layout: gl.constexpr, DTYPE: gl.constexpr, ROWS: gl.constexpr, HEAD_DIM: gl.constexpr):
        """O = acc / l, stored from the products' register layout (no shared memory), rows past N skipped."""
        out = (acc / gl.expand_dims(gl.convert_layout(l_i, alpha_layout), 1)).to(DTYPE)
        rows = first + gl.arange(0, ROWS, layout=gl.SliceLayout(1, o_layout))
        cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
        base = O + (bh // heads) * stride_ob + (bh % heads) * stride_oh
        gl.store(base + gl.expand_dims(rows, 1) * stride_on + gl.expand_dims(cols, 0), out,
                 mask=gl.expand_dims(rows, 1) < n_ctx)

    @gluon.jit
    def _tiles(q0, n_ctx, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
        """K/V tiles of the Q tile from q0, and the key from which a tile needs a mask."""
        if CAUSAL:
            return gl.cdiv(gl.minimum(n_ctx, q0 + _BLOCK_M), BLOCK_N), q0 + 1
        else:
            return gl.cdiv(n_ctx, BLOCK_N), n_ctx

    @gluon.jit
    def _q_tile_index(CAUSAL: gl.constexpr):
        if CAUSAL:  # the longest rows of keys first: the last programs are the shortest
            return gl.num_programs(0) - 1 - gl.program_id(0)
        else:
            return gl.program_id(0)

    @gluon.jit
    def _fa3_one_partition(q_desc, k_desc, v_desc, O, stride_ob, stride_oh, stride_on, heads, n_ctx, qk_scale_log2,
                           HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                           CAUSAL: gl.constexpr, num_warps: gl.constexpr):
        """ws=0: 8 warps (two warpgroups, 128 rows) that load, multiply and take the softmax."""
        DTYPE: gl.constexpr = q_desc.dtype
        s_layout: gl.constexpr = _mma_layout(num_warps, BLOCK_N)
        o_layout: gl.constexpr = _mma_layout(num_warps, HEAD_DIM)
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
        alpha_layout: gl.constexpr = gl.SliceLayout(1, o_layout)

        bh = gl.program_id(1)
        q0 = _q_tile_index(CAUSAL) * _BLOCK_M
        row0 = bh * n_ctx  # this head's first row in the [B·H·N, d] views
        n_tiles, mask_from = _tiles(q0, n_ctx, BLOCK_N, CAUSAL)

        q_smem = gl.allocate_shared_memory(DTYPE, [_BLOCK_M, HEAD_DIM], q_desc.layout)
        k_smem = gl.allocate_shared_memory(DTYPE, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
        v_smem = gl.allocate_shared_memory(DTYPE, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
        q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        k_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        mbarrier.init(q_bar, count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(k_bars.index(i), count=1)
            mbarrier.init(v_bars.index(i), count=1)
        fence_async_shared()  # the barriers' initialisation, seen by the TMA unit

        # Tile t sits in buffer t % STAGES, the (t // STAGES)-th fill of that buffer: its barrier's phase.
        _load(q_desc, row0 + q0, q_bar, q_smem, True)
        for i in gl.static_range(STAGES):
            _load(k_desc, row0 + i * BLOCK_N, k_bars.index(i), k_smem.index(i), i < n_tiles)
            _load(v_desc, row0 + i * BLOCK_N, v_bars.index(i), v_smem.index(i), i < n_tiles)

        rows = q0 + gl.arange(0, _BLOCK_M, layout=row_layout)
        offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        m_i = gl.full([_BLOCK_M], float("-inf"), gl.float32, layout=row_layout)
        l_i = gl.zeros([_BLOCK_M], gl.float32, layout=row_layout)
        s_zero = gl.zeros([_BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)  # not read: use_acc=False
        acc = gl.zeros([_BLOCK_M, HEAD_DIM], gl.float32, layout=o_layout)

        mbarrier.wait(q_bar, 0)
        mbarrier.wait(k_bars.index(0), 0)
        s_tok = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        s = warpgroup_mma_wait(0, deps=(s_tok, ))
        p, m_i, l_i, alpha = _softmax_tile(s, m_i, l_i, rows, 0, offs_n, mask_from, n_ctx, qk_scale_log2, p_layout,
                                           alpha_layout, DTYPE, BLOCK_N, CAUSAL)
        _cta_barrier()  # both warpgroups have read K 0: its buffer takes K STAGES
        _load(k_desc, row0 + STAGES * BLOCK_N, k_bars.index(0), k_smem.index(0), STAGES < n_tiles)

        for j in range(1, n_tiles):
            slot = j % STAGES
            prev = (j - 1) % STAGES
            mbarrier.wait(k_bars.index(slot), (j // STAGES) & 1)
            s_tok = warpgroup_mma(q_smem, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
            acc = acc * gl.expand_dims(alpha, 1)
            mbarrier.wait(v_bars.index(prev), ((j - 1) // STAGES) & 1)
            acc_tok = warpgroup_mma(p, v_smem.index(prev), acc, is_async=True)
            s = warpgroup_mma_wait(1, deps=(s_tok, ))  # S of tile j is done; P V of tile j-1 may run on
            p_next, m_i, l_i, alpha = _softmax_tile(s, m_i, l_i, rows, j * BLOCK_N, offs_n, mask_from, n_ctx,
                                                    qk_scale_log2, p_layout, alpha_layout, DTYPE, BLOCK_N, CAUSAL)
            acc, p = warpgroup_mma_wait(0, deps=(acc_tok, p))
            p = p_next
            _cta_barrier()  # both warpgroups are done with K j and V j-1: their buffers take the next tiles
            _load(k_desc, row0 + (j + STAGES) * BLOCK_N, k_bars.index(slot), k_smem.index(slot), j + STAGES < n_tiles)
            _load(v_desc, row0 + (j - 1 + STAGES) * BLOCK_N, v_bars.index(prev), v_smem.index(prev),
                  j - 1 + STAGES < n_tiles)

        _finish(acc, p, alpha, l_i, v_bars, v_smem, n_tiles, O, stride_ob, stride_oh, stride_on, heads, bh, q0, n_ctx,
                o_layout, alpha_layout, DTYPE, _BLOCK_M, HEAD_DIM, STAGES)

    @gluon.jit
    def _consumer(q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty, turns, O, stride_ob,
                  stride_oh, stride_on, heads, n_ctx, qk_scale_log2, bh, q0, n_tiles, mask_from, q_desc, k_desc,
                  v_desc, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                  PINGPONG: gl.constexpr, WHICH: gl.constexpr):
        """ws=1: consumer warpgroup WHICH (0 or 1), query rows q0 + 64·WHICH onwards."""
        DTYPE: gl.constexpr = q_desc.dtype
        s_layout: gl.constexpr = _mma_layout(4, BLOCK_N)
        o_layout: gl.constexpr = _mma_layout(4, HEAD_DIM)
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
        alpha_layout: gl.constexpr = gl.SliceLayout(1, o_layout)
        OTHER: gl.constexpr = 1 - WHICH

        q_tile = q_smem.index(WHICH)
        first = q0 + WHICH * _ROWS
        rows = first + gl.arange(0, _ROWS, layout=row_layout)
        offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        m_i = gl.full([_ROWS], float("-inf"), gl.float32, layout=row_layout)
        l_i = gl.zeros([_ROWS], gl.float32, layout=row_layout)
        s_zero = gl.zeros([_ROWS, BLOCK_N], gl.float32, layout=s_layout)  # not read: use_acc=False
        acc = gl.zeros([_ROWS, HEAD_DIM], gl.float32, layout=o_layout)

        # Turns: consumer w's k-th turn is the k-th completion of turns[w], each made by the other's arrive
        # after it has issued its products (consumer 0's first by consumer 1 at the start). Both take one
        # turn a K/V tile and the same tiles, so neither waits for a turn that never comes.
        if PINGPONG:
            if WHICH == 1:
                mbarrier.arrive(turns.index(0), count=1)
        mbarrier.wait(q_bars.index(WHICH), 0)
        mbarrier.wait(k_ready.index(0), 0)
        if PINGPONG:
            mbarrier.wait(turns.index(WHICH), 0)
        s_tok = warpgroup_mma(q_tile, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        if PINGPONG:
            mbarrier.arrive(turns.index(OTHER), count=1)
        s = warpgroup_mma_wait(0, deps=(s_tok, ))
        mbarrier.arrive(k_empty.index(0), count=1)
        p, m_i, l_i, alpha = _softmax_tile(s, m_i, l_i, rows, 0, offs_n, mask_from, n_ctx, qk_scale_log2, p_layout,
                                           alpha_layout, DTYPE, BLOCK_N, CAUSAL)

        for j in range(1, n_tiles):
            slot = j % STAGES
            prev = (j - 1) % STAGES
            acc = acc * gl.expand_dims(alpha, 1)  # before the turn: the turn is held only to issue
            mbarrier.wait(k_ready.index(slot), (j // STAGES) & 1)
            mbarrier.wait(v_ready.index(prev), ((j - 1) // STAGES) & 1)
            if PINGPONG:
                mbarrier.wait(turns.index(WHICH), j & 1)
            s_tok = warpgroup_mma(q_tile, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
            acc_tok = warpgroup_mma(p, v_smem.index(prev), acc, is_async=True)
            if PINGPONG:
                mbarrier.arrive(turns.index(OTHER), count=1)
            s = warpgroup_mma_wait(1, deps=(s_tok, ))  # S of tile j is done; P V of tile j-1 may run on
            mbarrier.arrive(k_empty.index(slot), count=1)
            p_next, m_i, l_i, alpha = _softmax_tile(s, m_i, l_i, rows, j * BLOCK_N, offs_n, mask_from, n_ctx,
                                                    qk_scale_log2, p_layout, alpha_layout, DTYPE, BLOCK_N, CAUSAL)
            acc, p = warpgroup_mma_wait(0, deps=(acc_tok, p))
            mbarrier.arrive(v_empty.index(prev), count=1)
            p = p_next

        _finish(acc, p, alpha, l_i, v_ready, v_smem, n_tiles, O, stride_ob, stride_oh, stride_on, heads, bh, first,
                n_ctx, o_layout, alpha_layout, DTYPE, _ROWS, HEAD_DIM, STAGES)

    @gluon.jit
    def _loader(q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty, turns, O, stride_ob,
                stride_oh, stride_on, heads, n_ctx, qk_scale_log2, bh, q0, n_tiles, mask_from, q_desc, k_desc,
                v_desc, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                PINGPONG: gl.constexpr, WHICH: gl.constexpr):
        """ws=1: the loader warp. A buffer is filled again once both consumers have arrived on its empty
        barrier (initialised to count 2); the first pass waits on the phase before the first, which an
        mbarrier reports complete."""
        row0 = bh * n_ctx
        _load(q_desc, row0 + q0, q_bars.index(0), q_smem.index(0), True)
        _load(q_desc, row0 + q0 + _ROWS, q_bars.index(1), q_smem.index(1), True)
        for j in range(n_tiles):
            slot = j % STAGES
            phase = (j // STAGES) & 1
            mbarrier.wait(k_empty.index(slot), phase ^ 1)
            _load(k_desc, row0 + j * BLOCK_N, k_ready.index(slot), k_smem.index(slot), True)
            mbarrier.wait(v_empty.index(slot), phase ^ 1)
            _load(v_desc, row0 + j * BLOCK_N, v_ready.index(slot), v_smem.index(slot), True)

    @gluon.jit
    def _fa3_warp_specialized(q_desc, k_desc, v_desc, O, stride_ob, stride_oh, stride_on, heads, n_ctx,
                              qk_scale_log2, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                              CAUSAL: gl.constexpr, PINGPONG: gl.constexpr):
        """ws=1: shared memory and barriers, then the two consumers and the loader."""
        DTYPE: gl.constexpr = q_desc.dtype
        bh = gl.program_id(1)
        q0 = _q_tile_index(CAUSAL) * _BLOCK_M
        n_tiles, mask_from = _tiles(q0, n_ctx, BLOCK_N, CAUSAL)

        q_smem = gl.allocate_shared_memory(DTYPE, [2, _ROWS, HEAD_DIM], q_desc.layout)
        k_smem = gl.allocate_shared_memory(DTYPE, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
        v_smem = gl.allocate_shared_memory(DTYPE, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
        q_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        turns = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(2):
            mbarrier.init(q_bars.index(i), count=1)
            mbarrier.init(turns.index(i), count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(k_ready.index(i), count=1)
            mbarrier.init(v_ready.index(i), count=1)
            mbarrier.init(k_empty.index(i), count=2)  # one arrive from each consumer
            mbarrier.init(v_empty.index(i), count=2)
        fence_async_shared()  # the barriers' initialisation, seen by the TMA unit

        # Every partition takes the same arguments (Gluon passes a worker only what it can flatten: shared
        # memory, descriptors, scalars); consumer 0 runs in the kernel's own 4 warps.
        gl.warp_specialize([
            (_consumer, (q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty, turns, O, stride_ob,
                         stride_oh, stride_on, heads, n_ctx, qk_scale_log2, bh, q0, n_tiles, mask_from, q_desc,
                         k_desc, v_desc, HEAD_DIM, BLOCK_N, STAGES, CAUSAL, PINGPONG, 0)),
            (_consumer, (q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty, turns, O, stride_ob,
                         stride_oh, stride_on, heads, n_ctx, qk_scale_log2, bh, q0, n_tiles, mask_from, q_desc,
                         k_desc, v_desc, HEAD_DIM, BLOCK_N, STAGES, CAUSAL, PINGPONG, 1)),
            (_loader, (q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty, turns, O, stride_ob,
                       stride_oh, stride_on, heads, n_ctx, qk_scale_log2, bh, q0, n_tiles, mask_from, q_desc,
                       k_desc, v_desc, HEAD_DIM, BLOCK_N, STAGES, CAUSAL, PINGPONG, 0)),
        ], [4, 1], [_CONSUMER_REGISTERS, _LOADER_REGISTERS])


def smem_bytes(d: int, block_n: int, stages: int) -> int:
    """The Q tile and the K and V rings (the barriers are a few dozen bytes more)."""
    return (BLOCK_M + 2 * stages * block_n) * d * 2


def check_config(d: int, block_n: int, stages: int) -> str | None:
    if block_n not in BLOCK_NS:
        return f"block_n={block_n}: {' or '.join(map(str, BLOCK_NS))}"
    if stages < 2:
        return f"stages={stages}: at least 2 (a buffer is refilled while the other is read)"
    if smem_bytes(d, block_n, stages) > H200_SMEM - 1024:
        return (f"stages={stages} with block_n={block_n} at d={d} needs {smem_bytes(d, block_n, stages) / 1024:.0f} "
                f"KiB of shared memory; sm_90 has {H200_SMEM / 1024:.0f} KiB a block")
    return None


def kernel_and_options(ws: bool, pingpong: bool, case, block_n: int, stages: int):
    """The Gluon kernel of a form, its constexprs and its launch options."""
    constexprs = {"HEAD_DIM": case.d, "BLOCK_N": block_n, "STAGES": stages, "CAUSAL": bool(case.causal)}
    if ws:
        return (_fa3_warp_specialized, {**constexprs, "PINGPONG": bool(pingpong)},
                {"num_warps": 4, "maxnreg": WS_MAXNREG})
    return _fa3_one_partition, constexprs, {"num_warps": 8}


def q_rows_a_load(ws: bool) -> int:
    """Rows of Q a TMA copy brings: a consumer's 64 (ws=1) or the program's 128."""
    return CONSUMER_ROWS if ws else BLOCK_M


def nvmma_layout(rows: int, d: int, dtype: str):
    """The shared-memory layout wgmma reads a [rows, d] tile in (the widest swizzle the rows allow)."""
    return gl.NVMMASharedLayout.get_default_for([rows, d], gl.bfloat16 if dtype == "bf16" else gl.float16)


def sm90_build(case, block_n: int, stages: int, ws: bool, pingpong: bool):
    """(kernel, arguments, constexprs, options) of one form for this case as kbench.kernel_resources.from_triton
    compiles it without a GPU: the arguments of contiguous [B, H, N, d] tensors, each descriptor as its type."""
    kernel, constexprs, options = kernel_and_options(ws, pingpong, case, block_n, stages)
    if "num_warps" in kernel.arg_names:  # a launch fills it in from its option
        constexprs = {**constexprs, "num_warps": options["num_warps"]}
    rows = {"q_desc": q_rows_a_load(ws), "k_desc": block_n, "v_desc": block_n}
    args = {name: f"tensordesc<{case.dtype}[{r}, {case.d}],{nvmma_layout(r, case.d, case.dtype)!r}>"
            for name, r in rows.items()}
    args.update(O=f"*{case.dtype}", stride_ob=case.heads * case.n * case.d, stride_oh=case.n * case.d,
                stride_on=case.d, heads=case.heads, n_ctx=case.n, qk_scale_log2=case.d**-0.5 * LOG2_E)
    return kernel, args, constexprs, options


def compiled_resources(case, block_n: int, stages: int, ws: bool, pingpong: bool) -> dict | None:
    """ptxas's registers and spills, Triton's shared memory and the SASS of one form for this case on
    sm_90, compiled here without a GPU (in a process of its own: kbench.kernel_resources); None without Gluon."""
    from kbench.kernel_resources import from_triton

    if gl is None:
        return None
    return from_triton(*sm90_build(case, block_n, stages, ws, pingpong))


def explain(case, params) -> dict:
    """`kbench explain attention --impl gluon-fa3`: the partitions and their registers, the wgmma of a K/V
    tile, the TMA tiles and the shared memory, and what ptxas made of it for sm_90 (compiled here, no GPU)."""
    from kbench.kernel_resources import launch_figures
    from kbench.sass import main_loop

    block_n, stages = params["block_n"], params["stages"]
    ws, pingpong = bool(params["ws"]), bool(params["pingpong"])
    reason = _supports(case) or check_config(case.d, block_n, stages)
    if reason:
        return {"configuration": f"not runnable: {reason}"}
    q_tiles = -(-case.n // BLOCK_M)
    programs = q_tiles * case.batch * case.heads
    ty = "bf16" if case.dtype == "bf16" else "f16"
    kv_tile = block_n * case.d * 2
    figures = {
        "grid": f"{q_tiles} Q tiles of {BLOCK_M} rows x {case.batch * case.heads} (batch x heads) = {programs:,} "
                "programs" + (", the longest (last) Q tiles first" if case.causal else ""),
        "partitions": (f"1 loader warp (every TMA copy; setmaxnreg {WS_REGISTERS[1]}) + 2 consumer warpgroups of "
                       f"{CONSUMER_ROWS} rows (wgmma and softmax; setmaxnreg {WS_REGISTERS[0]}), launched with "
                       f"maxnreg {WS_MAXNREG} for 12 warps" if ws else
                       f"one of 8 warps: two warpgroups of {CONSUMER_ROWS} rows that issue their own TMA copies "
                       "and meet at a CTA barrier once a tile"),
        "wgmma per K/V tile and warpgroup": f"S = Q Kᵀ: {case.d // 16} x m64n{block_n}k16.f32.{ty} (Q and K from "
                                            f"shared memory); O += P V: {block_n // 16} x m64n{case.d}k16.f32.{ty} "
                                            "(P from registers)",
        "schedule": "S of tile j issued, then O += P V of tile j-1; the softmax of tile j under the second"
                    + ("; the consumers take turns issuing (ping-pong)" if ws and pingpong else ""),
        "K/V tiles per program": f"{-(-case.n // block_n)} of {block_n} keys"
                                 + (" (causal: up to the diagonal of the program's last row)" if case.causal else ""),
        "TMA tiles": f"Q {q_rows_a_load(ws)} x {case.d}" + (" twice" if ws else "") + f"; K and V {block_n} x "
                     f"{case.d} each a tile ({kv_tile // 1024} KiB), rows past the tensor zero-filled",
        "pipeline": f"{stages} buffers each of K and V ({2 * stages * kv_tile // 1024} KiB) + Q "
                    f"({BLOCK_M * case.d * 2 // 1024} KiB) = {smem_bytes(case.d, block_n, stages):,} bytes, "
                    + ("ready and empty mbarriers a buffer" if ws else "an mbarrier a buffer"),
    }
    try:
        res = compiled_resources(case, block_n, stages, ws, pingpong)
    except RuntimeError as exc:
        return {**figures, "registers per thread": f"could not compile: {exc}"}
    if res is None:
        return {**figures, "registers per thread": "unknown here: this Triton has no Gluon"}
    res["main_loop"] = main_loop(res["cubin"]) if res.get("cubin") else None
    threads = (12 if ws else 8) * 32
    figures.update(launch_figures(res, programs, threads, res["dynamic_smem_bytes"]))
    if ws:
        figures["registers per thread"] += f" at launch; setmaxnreg moves them to {WS_REGISTERS[0]} a consumer thread"
    return figures


def _supports(case):
    if case.d not in HEAD_DIMS:
        return f"head dim {case.d} (gluon-fa3 is built for d = 64 and 128)"
    if case.batch * case.heads * case.n * case.d > MAX_ELEMENTS:
        return f"{case.batch * case.heads * case.n * case.d:,} elements a tensor: more than 32-bit offsets reach"
    if case.batch * case.heads > MAX_HEADS:
        return f"batch x heads = {case.batch * case.heads:,}: more than the grid's {MAX_HEADS:,} (its second dimension)"
    return None


@implementation(
    "attention", "gluon-fa3", backend="triton", cuda=True, modules=("torch", "triton"), min_cc=(9, 0),
    dtypes=("fp16", "bf16"), supports=_supports, explain=explain,
    params={"block_n": 128, "stages": 2, "ws": 1, "pingpong": 1},
    allowed={"block_n": BLOCK_NS, "stages": lambda s: None if s >= 2 else "is fewer than 2 stages",
             "ws": (0, 1), "pingpong": (0, 1)},
    description="FlashAttention-3's schedule in Gluon (sm_90): TMA ring, async wgmma with the softmax under the "
                "previous P V, a loader warp and two consumer warpgroups taking turns",
)
def gluon_fa3(case, inputs, out, block_n, stages, ws, pingpong):
    if gl is None:
        raise Unsupported("needs Triton's Gluon language (triton.experimental.gluon, Triton 3.6 or later)")
    import torch

    q = inputs["q"]
    if q.device.type != "cuda":
        raise Unsupported("Gluon kernels run on a GPU only (Triton's interpreter does not run them)")
    capability = tuple(torch.cuda.get_device_capability(q.device))
    if capability != (9, 0):
        raise Unsupported(f"wgmma exists only on sm_90 (Hopper); this GPU is sm_{capability[0]}{capability[1]}")
    utils.global_memory_from_torch(q.device)  # none needed, but ConSan's state (TRITON_INSTRUMENTATION_MODE)
    return closure(case, inputs, out, block_n, stages, ws, pingpong)


def closure(case, inputs, out, block_n, stages, ws, pingpong):
    """The timed closure on tensors of any device (the GPU checks are gluon_fa3's): the refusals that depend on
    the case and the tensors, the TMA descriptors, the first launch (the compile, in set-up) and its figures."""
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    reason = check_config(case.d, block_n, stages)
    if reason:
        raise Unsupported(reason)
    if pingpong and not ws:
        raise Unsupported("pingpong=1 takes turns between the consumer partitions of ws=1")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not t.is_contiguous():
            raise Unsupported(f"gluon-fa3 reads {name} through a TMA descriptor of a contiguous B x H x N x d tensor")
        if t.data_ptr() % 16:
            raise Unsupported(f"TMA needs {name} 16-byte aligned")
    if out.stride(-1) != 1:
        raise Unsupported("gluon-fa3 stores O along a contiguous last dimension")
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    def descriptor(t, rows):
        flat = t.view(-1, case.d)  # [B·H·N, d]: a head's last tile reads on into the next head (masked)
        return TensorDescriptor(flat, list(flat.shape), list(flat.stride()), [rows, case.d],
                                nvmma_layout(rows, case.d, case.dtype))

    descs = (descriptor(q, q_rows_a_load(ws)), descriptor(k, block_n), descriptor(v, block_n))
    kernel, constexprs, options = kernel_and_options(ws, pingpong, case, block_n, stages)
    grid = (-(-case.n // BLOCK_M), case.batch * case.heads)
    args = (*descs, out, out.stride(0), out.stride(1), out.stride(2), case.heads, case.n, case.d**-0.5 * LOG2_E)

    def launch():
        return kernel[grid](*args, **constexprs, **options)

    try:
        compiled = launch()  # compiles now (set-up, outside every timing), and shows what ptxas made of it
    except utils.OUT_OF_RESOURCES as exc:
        raise Unsupported(f"does not fit this GPU: {exc}") from None

    def run():  # returns nothing: the answer is in `out` (a returned value would be taken for it)
        launch()

    run.config = {"block_m": BLOCK_M, "block_n": block_n, "stages": stages, "ws": bool(ws),
                  "pingpong": bool(ws and pingpong), "triton": triton.__version__,
                  "registers": getattr(compiled, "n_regs", None), "spills": getattr(compiled, "n_spills", None),
                  "shared_bytes": compiled.metadata.shared}
    return run
