"""The peer: torch.nn.functional.scaled_dot_product_attention with one backend pinned.

Each backend is its own implementation so that several can be measured side by
side in one run: ``sdpa`` pins FLASH (the default peer), ``sdpa-cudnn``,
``sdpa-efficient`` and ``sdpa-math`` pin the others. The backend that ran is
recorded in each result's ``config``.
"""

from functools import partial

from kbench.registry import Unsupported, implementation

BACKENDS = {
    "sdpa": ("FLASH_ATTENTION", False),
    "sdpa-cudnn": ("CUDNN_ATTENTION", True),
    "sdpa-efficient": ("EFFICIENT_ATTENTION", True),
    "sdpa-math": ("MATH", False),
}


def make_sdpa(case, inputs, out, backend):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    pinned = getattr(SDPBackend, backend)
    # Pin the backend for the whole (per-implementation) worker process instead
    # of entering sdpa_kernel() in the timed closure: the context manager costs
    # microseconds of Python that would be charged to a 15 us kernel.
    sdpa_kernel([pinned]).__enter__()
    try:
        F.scaled_dot_product_attention(q, k, v, is_causal=case.causal)
    except RuntimeError as exc:
        if "No available kernel" in str(exc):
            raise Unsupported(f"SDPA backend {backend} cannot run this case on {q.device.type}") from None
        raise

    def run():
        return F.scaled_dot_product_attention(q, k, v, is_causal=case.causal)

    run.config = {"backend": backend, "torch": torch.__version__}
    return run


for _name, (_backend, _cuda_only) in BACKENDS.items():
    implementation(
        "attention",
        _name,
        backend="torch",
        cuda=_cuda_only,
        description=f"torch SDPA, backend {_backend} pinned",
    )(partial(make_sdpa, backend=_backend))
