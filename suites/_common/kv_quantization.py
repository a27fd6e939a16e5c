"""The quantized KV cache's format, which the decode suite's kernels read and the kv-quantize suite's
kernels write: one definition for both.

Each cached element is an 8-, 4- or 2-bit code c with x = c · scale + minimum, the scale and minimum
fp16, one pair per group of ``group`` elements: K grouped along the tokens (one pair per channel for
every ``group`` tokens), V along the channels (one pair per token for every ``group`` channels). int4
and int2 codes are packed two and four a byte along the channels, the lowest bits first: byte j of a
token holds channel 2j in its low nibble and 2j + 1 in its high one (int4), channels 4j .. 4j + 3 in
bits 0-1, 2-3, 4-5 and 6-7 (int2). torch is imported inside the functions: suites load this file when
kbench starts.
"""

QUANTIZED = {"int8": 8, "int4": 4, "int2": 2}  # cache type -> bits a code
# Where each of K and V is grouped: the dimension of a B x H x L x d tensor its groups run along.
ALONG = {"k": -2, "v": -1}


def _blocks(x, group: int, along: int):
    """``x`` with dimension ``along`` moved last and cut into rows of ``group`` elements (the last row
    padded with NaN, which the range below leaves out)."""
    import torch

    size = x.shape[along]
    groups = -(-size // group)
    pad = groups * group - size
    moved = x.movedim(along, -1)
    padded = torch.nn.functional.pad(moved, (0, pad), value=float("nan")) if pad else moved
    return padded.reshape(*moved.shape[:-1], groups, group)


def _range(blocks):
    import torch

    low = torch.nan_to_num(blocks, nan=float("inf")).amin(-1)
    high = torch.nan_to_num(blocks, nan=float("-inf")).amax(-1)
    return low, high


def group_range(x, group: int, along: int):
    """(smallest, largest) element of each group, shaped as the scales are stored."""
    low, high = _range(_blocks(x, group, along))
    return low.movedim(-1, along), high.movedim(-1, along)


def exact_scale(low, high, bits: int):
    """The scale before it is rounded to fp16: the group's range over the largest code, kept off zero
    (a constant group still divides by something)."""
    return ((high - low) / (2**bits - 1)).clamp_min(1e-8)


def quantize(x, group: int, along: int, bits: int, name: str) -> dict:
    """Asymmetric quantization of ``x`` (B x H x L x d, float32 or float64) in groups of ``group``
    elements along dimension ``along`` (-2: tokens, -1: channels): codes (uint8) with x ≈ code · scale +
    minimum, the scale and minimum fp16, one of each per group (shape: x's, ``along`` divided by the
    group, rounded up). The codes are chosen against the fp16 scale and minimum that are stored, the
    nearest one (ties to even)."""
    import torch

    size = x.shape[along]
    blocks = _blocks(x, group, along)
    low, high = _range(blocks)
    levels = 2**bits - 1
    scale = exact_scale(low, high, bits).half()
    minimum = low.half()
    codes = ((blocks - minimum.float().unsqueeze(-1)) / scale.float().unsqueeze(-1)).round().clamp(0, levels)
    codes = codes.flatten(-2)[..., :size].to(torch.uint8).movedim(-1, along)
    return {f"{name}_codes": packed(codes, bits).contiguous(), f"{name}_scale": scale.movedim(-1, along).contiguous(),
            f"{name}_min": minimum.movedim(-1, along).contiguous()}


def packed(codes, bits: int):
    """Codes one an element (uint8, the channels last) packed 8 / ``bits`` a byte, the lowest bits first."""
    per_byte = 8 // bits
    out = codes[..., 0::per_byte].clone()
    for i in range(1, per_byte):
        out |= codes[..., i::per_byte] << (bits * i)
    return out


def unpacked(codes, bits: int):
    """The codes one an element: int4's and int2's bytes split into their channels (lowest bits first)."""
    import torch

    if bits == 8:
        return codes
    mask, last = (1 << bits) - 1, 8 - bits  # the lowest code needs no shift, the highest no mask
    middle = [(codes >> shift) & mask for shift in range(bits, last, bits)]
    return torch.stack([codes & mask, *middle, codes >> last], dim=-1).flatten(-2)


def spread(per_group, group: int, along: int, size: int):
    """A value per group (a scale, a minimum) repeated over the group's ``size``-long dimension's elements."""
    return per_group.repeat_interleave(group, dim=along).narrow(along, 0, size)


def dequantize(inputs: dict, name: str, group: int, along: int, dtype, bits: int = 8):
    """``code · scale + minimum`` of a quantized cache tensor, computed in float64 and rounded to ``dtype``."""
    import torch

    codes = unpacked(inputs[f"{name}_codes"], bits)
    size = codes.shape[along]
    scale, minimum = (spread(inputs[f"{name}_{part}"].to(torch.float64), group, along, size)
                      for part in ("scale", "min"))
    return (codes.to(torch.float64) * scale + minimum).to(dtype)


def cache_layout(batch: int, heads: int, length: int, d: int, group: int, bits: int) -> dict:
    """The tensors of a quantized K/V cache, in the order one buffer holds them (:func:`views`):
    name -> (shape, bytes an element). Codes first (their byte counts are even for an even d, so the
    fp16 parts after them stay aligned)."""
    codes = (batch, heads, length, d * bits // 8)
    k_groups = (batch, heads, -(-length // group), d)
    v_groups = (batch, heads, length, -(-d // group))
    return {"k_codes": (codes, 1), "v_codes": (codes, 1), "k_scale": (k_groups, 2), "k_min": (k_groups, 2),
            "v_scale": (v_groups, 2), "v_min": (v_groups, 2)}


def layout_bytes(layout: dict) -> int:
    """The bytes of a cache of ``layout`` (:func:`cache_layout`)."""
    total = 0
    for shape, size in layout.values():
        count = size
        for extent in shape:
            count *= extent
        total += count
    return total


def views(buffer, layout: dict) -> dict:
    """The cache's tensors as views into one uint8 ``buffer`` of :func:`layout_bytes` bytes: the codes
    uint8, the scales and minimums fp16 (the names decode's kernels take them by)."""
    import torch

    out, offset = {}, 0
    for name, (shape, size) in layout.items():
        count = size
        for extent in shape:
            count *= extent
        part = buffer.narrow(0, offset, count)
        out[name] = (part if size == 1 else part.view(torch.float16)).view(shape)
        offset += count
    return out
