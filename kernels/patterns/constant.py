"""The constant-memory lesson: a 256-tap convolution with its weights in __constant__ memory (a broadcast
to the warp) against the same kernel reading them from global memory.

The CUDA source is ``constant.cu`` beside this file. constant-cmem copies the weights into the
module's ``conv_weights`` before every launch (1 KiB, device to device, on the same stream): it is
part of the timed call, as it is part of using constant memory. ``kbench run patterns --lesson constant``.
"""

from pathlib import Path

from kbench.loader import load_helper
from kbench.registry import Unsupported

SOURCE = Path(__file__).with_suffix(".cu")
LESSON = "constant"
TAPS = 256  # constant.cu's conv_weights[256]: suites/patterns.py's CONV_TAPS
SYMBOL = "conv_weights"

_p = load_helper(Path(__file__).parent / "_patterns.py")

KERNELS = {"constant-global": "conv_global", "constant-cmem": "conv_cmem"}
PREDICTS = {
    "constant-global": _p.Prediction("the weights from global memory: a load per weight per thread"),
    "constant-cmem": _p.Prediction("the warp's one weight address broadcast from the constant cache, "
                                   "no load instruction", versus="constant-global", low=1.1),
}
WHAT = {
    "constant-global": "256-tap convolution, the weights read from global memory",
    "constant-cmem": "256-tap convolution, the weights in __constant__ memory (copied in before each launch)",
}


def plan(case, variant: str) -> dict:
    """The launch for one case (raises Unsupported for another lesson): kernel name, grid, block."""
    _p.require(case, LESSON)
    return _p.linear_plan(KERNELS[variant], _p.elements(case))


def mechanism(case, variant: str) -> dict:
    if variant == "constant-cmem":
        weights = (f"one address a warp, broadcast by the constant cache: {TAPS} FMAs a thread with no load "
                   f"for the weights (nvcc 13 for sm_90: a ULDC.64 a warp for each pair, into uniform "
                   f"registers, at offsets fixed by the fully unrolled loop; unrolled only 16 at a time the "
                   f"offsets are run-time values and the reads miss the immediate-constant cache: 0.54x "
                   f"the global version on the H200, docs/performance.md)")
    else:
        weights = f"{TAPS} loads a thread (one address a warp, served once from L1) beside the {TAPS} loads of x"
    return {"weights": weights, "x": f"{TAPS} loads a thread, consecutive across the warp (L1 hits after "
                                     "the first: neighbouring threads share 255 of them)"}


def _factory(variant: str):
    def make(case, inputs, out):
        import numpy as np

        p = plan(case, variant)
        x, w = inputs["x"], inputs["w"]
        if tuple(w.shape) != (TAPS,):
            raise Unsupported(f"w has shape {tuple(w.shape)}: the kernel's constant array holds {TAPS} weights")
        count = np.int64(_p.elements(case))
        if variant == "constant-global":
            kernel = _p.compiled(str(SOURCE), p["name"])
            run = _p.launcher(kernel, p["grid"], p["block"], (*_p.pointer_args(x, w, out), count))
        else:
            # the __constant__ array lives in the module that launches the kernel
            module = _p.compiled_module(str(SOURCE), p["name"])
            kernel, symbol = module.get_function(p["name"]), module.get_global(SYMBOL).ptr
            launch = _p.launcher(kernel, p["grid"], p["block"], (*_p.pointer_args(x, out), count))
            run = _with_weights_copied(launch, symbol, w)
        return _p.configure(run, kernel, p, LESSON, PREDICTS[variant], taps=TAPS)

    return make


def _with_weights_copied(launch, symbol: int, w):
    """The timed closure of constant-cmem: copy the weights into __constant__ memory, then launch,
    both on torch's current stream (the weights are read on every call, never cached)."""
    import cupy
    import torch

    nbytes = TAPS * 4

    def run():
        stream = torch.cuda.current_stream().cuda_stream
        cupy.cuda.runtime.memcpyAsync(symbol, w.data_ptr(), nbytes, cupy.cuda.runtime.memcpyDeviceToDevice, stream)
        launch()

    return run


_p.register(LESSON, SOURCE, KERNELS, PREDICTS, WHAT, unit="cuda-core", plan=plan, mechanism=mechanism,
            factory=_factory)
