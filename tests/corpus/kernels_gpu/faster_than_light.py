"""Faster than the speed of light: right on every check, but it recomputes only when its inputs
changed (their version counters moved) and otherwise copies its last answer. The timed calls are a
memory copy, far under the time the case's FLOPs need at the datasheet peak; the calls on new inputs
after timing, which must do the work, are timed too, and their time against the median fails it."""

from kbench.registry import implementation


@implementation("attention", "cheat-faster-than-light", backend="torch", cuda=True,
                description="copies a cached answer while its inputs are unchanged")
def faster_than_light(case, inputs, out):
    import torch.nn.functional as F

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    state = {"versions": None, "answer": None}

    def run():
        versions = (q._version, k._version, v._version)
        if versions != state["versions"]:
            state["answer"] = F.scaled_dot_product_attention(q, k, v, is_causal=case.causal)
            state["versions"] = versions
        out.copy_(state["answer"])

    return run
