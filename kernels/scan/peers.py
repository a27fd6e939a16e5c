"""The scans a user would otherwise call: torch.cumsum and cupy.cumsum.

Exclusive is the inclusive scan shifted by one, written straight into the output
(y[0] = 0, y[1:] = cumsum(x[:-1])), so the peers never allocate while timed.
"""

from pathlib import Path

from kbench.loader import load_helper
from kbench.registry import implementation

_cupy = load_helper(Path(__file__).parent.parent / "_cupy_common.py")


@implementation("scan", "torch-cumsum", backend="torch", unit="memory",
                description="torch.cumsum(x, 0, out=y)")
def torch_cumsum(case, inputs, out):
    import torch

    x = inputs["x"]
    if not case.exclusive:
        return lambda: torch.cumsum(x, 0, out=out)

    def run():
        if case.n:
            out[:1].zero_()
            torch.cumsum(x[:-1], 0, out=out[1:])
        return out

    return run


@implementation("scan", "cupy-cumsum", backend="cupy", cuda=True, modules=("torch", "cupy"), unit="memory",
                description="cupy.cumsum(x, out=y) (CUB's device scan where CuPy's accelerators allow)")
def cupy_cumsum(case, inputs, out):
    import cupy

    x, y = cupy.from_dlpack(inputs["x"]), cupy.from_dlpack(out)

    def body():
        if not case.exclusive:
            cupy.cumsum(x, out=y)
        elif case.n:
            y[:1] = 0
            cupy.cumsum(x[:-1], out=y[1:])

    return _cupy.on_torch_stream(body)
