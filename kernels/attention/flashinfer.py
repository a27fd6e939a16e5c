"""A serving library's peer: FlashInfer's prefill attention (package ``flashinfer-python``).

FlashInfer picks its backend by GPU (on Hopper, its FlashAttention-3 port: TMA, ``wgmma``, warp
specialization) and compiles each kernel variant with nvcc the first time it is used, keeping it in
its own cache folder (``~/.cache/flashinfer``) for later runs. It is optional: without the
package ``flashinfer`` is a SKIP that says what to install. Packages installed with
``pip install --target DIR`` are found through ``$KBENCH_SITE_DIRS`` (kbench.loader).

The suite's B x H x N x d tensors are handed over without a copy, as one request whose heads are
the B·H (batch, head) pairs, which equal lengths make independent: Q, K and V as [tokens, heads, d]
views (FlashInfer's ``NHD`` layout, with the tensors' own strides, which it reads). Not ``HND``,
which is the tensors' memory as it is: FlashInfer 0.7's Hopper path takes K's sizes in NHD order
whatever the layout, and divides by the head count it reads there. The output, [tokens, B·H, d], is
returned as a B x H x N x d view.
"""

from pathlib import Path

from kbench.loader import load_helper
from kbench.registry import implementation

_flashinfer = load_helper(Path(__file__).parent.parent / "_flashinfer.py")


def as_one_request(q, k, v):
    """Q, K and V as [N, B·H, d]: views of B x H x N x d tensors, no copy."""
    b, h, n, d = q.shape
    return tuple(t.reshape(b * h, n, d).transpose(0, 1) for t in (q, k, v))


def as_suite_layout(out, b: int, h: int):
    """FlashInfer's [N, B·H, d] output as B x H x N x d (a view)."""
    n, _, d = out.shape
    return out.reshape(n, b, h, d).permute(1, 2, 0, 3)


@implementation(
    "attention",
    "flashinfer",
    **_flashinfer.NEEDS,
    dtypes=("fp16", "bf16"),
    description="FlashInfer prefill attention (flashinfer-python; optional)",
)
def flashinfer_prefill(case, inputs, out):
    import flashinfer

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    b, h = case.batch, case.heads

    def run():
        fq, fk, fv = as_one_request(q, k, v)
        result = flashinfer.single_prefill_with_kv_cache(fq, fk, fv, causal=case.causal, kv_layout="NHD")
        return as_suite_layout(result, b, h)

    return _flashinfer.compiled(run, q)
