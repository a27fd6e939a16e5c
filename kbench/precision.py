"""Matrix products at exactly the precision asked for, for the suites' plain computations.

torch lets cuBLAS round fp32 inputs to TF32 (``allow_tf32``) and reduce fp16/bf16 products in half
precision (``allow_*_reduced_precision_reduction``, on by default). A plain computation that sets the
bound a kernel is judged by must do neither: :func:`strict_matmul` turns them off while it runs.
"""

from __future__ import annotations

import contextlib

TF32_MANTISSA_BITS = 10


@contextlib.contextmanager
def strict_matmul():
    """fp32 products in fp32 (no TF32), fp16/bf16 products accumulated in fp32, inside the block."""
    import torch

    flags = torch.backends.cuda.matmul
    names = ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction")
    saved = {name: getattr(flags, name) for name in names if hasattr(flags, name)}
    try:
        for name in saved:
            setattr(flags, name, False)
        yield
    finally:
        for name, value in saved.items():
            setattr(flags, name, value)


def round_to_tf32(x):
    """fp32 values rounded to TF32's 10-bit mantissa (nearest, ties to even), as tensor cores read them."""
    import torch

    bits = x.contiguous().view(torch.int32)
    drop = 23 - TF32_MANTISSA_BITS
    half = 1 << (drop - 1)
    lsb = (bits >> drop) & 1
    rounded = (bits + (half - 1) + lsb) & ~((1 << drop) - 1)
    finite = torch.isfinite(x)
    return torch.where(finite, rounded.view(torch.float32), x)
