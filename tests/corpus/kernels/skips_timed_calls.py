"""Does the work only when its inputs changed since its last call, as a check's call does; a timed
call on the same inputs returns at once, leaving the answer of the last call in its output buffer.
Right on every correctness trial (each a new closure) and on the check after timing (new inputs);
caught only because the output is poisoned before every timed call and timed calls are judged."""

from kbench.registry import implementation


@implementation("attention", "cheat-skips-timed-calls", backend="torch", description="no work when timed")
def skips_timed_calls(case, inputs, out):
    import torch.nn.functional as F

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    seen = []

    def run():
        fingerprint = (float(q.flatten()[0]), float(k.flatten()[-1]), float(v.flatten()[0]))
        if seen and seen[-1] == fingerprint:
            return None  # "the answer is still in out"
        seen.append(fingerprint)
        out.copy_(F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=case.causal))
        return None

    return run
