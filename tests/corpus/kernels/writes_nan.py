"""Writes NaN: the right answer, except one query row of NaN."""

from kbench.registry import implementation


@implementation("attention", "cheat-nan", backend="torch", description="a row of NaN in a right answer")
def writes_nan(case, inputs, out):
    import torch.nn.functional as F

    q, k, v = inputs["q"], inputs["k"], inputs["v"]

    def run():
        out.copy_(F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=case.causal))
        out[..., 0, :] = float("nan")

    return run
