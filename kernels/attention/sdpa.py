"""The peer: torch.nn.functional.scaled_dot_product_attention with one backend pinned.

Each backend is its own implementation so that several can be measured side by
side in one run: ``sdpa`` pins FLASH (the default peer), ``sdpa-cudnn``,
``sdpa-efficient`` and ``sdpa-math`` pin the others. The backend that ran is
recorded in each result's ``config``.
"""

from functools import partial

from kbench.registry import Unsupported, implementation

# implementation -> (backend, needs CUDA)
BACKENDS = {
    "sdpa": ("flash", False),
    "sdpa-cudnn": ("cudnn", True),
    "sdpa-efficient": ("mem_efficient", True),
    "sdpa-math": ("math", False),
}


def pin_backend(backend: str) -> None:
    """Enable exactly one SDPA backend, for the whole (per-implementation) worker process.

    SDPA then runs that backend or raises "No available kernel": it can never
    fall back to another one silently. Global flags rather than sdpa_kernel()
    in the timed closure, whose Python enter/exit would be charged to a 15 us
    kernel; and rather than an sdpa_kernel() entered and left open, which its
    generator undoes as soon as the object is garbage-collected.
    """
    import torch

    for name in ("flash", "cudnn", "mem_efficient", "math"):
        getattr(torch.backends.cuda, f"enable_{name}_sdp")(name == backend)


def make_sdpa(case, inputs, out, backend):
    import torch
    import torch.nn.functional as F

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    pin_backend(backend)
    try:  # with one backend enabled, SDPA refuses what that backend cannot run
        F.scaled_dot_product_attention(q, k, v, is_causal=case.causal)
    except RuntimeError as exc:
        if any(text in str(exc) for text in ("No available kernel", "Invalid backend")):
            raise Unsupported(f"SDPA's {backend} backend cannot run {case.dtype} d={case.d} "
                              f"on {q.device.type}") from None
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
        description=f"torch SDPA, {_backend} backend pinned",
    )(partial(make_sdpa, backend=_backend))
