"""A softmax that never subtracts the row's maximum: exp(s) / sum(exp(s)) in fp32. Right on N(0, 1)
inputs, whose scores stay small; exp overflows to Inf once a score passes about 88.7."""

from kbench.registry import implementation


@implementation("attention", "cheat-unstable-softmax", backend="torch", description="softmax without the max")
def unstable_softmax(case, inputs, out):
    import torch

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    mask = torch.ones(case.n, case.n, dtype=torch.bool, device=q.device).triu(1) if case.causal else None

    def run():
        s = (q.float() @ k.float().transpose(-1, -2)) * case.d**-0.5
        e = torch.exp(s)
        if mask is not None:
            e = e.masked_fill(mask, 0.0)
        out.copy_((e / e.sum(-1, keepdim=True)) @ v.float())

    return run
