"""Random inputs whose sums are exact in any order, so a check can demand the exact answer.

- reduction and scan: :func:`step_multiples`, one tensor on one device (its length checked by
  :func:`check_length`).
- allreduce: rank r's input for a seed is a hash of (seed, r, element index) reduced to small
  integers [-A, A], the same on any device, so the float64 reference (and each rank's own check)
  can regenerate every rank's input without moving it (the allreduce suite's rank group).
"""

from __future__ import annotations

import math

INPUT_STEP = 1.0 / 64  # step_multiples' float values are multiples of this, |x| <= 1
INT_RANGE = 1000  # and its integers lie in [-INT_RANGE, INT_RANGE]


MAX_LENGTH = 1 << 31  # reduction's and scan's n stays below it


def check_length(n: int) -> None:
    """The --n of reduction and scan: 0 or more, below 2^31 (UserError otherwise)."""
    from kbench.errors import UserError

    if n < 0:
        raise UserError(f"--n must be 0 or more (got {n})")
    if n >= MAX_LENGTH:
        raise UserError(f"--n must be below 2^31 (got {n})")


# The distributions step_multiples draws (reduction's and scan's correctness trials cover them all).
DISTRIBUTIONS = ("uniform", "runs", "cancellation")
# runs: each run of one sign is RUN_MIN..RUN_MAX elements long (the next run has the other sign).
RUN_MIN, RUN_MAX = 1 << 12, 1 << 13


def run_steps(n: int) -> int:
    """The largest |k| of the runs distribution's float values k / 64 for n elements: 64 where n is small,
    down to 1 at n = 2^31, so that sqrt(n x RUN_MAX) x |k| / 128 (the spread of the runs' sums added in
    another order than the runs', see step_multiples) stays under 2^15, an eighth of 2^18."""
    return max(1, min(64, int(2**22 / math.sqrt(max(n, 1) * RUN_MAX))))
# cancellation: x[2i] up to CANCEL_STEPS steps (31 for floats), then x[2i+1] = -x[2i] plus up to 64
# steps, so pairs of large values cancel to small sums. 1984 + 64 = 2^11: fp16 still holds every k / 64.
CANCEL_STEPS = 1984
CANCEL_INT = 1_000_000


def step_multiples(n: int, dtype: str, device: str, seed: int, distribution: str = "uniform"):
    """n random values whose partial sums are exact in fp32 in the orders kernels sum them: k / 64 for
    random integers k, or integers for an integer dtype. Drawn with ``device``'s generator: 2^28 values
    drawn on the host would take seconds a trial.

    "The orders kernels sum them": contiguous pieces, grid strides, and the pieces' sums added in any
    order (atomics). Not every order: all the positive values first would climb past 2^18, where fp32
    stops holding every multiple of 1/64, for any inputs of this size that are not mostly zeros.

    - ``uniform``: |k| <= 64 (integers in [-INT_RANGE, INT_RANGE]) with random signs: any piece's sum is
      a random walk that stays far below 2^18.
    - ``runs``: signs in runs of RUN_MIN..RUN_MAX elements that alternate, in pairs of equal length:
      partial sums climb for thousands of elements (past 32, where fp16 stops holding every multiple of
      1/64: a narrow accumulator fails) and fall back. Float magnitudes are |k| <= run_steps(n): split
      into pieces summed in another order (a block's share of grid strides, then atomics), a pair's
      runs no longer cancel, and the sum of the runs' sums is a random walk of about
      sqrt(n x run length) x E|k| / 64; with |k| <= 64 it passes 2^18 at n = 2^28 (a correct fp32
      kernel whose blocks end in atomics then rounds a quarter of the time), so |k| shrinks with n.
    - ``cancellation``: x[2i] with |k| <= CANCEL_STEPS (integers up to CANCEL_INT), x[2i+1] = -x[2i]
      plus a uniform value: sums of large terms that cancel, which a narrow accumulator loses.
    """
    import torch

    from kbench.dtypes import is_integer, torch_dtype

    generator = torch.Generator(device=device).manual_seed(seed)
    integer = is_integer(dtype)
    limit = INT_RANGE if integer else run_steps(n) if distribution == "runs" else 64
    values = torch.randint(-limit, limit + 1, (n,), generator=generator, device=device, dtype=torch.int64)
    if distribution == "runs":
        values.abs_()
        # Runs come in pairs of one length, + then -: in order, the pairs' sums are small and their random
        # walk stays far below 2^18 over 2^31 elements (runs of unequal lengths would drift past it).
        lengths = torch.randint(RUN_MIN, RUN_MAX + 1, (n // (2 * RUN_MIN) + 1,), generator=generator, device=device)
        starts = torch.cumsum(lengths.repeat_interleave(2), 0)
        run = torch.searchsorted(starts, torch.arange(n, device=device), right=True)  # each element's run
        values *= 1 - 2 * (run % 2)
    elif distribution == "cancellation":
        big = CANCEL_INT if integer else CANCEL_STEPS
        pairs = n // 2
        large = torch.randint(-big, big + 1, (pairs,), generator=generator, device=device, dtype=torch.int64)
        values[0 : 2 * pairs : 2] = large
        values[1 : 2 * pairs : 2] = values[1 : 2 * pairs : 2] - large
    elif distribution != "uniform":
        raise ValueError(f"unknown input distribution {distribution!r}")
    if integer:
        return values.to(torch_dtype(dtype))
    return (values.to(torch.float32) * INPUT_STEP).to(torch_dtype(dtype))


SIGNIFICAND_BITS = {"fp32": 24, "fp16": 11, "bf16": 8}
MAX_AMPLITUDE = 64
BLOCK = 1 << 24  # elements generated at once (bounds the int64 temporaries: 128 MiB each)
_M32 = 0xFFFFFFFF


def amplitude(dtype: str, world_size: int) -> int:
    """Inputs are integers in [-A, A]: the sum of N of them, and every partial sum, is then at most
    2^p in size (p the significand bits), which the type holds exactly: any order of additions is exact."""
    return max(1, min(MAX_AMPLITUDE, 2 ** SIGNIFICAND_BITS[dtype] // world_size))


def _key(seed: int, rank: int) -> int:
    h = (seed * 0x9E3779B1 + rank * 0x85EBCA77 + 0x165667B1) & _M32
    h ^= h >> 15
    h = (h * 0x2C1B3C6D) & _M32
    h ^= h >> 12
    return h


def _hashed(start: int, stop: int, key: int, device):
    """32-bit hashes of the element indices start..stop-1 under ``key`` (int64 arithmetic, every
    product below 2^63, so the same on any device)."""
    import torch

    i = torch.arange(start, stop, dtype=torch.int64, device=device)
    h = ((i & 0x7FFFFFFF) * 0x5BD1E995) & _M32
    h ^= ((i >> 31) * 0x27D4EB2F) & _M32
    h ^= key
    for _ in range(2):
        h ^= h >> 16
        h = (h * 0x045D9F3B) & _M32
    h ^= h >> 16
    return h


def fill_rank_values(tensor, seed: int, rank: int, world_size: int, dtype: str) -> None:
    """Fill a 1-D tensor with rank ``rank``'s input for ``seed``: integers in [-A, A] (see amplitude), the
    same on any device."""
    count = tensor.numel()
    for start in range(0, count, BLOCK):
        fill_block(tensor[start:min(count, start + BLOCK)], seed, rank, world_size, dtype, start)


def rank_values(count: int, seed: int, rank: int, world_size: int, dtype: str, device="cpu"):
    import torch

    from kbench.dtypes import torch_dtype

    out = torch.empty(count, dtype=torch_dtype(dtype), device=device)
    fill_rank_values(out, seed, rank, world_size, dtype)
    return out


def exact_sum(count: int, seed: int, world_size: int, dtype: str, device="cpu", rank0=None):
    """The float64 sum over every rank's input for ``seed`` (``rank0``: rank 0's actual input, used in place
    of the generated one)."""
    import torch

    from kbench.dtypes import torch_dtype

    total = torch.zeros(count, dtype=torch.float64, device=device)
    if rank0 is not None:
        flat = rank0.reshape(-1)
        for start in range(0, count, BLOCK):
            stop = min(count, start + BLOCK)
            total[start:stop] += flat[start:stop].to(device=device, dtype=torch.float64)
    part = torch.empty(min(count, BLOCK), dtype=torch_dtype(dtype), device=device)
    ranks = range(0 if rank0 is None else 1, world_size)
    for start in range(0, count, BLOCK):
        _add_ranks(total[start:start + BLOCK], part, seed, ranks, world_size, dtype, start)
    return total


def _add_ranks(total, part, seed: int, ranks, world_size: int, dtype: str, start: int) -> None:
    """total += the inputs of ``ranks`` for elements start..start+len(total), in float64 (exact: the
    inputs are small integers); ``part`` is scratch of at least that length in the input dtype."""
    import torch

    block = part[:total.numel()]
    for rank in ranks:
        fill_block(block, seed, rank, world_size, dtype, start)
        total += block.to(torch.float64)


def fill_block(tensor, seed: int, rank: int, world_size: int, dtype: str, start: int) -> None:
    """Elements start..start+len of rank ``rank``'s input for ``seed``, into ``tensor`` (len <= BLOCK)."""
    a = amplitude(dtype, world_size)
    h = _hashed(start, start + tensor.numel(), _key(seed, rank), tensor.device)
    tensor.copy_(h % (2 * a + 1) - a)


def mismatch(out, seed: int, world_size: int, dtype: str) -> str:
    """Why ``out`` is not the exact sum of every rank's input for ``seed``, or "" (checked block by
    block: no full-size float64 copy)."""
    import torch

    count = out.numel()
    wrong, first = 0, None
    part = torch.empty(min(count, BLOCK), dtype=out.dtype, device=out.device)
    for start in range(0, count, BLOCK):
        stop = min(count, start + BLOCK)
        expected = torch.zeros(stop - start, dtype=torch.float64, device=out.device)
        _add_ranks(expected, part, seed, range(world_size), world_size, dtype, start)
        got = out[start:stop].to(torch.float64)
        bad = ~(got == expected)
        n = int(bad.sum())
        if n and first is None:
            at = int(bad.nonzero()[0, 0])
            first = (start + at, float(got[at]), float(expected[at]))
        wrong += n
    if not wrong:
        return ""
    at, got, expected = first
    return (f"{wrong} of {count} elements differ from the exact sum (first at {at}: {got:g}, "
            f"expected {expected:g})")
