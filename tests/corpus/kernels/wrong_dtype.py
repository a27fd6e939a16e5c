"""Returns the right values in the wrong dtype (float32 where the case asks for fp16 or bf16)."""

from kbench.registry import implementation


@implementation("attention", "cheat-wrong-dtype", backend="torch", dtypes=("fp16", "bf16"),
                description="forgets to cast back")
def wrong_dtype(case, inputs, out):
    import torch.nn.functional as F

    q, k, v = inputs["q"], inputs["k"], inputs["v"]

    def run():
        return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=case.causal)

    return run
