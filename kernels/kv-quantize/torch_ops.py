"""The peer: the plain tensor ops a user would write to quantize K and V, in fp32.

Each tensor's grouped dimension is moved last and cut into groups (the last one filled up with its own
last element, which leaves its range as it is), each group's minimum and maximum taken, the scale and
minimum rounded to fp16, the codes rounded against those stored values, and the result copied into the
cache's places in the output buffer. Every step writes a temporary the size of the tensor: the cost of
not fusing them.
"""

from kbench.loader import BUILTIN_SUITES, load_helper
from kbench.registry import implementation

# The cache's format: where each of its tensors goes in the output buffer.
kv = load_helper(BUILTIN_SUITES / "_common" / "kv_quantization.py")


@implementation("kv-quantize", "torch", backend="torch", unit="memory",
                description="plain torch ops in fp32: group min/max, fp16 scale and minimum, round, pack, copy in")
def torch_ops(case, inputs, out):
    bits = kv.QUANTIZED[case.kv_dtype]
    cache = kv.views(out, kv.cache_layout(case.batch, case.hkv, case.l, case.d, case.group, bits))

    def run():
        for name in ("k", "v"):
            codes, scale, minimum = quantized(inputs[name], case.group, kv.ALONG[name], bits)
            cache[f"{name}_codes"].copy_(codes)
            cache[f"{name}_scale"].copy_(scale)
            cache[f"{name}_min"].copy_(minimum)

    return run


def quantized(x, group: int, along: int, bits: int):
    """(codes, scale, minimum) of ``x`` in groups of ``group`` along dimension ``along``; int4 and int2
    codes two and four a byte along the channels (the lowest bits first)."""
    import torch

    size = x.shape[along]
    moved = x.movedim(along, -1).float()
    pad = -size % group
    if pad:
        moved = torch.cat((moved, moved[..., -1:].expand(*moved.shape[:-1], pad)), dim=-1)
    blocks = moved.unflatten(-1, (-1, group))
    low, high = blocks.amin(-1), blocks.amax(-1)
    levels = 2**bits - 1
    scale = ((high - low) / levels).clamp_min(1e-8).half()
    minimum = low.half()
    codes = ((blocks - minimum.float().unsqueeze(-1)) / scale.float().unsqueeze(-1)).round_().clamp_(0, levels)
    codes = codes.flatten(-2)[..., :size].to(torch.uint8).movedim(-1, along)
    if bits < 8:
        codes = kv.packed(codes, bits)
    return codes, scale.movedim(-1, along), minimum.movedim(-1, along)
