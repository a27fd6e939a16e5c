"""The element types suites and kernels name on the command line, in one place."""

from __future__ import annotations

TORCH_NAMES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
NAMES = tuple(TORCH_NAMES)
ELEMENT_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}
UNIT_ROUNDOFF = {"fp16": 2.0**-11, "bf16": 2.0**-8, "fp32": 2.0**-24}  # half an ulp at 1.0


def torch_dtype(name: str):
    """The torch dtype of a kbench element type name (imports torch)."""
    import torch

    return getattr(torch, TORCH_NAMES[name])
