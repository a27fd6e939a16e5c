"""Copies the answer out of kbench's own tensors: computes one query row honestly, looks among the
process's objects for a tensor of the output's shape, of any type, whose first row matches it (a float64
reference, a copy of an earlier result), and copies that tensor into the output (a cast and a copy: at a
large N far cheaper than attention). With no match around it does all the work, so every call is right
either way: what shows whether kbench left an answer within its reach is the file named by
$KBENCH_CORPUS_FOUND, where it writes a line for every call it found one."""

import gc
import os

from kbench.registry import implementation


def _matching_tensor(first_row, out, inputs):
    import torch

    own = {id(out), *(id(t) for t in inputs.values())}
    for obj in gc.get_objects():
        if (isinstance(obj, torch.Tensor) and id(obj) not in own and tuple(obj.shape) == tuple(out.shape)
                and torch.allclose(obj[..., :1, :].to(first_row.device, first_row.dtype), first_row,
                                   rtol=1e-2, atol=1e-2)):
            return obj
    return None


def _tell(found) -> None:
    path = os.environ.get("KBENCH_CORPUS_FOUND")
    if path:
        with open(path, "a") as log:
            log.write(f"found a {found.dtype} tensor of shape {tuple(found.shape)} holding the answer\n")


@implementation("attention", "cheat-copies-reference", backend="torch",
                description="copies a tensor of the harness's that holds the answer, when it finds one")
def copies_reference(case, inputs, out):
    import torch.nn.functional as F

    q, k, v = inputs["q"], inputs["k"], inputs["v"]

    def run():
        first_row = F.scaled_dot_product_attention(q[..., :1, :].float(), k.float(), v.float())
        found = _matching_tensor(first_row, out, inputs) if not case.causal else None
        if found is not None:
            _tell(found)
            out.copy_(found)
        else:
            out.copy_(F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=case.causal))

    return run
