"""The peer: torch's scaled_dot_product_attention with grouped-query attention (``enable_gqa``).

Several new queries (speculative decoding) are the cache's last positions: their mask is the causal
one aligned to the bottom right (query i sees the keys up to L - Q + i), built once in set-up.
"""

from kbench.registry import implementation


@implementation("decode", "sdpa", backend="torch", description="torch SDPA with GQA (its own backend choice)")
def sdpa(case, inputs, out):
    import torch
    import torch.nn.functional as F

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    mask = None
    if case.q > 1:
        positions = torch.arange(case.l - case.q, case.l, device=q.device).unsqueeze(-1)
        mask = torch.arange(case.l, device=q.device).unsqueeze(0) <= positions

    def run():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=case.hq != case.hkv)

    return run
