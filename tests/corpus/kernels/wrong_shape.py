"""Returns a tensor of the wrong shape: one query row short."""

from kbench.registry import implementation


@implementation("attention", "cheat-wrong-shape", backend="torch", description="one row short")
def wrong_shape(case, inputs, out):
    import torch.nn.functional as F

    q, k, v = inputs["q"], inputs["k"], inputs["v"]

    def run():
        full = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=case.causal)
        return full.to(q.dtype)[..., :-1, :]

    return run
