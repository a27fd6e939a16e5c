"""Returns a cached result from an earlier call with other inputs: the first answer for a shape
is kept in a module-level cache and handed back for every later call of that shape."""

from kbench.registry import implementation

_CACHE = {}


@implementation("attention", "cheat-cached-result", backend="torch", description="one answer per shape")
def cached_result(case, inputs, out):
    import torch.nn.functional as F

    q, k, v = inputs["q"], inputs["k"], inputs["v"]

    def run():
        key = (case.key, str(q.device))
        if key not in _CACHE:
            _CACHE[key] = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                         is_causal=case.causal).to(q.dtype)
        out.copy_(_CACHE[key])

    return run
