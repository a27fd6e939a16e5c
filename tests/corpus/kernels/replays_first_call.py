"""Computes on its first call only, then replays that answer: right on the correctness trials
(each gets a new closure), and nearly free in the timed calls. kbench's check after timing refills
the inputs with new values and calls the same closure again."""

from kbench.registry import implementation


@implementation("attention", "cheat-replays-first-call", backend="torch", description="works once")
def replays_first_call(case, inputs, out):
    import torch.nn.functional as F

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    memo = []

    def run():
        if not memo:
            memo.append(F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                       is_causal=case.causal).to(q.dtype))
        return memo[0]

    return run
