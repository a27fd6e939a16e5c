"""Matrix product in Triton, done properly: autotuned tiles, grouped launch order, masks for any shape.

On a GPU the block sizes are autotuned per (M, N, K, dtype, row alignment) among the configs
below (the tuning runs in kbench's untimed warm-up, and the chosen config is
recorded). Programs are launched in groups of GROUP_M tile-rows so that
consecutive programs reuse the same B columns and A rows from L2. On the CPU
(Triton's interpreter, for CI) one fixed config runs instead.

``--param persistent=1`` is the Hopper form of Triton's persistent matmul tutorial: one
program per SM walks the output tiles (the same grouped order, a stride of the grid apart), and
A, B and C go through tensor descriptors built in the kernel (TMA on sm_90: whole tiles copied
by the copy engine, reads past an edge filled with zeros, writes past it dropped), so the loop
has no masks. TMA needs 16-byte row strides: fp16 and bf16 with K and N multiples of 8.
"""

from pathlib import Path

from kbench.loader import load_helper
from kbench.registry import Unsupported, implementation

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - only where triton is absent
    triton = None

utils = load_helper(Path(__file__).parent.parent / "_triton_utils.py")


def _config(bm, bn, bk, stages, warps, group=8):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group},
                         num_stages=stages, num_warps=warps)


if triton is not None:
    _dot = utils.dot

    @triton.jit
    def _grouped_tile(tile, tiles_m, tiles_n, GROUP_M: tl.constexpr):
        """(row, column) of output tile number ``tile`` in the grouped order: GROUP_M tile-rows are
        walked column by column, so the programs running together share B's columns and A's rows in L2."""
        per_group = GROUP_M * tiles_n
        first_m = (tile // per_group) * GROUP_M
        group_rows = min(tiles_m - first_m, GROUP_M)
        return first_m + (tile % per_group) % group_rows, (tile % per_group) // group_rows

    @triton.jit
    def _matmul(
        A, B, C, M, n_units, k_units,
        am_units, stride_ak, bk_units, stride_bn, cm_units, stride_cn,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
        PRECISION: tl.constexpr, EVEN_K: tl.constexpr, ALIGN: tl.constexpr,
    ):
        # N, K and the row strides come in units of ALIGN elements (16 bytes where the wrapper found
        # every row so aligned, else 1): multiplied back here, Triton knows they are multiples of
        # ALIGN, which it infers of an argument only when it is divisible by 16. Without that, every
        # load and store of a shape like 5000 x 3000 x 7000 is one element wide.
        N = n_units * ALIGN
        K = k_units * ALIGN
        stride_am = am_units * ALIGN
        stride_bk = bk_units * ALIGN
        stride_cm = cm_units * ALIGN
        pid_m, pid_n = _grouped_tile(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)

        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        # Rows and columns past the edge are read wrapped (valid addresses, never
        # stored), which keeps the M and N masks out of the inner loop.
        rows = offs_m % M
        cols = offs_n % N
        a_ptrs = A + rows[:, None] * stride_am + offs_k[None, :] * stride_ak
        b_ptrs = B + offs_k[:, None] * stride_bk + cols[None, :] * stride_bn

        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            if EVEN_K:
                a = tl.load(a_ptrs)
                b = tl.load(b_ptrs)
            else:
                a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k0, other=0.0)
                b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k0, other=0.0)
            acc = _dot(a, b, acc, PRECISION)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk

        c_ptrs = C + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))

    @triton.jit
    def _matmul_persistent(
        A, B, C, M, N, K, stride_am, stride_bk, stride_cm,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
        PROGRAMS: tl.constexpr, PRECISION: tl.constexpr,
    ):
        # Row-major A (M x K), B (K x N) and C (M x N), their last dimension contiguous (the wrapper checks).
        a_desc = tl.make_tensor_descriptor(A, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
        b_desc = tl.make_tensor_descriptor(B, shape=[K, N], strides=[stride_bk, 1], block_shape=[BLOCK_K, BLOCK_N])
        c_desc = tl.make_tensor_descriptor(C, shape=[M, N], strides=[stride_cm, 1], block_shape=[BLOCK_M, BLOCK_N])
        tiles_m = tl.cdiv(M, BLOCK_M)
        tiles_n = tl.cdiv(N, BLOCK_N)
        k_tiles = tl.cdiv(K, BLOCK_K)
        # The epilogue finds its tile from a counter of its own, as the tutorial does: the pipeliner
        # issues the next tile's loads under this one's store (flatten), and a coordinate shared by
        # both ends of the loop body would tie them together.
        tile_c = tl.program_id(0) - PROGRAMS
        for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, PROGRAMS, flatten=True):
            pid_m, pid_n = _grouped_tile(tile, tiles_m, tiles_n, GROUP_M)
            acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            for ki in range(k_tiles):
                a = a_desc.load([pid_m * BLOCK_M, ki * BLOCK_K])
                b = b_desc.load([ki * BLOCK_K, pid_n * BLOCK_N])
                acc = _dot(a, b, acc, PRECISION)
            tile_c += PROGRAMS
            pid_m, pid_n = _grouped_tile(tile_c, tiles_m, tiles_n, GROUP_M)
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(C.dtype.element_ty))

    # Hopper-sized tiles first (wgmma wants 64-row multiples per warpgroup), then
    # the classic Ampere ones and small tiles for small or skinny problems.
    GPU_CONFIGS = [
        _config(128, 256, 64, 3, 8),
        _config(256, 128, 64, 3, 8),
        _config(128, 256, 64, 4, 8),
        _config(128, 128, 64, 4, 8),
        _config(128, 128, 64, 3, 4),
        _config(128, 128, 32, 4, 4),
        _config(64, 256, 32, 4, 4),
        _config(128, 64, 32, 4, 4),
        _config(64, 128, 32, 4, 4),
        _config(64, 64, 32, 4, 4),
        _config(32, 64, 32, 5, 2),
        _config(16, 32, 32, 4, 2),
    ]
    CPU_CONFIG = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8}

    _autotuned = triton.autotune(configs=GPU_CONFIGS, key=["M", "n_units", "k_units", "PRECISION", "EVEN_K", "ALIGN"])(_matmul)

    # The persistent variant's tiles (the tutorial's Hopper set, wgmma-sized: 128-row tiles, 64- or
    # 128-deep K steps) and one small tile for small or skinny problems; each fits the H200's 227 KiB of
    # shared memory with its stages and C's tile (Triton 3.9 for sm_90: 229,400 bytes at most).
    PERSISTENT_CONFIGS = [
        _config(128, 256, 64, 3, 8),
        _config(128, 128, 64, 5, 8),
        _config(128, 128, 64, 4, 8),
        _config(128, 128, 64, 4, 4),
        _config(128, 128, 128, 3, 8),
        _config(64, 128, 64, 4, 4),
    ]
    CPU_PROGRAMS = 3  # on the interpreter: a few programs, each taking several tiles (uneven shares)
    _persistent_autotuned = triton.autotune(configs=PERSISTENT_CONFIGS, key=["M", "N", "K", "PRECISION"],
                                            **utils.autotune_cache_option())(_matmul_persistent)


def unaligned_rows(tensors) -> str | None:
    """The first of A, B and C (with contiguous rows) whose rows do not all start at a multiple of 16
    bytes, and its row stride; None when every row does."""
    for name, t in zip("ABC", tensors):
        if t.data_ptr() % 16 or (t.stride(0) * t.element_size()) % 16:
            return f"{name}'s row stride is {t.stride(0)} elements"
    return None


def row_alignment(a, b, c) -> int:
    """The elements in 16 bytes when every row of A, B and C is contiguous and starts 16-byte aligned
    and K and N are multiples of them, else 1: what the grouped kernel may assume (ALIGN)."""
    align = 16 // a.element_size()
    if any(t.stride(-1) != 1 for t in (a, b, c)) or unaligned_rows((a, b, c)):
        return 1
    return align if a.shape[1] % align == 0 and b.shape[1] % align == 0 else 1


def tma_reason(case, tensors) -> str | None:
    """Why persistent=1's tensor descriptors cannot read or write these tensors (None: they can)."""
    if case.dtype not in ("fp16", "bf16"):
        return (f"{case.dtype}: persistent=1 is for fp16 and bf16 (its B tiles are N-major, which wgmma reads "
                "for 16-bit types only)")
    if not hasattr(tl, "make_tensor_descriptor"):
        return f"Triton {triton.__version__} has no tl.make_tensor_descriptor"
    for name, t in zip("ABC", tensors):
        if t.stride(-1) != 1:
            return f"{name} must have a contiguous last dimension"
    unaligned = unaligned_rows(tensors)
    return f"TMA needs 16-byte aligned rows: {unaligned} (K and N must be multiples of 8)" if unaligned else None


@implementation("matmul", "triton", backend="triton", modules=("torch", "triton"), params={"persistent": 0},
                allowed={"persistent": (0, 1)},
                description="Triton matmul: autotuned tiles, grouped launch order, masked edges "
                            "(--param persistent=1: one program an SM, TMA descriptors)")
def triton_matmul(case, inputs, out, persistent=0):
    if triton is None:
        raise Unsupported("triton is not installed")
    a, b = inputs["a"], inputs["b"]
    if persistent:
        return _persistent(case, a, b, out)
    precision = utils.dot_precision(case.dtype, tf32=case.tf32)
    m, n, k = case.m, case.n, case.k
    align = row_alignment(a, b, out)
    # N, K and the row strides in units of `align` elements (see _matmul); the unit strides as they are.
    sizes = (n // align, k // align, a.stride(0) // align, a.stride(1), b.stride(0) // align, b.stride(1),
             out.stride(0) // align, out.stride(1))
    base = {"precision": precision, "triton": triton.__version__, "align": align}

    if utils.interpreted():
        grid = (triton.cdiv(m, CPU_CONFIG["BLOCK_M"]) * triton.cdiv(n, CPU_CONFIG["BLOCK_N"]),)
        even_k = k % CPU_CONFIG["BLOCK_K"] == 0

        def run():
            _matmul[grid](a, b, out, m, *sizes, PRECISION=precision, EVEN_K=even_k, ALIGN=align, **CPU_CONFIG)

        run.config = {**CPU_CONFIG, **base}
        return run

    def grid(meta):
        return (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)

    def run():
        # EVEN_K depends on the tuned BLOCK_K: every config uses 32 or 64, so K % 64 decides both.
        _autotuned[grid](a, b, out, m, *sizes, PRECISION=precision, EVEN_K=k % 64 == 0, ALIGN=align)

    return _Tuned(run, _autotuned, base)


class _Tuned:
    """A timed call through an autotuner, whose ``config`` is the tuner's choice once the warm-up has
    tuned it (before: ``base`` alone)."""

    def __init__(self, run, tuner, base: dict):
        self.run, self.tuner, self.base = run, tuner, base

    def __call__(self):
        return self.run()

    @property
    def config(self):
        chosen = getattr(self.tuner, "best_config", None)
        if chosen:
            return {**chosen.kwargs, "num_warps": chosen.num_warps, "num_stages": chosen.num_stages, **self.base}
        return self.base


def _persistent(case, a, b, out):
    """The closure of ``persistent=1`` (see the module docstring)."""
    import torch

    reason = tma_reason(case, (a, b, out))
    if reason:
        raise Unsupported(reason)
    precision = utils.dot_precision(case.dtype)
    m, n, k = case.m, case.n, case.k
    device = a.device
    utils.global_memory_from_torch(device)  # for the descriptors built inside the kernel
    args = (a, b, out, m, n, k, a.stride(0), b.stride(0), out.stride(0))
    base = {"persistent": True, "precision": precision, "triton": triton.__version__}

    if utils.interpreted():  # the grouped kernel's CPU tiles, on a few programs
        tiles = triton.cdiv(m, CPU_CONFIG["BLOCK_M"]) * triton.cdiv(n, CPU_CONFIG["BLOCK_N"])
        grid = (min(CPU_PROGRAMS, tiles),)

        def run():
            _matmul_persistent[grid](*args, PROGRAMS=grid[0], PRECISION=precision, **CPU_CONFIG)

        run.config = {**CPU_CONFIG, **base, "programs": grid[0]}
        return run

    sms = torch.cuda.get_device_properties(device).multi_processor_count

    def grid(meta):
        return (min(sms, triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"])),)

    def run():
        _persistent_autotuned[grid](*args, PROGRAMS=sms, PRECISION=precision)

    return _Tuned(run, _persistent_autotuned, {**base, "programs": sms})
