"""Keeps its last answer with a cheap fingerprint of its inputs (a few of their elements and their
addresses) and copies the answer back while the fingerprint holds. It is right on every call: the
trials, the timed calls (all on the same inputs, so all but the first are a copy) and the checks on new
inputs after timing (the fingerprint changes, so it computes). kbench times those last calls as the
samples were: they take the work's time, many times the copies' median."""

from kbench.registry import implementation


@implementation("attention", "cheat-keeps-answer", backend="torch", description="answer kept by a fingerprint")
def keeps_answer_by_fingerprint(case, inputs, out):
    import torch.nn.functional as F

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    kept = {}

    def fingerprint():
        return tuple(float(t.reshape(-1)[i]) for t in (q, k, v) for i in (0, 7, -1)) + tuple(
            t.data_ptr() for t in (q, k, v))

    def run():
        seen = fingerprint()
        if kept.get("fingerprint") != seen:
            kept["fingerprint"] = seen
            kept["answer"] = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                            is_causal=case.causal).to(q.dtype)
        out.copy_(kept["answer"])

    return run
