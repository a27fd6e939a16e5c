"""Copies the answer out of kbench's own float64 reference: computes one query row honestly, looks
among the process's objects for a float64 tensor of the output's shape whose first row matches it, and
copies that tensor into the output (a cast and a copy: at a large N far cheaper than attention). With
no matching reference around it does all the work, so every call that no live reference answers is
right."""

import gc

from kbench.registry import implementation


def _matching_reference(first_row, shape, device):
    import torch

    for obj in gc.get_objects():
        if (isinstance(obj, torch.Tensor) and obj.dtype == torch.float64 and tuple(obj.shape) == shape
                and obj.device == device
                and torch.allclose(obj[..., :1, :].to(first_row.dtype), first_row, rtol=1e-2, atol=1e-2)):
            return obj
    return None


@implementation("attention", "cheat-copies-reference", backend="torch",
                description="copies the harness's reference when one matches a row it computed")
def copies_reference(case, inputs, out):
    import torch.nn.functional as F

    q, k, v = inputs["q"], inputs["k"], inputs["v"]

    def run():
        first_row = F.scaled_dot_product_attention(q[..., :1, :].float(), k.float(), v.float())
        found = _matching_reference(first_row, tuple(out.shape), out.device) if not case.causal else None
        if found is not None:
            out.copy_(found)
        else:
            out.copy_(F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=case.causal))

    return run
