"""The reductions a user would otherwise call: torch.sum and cupy.sum (CUB underneath).

fp16 input is summed in fp32 (``dtype=``), as the suite asks of every implementation;
both write into the suite's output tensor, so nothing is allocated while timed.
"""

from pathlib import Path

from kbench.loader import load_helper
from kbench.registry import implementation

DTYPES = ("fp32", "fp16", "int32")  # summed into the suite's output tensor, of the suite's output type

_cupy = load_helper(Path(__file__).parent.parent / "_cupy_common.py")


@implementation("reduction", "torch-sum", backend="torch", unit="memory", dtypes=DTYPES,
                description="torch.sum(x, dtype=...) into the output tensor")
def torch_sum(case, inputs, out):
    import torch

    x = inputs["x"]
    return lambda: torch.sum(x, dim=0, dtype=out.dtype, out=out)


@implementation("reduction", "cupy-sum", backend="cupy", cuda=True, modules=("torch", "cupy"), unit="memory",
                dtypes=DTYPES,
                description="cupy.sum(x, dtype=..., out=...): CUB's device reduction with CuPy's default accelerators")
def cupy_sum(case, inputs, out):
    import cupy

    x, result = cupy.from_dlpack(inputs["x"]), cupy.from_dlpack(out)

    def body():
        cupy.sum(x, dtype=result.dtype, out=result)  # returns None: the result is the suite's own tensor

    run = _cupy.on_torch_stream(body)
    try:
        from cupy._core import _accelerator  # private: which backends CuPy's reductions try first

        run.config = {"cupy_reduction_accelerators": [str(a) for a in _accelerator.get_reduction_accelerators()]}
    except (ImportError, AttributeError):
        run.config = {}
    return run
