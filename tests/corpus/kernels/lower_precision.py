"""Computes the case in bf16 whatever its type (inputs, scores, probabilities and output rounded to
bf16's 8-bit significand), then returns the type asked for: the right shape and dtype, and within
any fixed tolerance loose enough for bf16, but several times the error a correct fp16 kernel makes."""

from kbench.registry import implementation


@implementation("attention", "cheat-bf16-for-fp16", backend="torch", description="fp16 case computed in bf16")
def bf16_for_fp16(case, inputs, out):
    import torch
    import torch.nn.functional as F

    q, k, v = (inputs[name] for name in ("q", "k", "v"))

    def run():
        low = [t.to(torch.bfloat16) for t in (q, k, v)]
        return F.scaled_dot_product_attention(*low, is_causal=case.causal).to(q.dtype)

    return run
