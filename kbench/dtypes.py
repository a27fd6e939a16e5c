"""The element types suites and kernels name on the command line, in one place."""

from __future__ import annotations

# Floating-point types (what the matrix suites take).
TORCH_NAMES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
NAMES = tuple(TORCH_NAMES)
UNIT_ROUNDOFF = {"fp16": 2.0**-11, "bf16": 2.0**-8, "fp32": 2.0**-24}  # half an ulp at 1.0
# Integer types, checked exactly.
INTEGER_TORCH_NAMES = {"int32": "int32", "int64": "int64"}
ELEMENT_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4, "int32": 4, "int64": 8}


def is_integer(name: str) -> bool:
    return name in INTEGER_TORCH_NAMES


def torch_dtype(name: str):
    """The torch dtype of a kbench element type name (imports torch)."""
    import torch

    return getattr(torch, TORCH_NAMES.get(name) or INTEGER_TORCH_NAMES[name])
