"""Keeps its last answer with a cheap fingerprint of its inputs (nine of their elements and their
addresses) and copies it back while the fingerprint holds: right on every call, the timed ones (all on
the same inputs, so all but the first are a copy) and the checks on new inputs after timing (the
fingerprint changes there, so it computes). Unlike cheat-faster-than-light it needs no version counter,
and reading the nine elements makes each call wait on the GPU. On a GPU the calls on new inputs are
timed as the samples were, and their time against the median fails it."""

from kbench.registry import implementation


@implementation("attention", "cheat-keeps-answer", backend="torch", cuda=True,
                description="copies an answer kept by a fingerprint of its inputs")
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
