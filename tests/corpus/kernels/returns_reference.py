"""Returns the reference's own output buffer: finds kbench's float64 reference (of an earlier
trial, still alive) among the process's objects and hands it back, so the check would compare the
reference with itself. With no reference around yet it does the work honestly."""

import gc

from kbench.registry import implementation


def _find_reference(shape, device):
    import torch

    for obj in gc.get_objects():
        if (isinstance(obj, torch.Tensor) and obj.dtype == torch.float64 and tuple(obj.shape) == shape
                and obj.device == device):
            return obj
    return None


@implementation("attention", "cheat-returns-reference", backend="torch", description="steals the reference")
def returns_reference(case, inputs, out):
    import torch.nn.functional as F

    q, k, v = inputs["q"], inputs["k"], inputs["v"]

    def run():
        found = _find_reference(tuple(out.shape), out.device)
        if found is not None:
            return found
        out.copy_(F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=case.causal))

    return run
