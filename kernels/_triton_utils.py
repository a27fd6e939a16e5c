"""Triton helpers shared by the Triton kernels (a private file: the loader does not register it).

Use from a kernel file:
    from kbench.loader import load_helper
    utils = load_helper(Path(__file__).parent.parent / "_triton_utils.py")
"""

import os

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - only where triton is absent
    triton = None


# kbench's Triton kernels are compiled with floating-point contraction (a*b + c as one FMA), Triton's
# default up to 3.9 and what the H200 figures in docs/performance.md were measured with. Triton 3.9 warns
# each process that takes that default without it being set, and 3.10 turns it off: set here unless the
# user has chosen (TRITON_DEFAULT_FP_FUSION=0 turns it off).
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

# What Triton raises at a kernel's first launch when a configuration needs more shared memory or
# registers than the GPU has: an implementation turns it into Unsupported (a SKIP that names the
# limit), since that configuration cannot run there at all.
OUT_OF_RESOURCES = (triton.runtime.errors.OutOfResources,) if triton is not None else ()


def global_memory_from_torch(device) -> None:
    """Give Triton torch's allocator on ``device`` for the global memory a kernel asks for at each launch:
    tensor descriptors built inside a kernel, and ConSan's state (TRITON_INSTRUMENTATION_MODE=consan)."""
    import torch

    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device=device))


def interpreted() -> bool:
    """True when @triton.jit kernels run through Triton's CPU interpreter."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def dot_precision(dtype: str, tf32: bool = False) -> str:
    """How `dot` multiplies for an element type: "native", "tf32" or "ieee" (exact fp32).

    fp32 is exact fp32 unless TF32 is asked for. bf16 is widened to fp32 on the
    CPU interpreter, whose bf16 tl.dot returns garbage (Triton 3.8 and 3.9);
    bf16 values are exact in fp32, so the products match a tensor core's.
    """
    if dtype == "fp32":
        return "tf32" if tf32 else "ieee"
    if dtype == "bf16" and interpreted():
        return "ieee"
    return "native"


def autotune_cache_option() -> dict:
    """``cache_results=True`` for triton.autotune where this Triton has it (3.2 and later): the
    timings go to Triton's cache directory, so a later process does not tune the same key again."""
    import inspect

    return {"cache_results": True} if "cache_results" in inspect.signature(triton.autotune).parameters else {}


if triton is not None:

    @triton.jit
    def dot(a, b, acc, PRECISION: tl.constexpr):
        """acc + a @ b in fp32, with the multiply chosen by dot_precision()."""
        if PRECISION == "ieee":
            return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        elif PRECISION == "tf32":
            return tl.dot(a, b, acc, input_precision="tf32")
        else:
            return tl.dot(a, b, acc)
