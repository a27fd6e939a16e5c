"""The peer: torch's scaled_dot_product_attention with grouped-query attention (``enable_gqa``).

Several new queries (speculative decoding) are the cache's last positions: their mask is the causal
one aligned to the bottom right (query i sees the keys up to L - Q + i), built once in set-up. A ragged
batch (``--l 1000+130000``) is one call a sequence, over its own tokens.

A quantized cache is what a user of SDPA would do with one: dequantize it to fp16 (code · scale +
minimum, each group's pair repeated over its elements) in every call, then attend. The dequantization
is timed with it: it is the cost of keeping the cache small with this peer.
"""

from kbench.loader import BUILTIN_SUITES, load_helper
from kbench.registry import implementation

# The cache's format, shared with the suite: how int4 and int2 codes sit in their bytes; and a batch's
# sequences, one call each for a ragged batch.
kv = load_helper(BUILTIN_SUITES / "_common" / "kv_quantization.py")
sequences = load_helper(BUILTIN_SUITES / "_common" / "sequence_lengths.py")


@implementation("decode", "sdpa", backend="torch", description="torch SDPA with GQA (its own backend choice)")
def sdpa(case, inputs, out):
    import torch
    import torch.nn.functional as F

    q = inputs["q"]
    # A ragged batch (--l 1000+130000): each sequence attends to its own tokens, one call each
    lengths = inputs["lengths"].tolist() if "lengths" in inputs else None

    def causal(n):  # query i of the last Q sees the keys up to n - Q + i
        if case.q == 1:
            return None
        positions = torch.arange(n - case.q, n, device=q.device).unsqueeze(-1)
        return torch.arange(n, device=q.device).unsqueeze(0) <= positions

    masks = {n: causal(n) for n in (lengths or [int(case.l)])}

    if "k_codes" in inputs:
        bits = 8 * inputs["k_codes"].shape[-1] // case.d  # int4's codes are two a byte, int2's four

        def cache():
            return (dequantized(inputs, "k", case.group, -2, bits), dequantized(inputs, "v", case.group, -1, bits))
    else:
        def cache():
            return inputs["k"], inputs["v"]

    def attend(q, k, v):  # over k's tokens, with their mask
        return F.scaled_dot_product_attention(q, k, v, attn_mask=masks[k.shape[2]], enable_gqa=case.hq != case.hkv)

    def run():
        k, v = cache()
        return sequences.by_sequence(attend, q, k, v, lengths)

    return run


def dequantized(inputs: dict, name: str, group: int, along: int, bits: int):
    """code · scale + minimum, each group's scale and minimum repeated over its elements: computed in
    fp32 and rounded once to fp16 (as the cache's values would have been stored). int4 and int2 codes
    are unpacked first (channel 2j in a byte's low nibble, 2j + 1 in its high one; int2: channels 4j ..
    4j + 3 in bits 0-1 .. 6-7)."""
    import torch

    codes = kv.unpacked(inputs[f"{name}_codes"], bits)
    size = codes.shape[along]
    scale, minimum = (inputs[f"{name}_{part}"].repeat_interleave(group, dim=along).narrow(along, 0, size)
                      for part in ("scale", "min"))
    return torch.addcmul(minimum.float(), codes.float(), scale.float()).half()
