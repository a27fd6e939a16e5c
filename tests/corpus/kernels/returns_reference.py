"""Hands back one of kbench's tensors instead of a result of its own: looks among the process's objects
for a tensor of the output's shape that is neither its output nor one of its inputs (the harness's
copies of the inputs, a reference) and returns it, so the check would compare kbench's tensor with
itself. With none around it does the work honestly."""

import gc

from kbench.registry import implementation


def _find_harness_tensor(out, inputs):
    import torch

    own = {id(out), *(id(t) for t in inputs.values())}
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and id(obj) not in own and tuple(obj.shape) == tuple(out.shape):
            return obj
    return None


@implementation("attention", "cheat-returns-reference", backend="torch", description="hands back a harness tensor")
def returns_reference(case, inputs, out):
    import torch.nn.functional as F

    q, k, v = inputs["q"], inputs["k"], inputs["v"]

    def run():
        found = _find_harness_tensor(out, inputs)
        if found is not None:
            return found
        out.copy_(F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=case.causal))

    return run
