"""Standard attention as three separate kernels, as the FlashAttention walkthrough describes it:
S = Q·Kᵀ·scale, P = softmax(S), O = P·V, with S and P (N x N) materialised in memory."""

from kbench.registry import implementation


@implementation("attention", "naive", backend="torch",
                description="three kernels: S=QKᵀ, P=softmax(S), O=PV (S and P in memory)")
def naive(case, inputs, out):
    import torch

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    scale = case.d**-0.5
    n = case.n
    mask = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1) if case.causal else None

    def run():
        s = torch.matmul(q, k.transpose(-1, -2)) * scale
        if mask is not None:
            s = s.masked_fill(mask, float("-inf"))
        p = torch.softmax(s, dim=-1)
        torch.matmul(p, v, out=out)

    return run
