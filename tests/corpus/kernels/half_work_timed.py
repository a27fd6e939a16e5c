"""Returns a tensor of its own; on a call whose inputs are the ones of its last call (a timed call),
it computes only the first half of the query rows into a fresh allocation and leaves the rest to
whatever the allocator hands back, often the previous call's answer."""

from kbench.registry import implementation


@implementation("attention", "cheat-half-work-timed", backend="torch", description="half the rows when timed")
def half_work_timed(case, inputs, out):
    import torch
    import torch.nn.functional as F

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    seen = []

    def attend(rows):
        return F.scaled_dot_product_attention(q[..., :rows, :].float(), k.float(), v.float()).to(q.dtype)

    def run():
        fingerprint = (float(q.flatten()[0]), float(k.flatten()[-1]), float(v.flatten()[0]))
        if seen and seen[-1] == fingerprint and not case.causal:
            result = torch.empty_like(q)
            half = case.n // 2
            result[..., :half, :] = attend(half)
            return result
        seen.append(fingerprint)
        return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=case.causal).to(q.dtype)

    return run
