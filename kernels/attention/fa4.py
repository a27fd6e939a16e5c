"""The strongest peer installable today: FlashAttention-4 (package ``flash-attn-4``).

FlashAttention-4 is written in the CuTe DSL (``nvidia-cutlass-dsl``): Python that CUTLASS's
compiler turns into a kernel at the first call of each shape class, cached for the process. On
Hopper it runs the FlashAttention-3 design: TMA loads, ``wgmma``, a producer warp and two
consumer warpgroups ping-ponging. It is optional: without the package ``fa4`` is a SKIP that
says what to install (``pip install "flash-attn-4[cu13]"`` on CUDA 13). Packages installed with
``pip install --target DIR`` are found through ``$KBENCH_SITE_DIRS`` (kbench.loader), which runs
their .pth files as site-packages would: the CuTe DSL needs its own.

FlashAttention takes B x N x H x d tensors and the suite's are B x H x N x d: the closure passes
transposed views (no copy; their strides are what FlashAttention's loads accept) and returns the
output transposed back, a view of the tensor FlashAttention allocates on each call.
"""

from kbench.registry import Unsupported, implementation

def attention_bnhd(flash_attn_func):
    """The closure's body for a ``flash_attn_func`` (FlashAttention's, or a stand-in in the tests)."""

    def call(q, k, v, causal: bool):
        result = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal)
        out = result[0] if isinstance(result, tuple) else result  # (out, lse) in 4.0 betas
        return out.transpose(1, 2)

    return call


@implementation(
    "attention",
    "fa4",
    backend="cute-dsl",
    cuda=True,
    modules=("torch", "flash_attn.cute"),
    min_cc=(9, 0),
    dtypes=("fp16", "bf16"),
    description="FlashAttention-4 (flash-attn-4, CuTe DSL; optional)",
)
def fa4(case, inputs, out):
    import importlib.metadata

    import torch
    from flash_attn.cute import flash_attn_func

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    call = attention_bnhd(flash_attn_func)
    try:  # compiles this shape class's kernel (seconds, once per process): never inside the timing
        call(q, k, v, case.causal)
    except (AssertionError, NotImplementedError, ValueError) as exc:  # its own checks of what it runs
        raise Unsupported(f"FlashAttention-4 cannot run this case: {str(exc).splitlines()[0]}") from None
    if q.is_cuda:
        torch.cuda.synchronize()

    def run():
        return call(q, k, v, case.causal)

    run.config = {"flash-attn-4": importlib.metadata.version("flash-attn-4")}
    return run
