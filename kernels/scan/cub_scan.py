"""CUB's own device scan, called from Python: package ``cuda-cccl`` (CUDA Core Compute Libraries).

``cuda.compute`` (``cuda.cccl.parallel.experimental`` in its first releases) builds CUB's
``DeviceScan`` for the arrays' types when the scanner is made (NVRTC, seconds, never timed): the same
single-pass decoupled look-back scan that torch.cumsum reaches through its own build of CUB, here
with CCCL's current tuning for the GPU. It is optional: without the package ``cub-scan`` is a SKIP
that names the module (``pip install cuda-cccl``; packages installed with ``pip install --target
DIR`` are found through ``$KBENCH_SITE_DIRS``).

The scanner and its temporary storage are made once, outside the timed closure, which makes one
call: CUB's kernels on torch's current stream, handed over through the ``__cuda_stream__``
protocol. Exclusive scans start from 0 (CUB's init value), written straight into the output.
"""

import inspect

from kbench.registry import Unsupported, implementation

NUMPY_TYPES = {"int32": "int32", "int64": "int64", "fp32": "float32"}


def scan_module():
    """The module holding make_inclusive_scan / make_exclusive_scan: cuda.compute, or the older
    cuda.cccl.parallel.experimental; Unsupported when the installed cuda-cccl has neither."""
    import importlib

    for name in ("cuda.compute", "cuda.cccl.parallel.experimental"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "make_inclusive_scan"):  # cuda.compute without CUDA bindings raises on access
            return module
    raise Unsupported("cuda-cccl is installed but has neither cuda.compute nor cuda.cccl.parallel.experimental "
                      "(pip install -U cuda-cccl)")


def sum_operator(module):
    """Addition as the module takes it: OpKind.PLUS where it has one (CUB's own functor, nothing
    compiled from Python), else a Python function that it compiles with Numba."""
    op_kind = getattr(module, "OpKind", None)
    if op_kind is not None and hasattr(op_kind, "PLUS"):
        return op_kind.PLUS

    def add(a, b):
        return a + b

    return add


def takes_op(scanner) -> "bool | None":
    """Whether the scanner's call takes the operator again (cuda.compute of 2026: (temp, d_in, d_out, op,
    num_items, init, stream)) or not (earlier: (temp, d_in, d_out, num_items, init, stream))."""
    try:
        return "op" in inspect.signature(type(scanner).__call__).parameters
    except (TypeError, ValueError):  # a compiled callable without a signature: ask by trying
        return None


class TorchStream:
    """A CUDA stream handle through the __cuda_stream__ protocol (version 0), which cuda.compute reads."""

    def __init__(self, handle: int):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


def make_call(scanner, op, takes):
    """call(temp, d_in, d_out, num_items, init, stream) for either calling convention (``takes``: whether
    the scanner takes the operator; None: not known yet, found out at the first call)."""
    state = {"takes": takes}

    def call(temp, d_in, d_out, num_items, init, stream):
        if state["takes"] is not False:  # cuda.compute 1.x takes its arguments by keyword only
            try:
                result = scanner(temp_storage=temp, d_in=d_in, d_out=d_out, op=op, num_items=num_items,
                                 init_value=init, stream=stream)
            except TypeError:
                if state["takes"]:
                    raise
                state["takes"] = False
            else:
                state["takes"] = True
                return result
        return scanner(temp, d_in, d_out, num_items, init, stream)

    return call


def build_scanner(make, d_in, d_out, op, init):
    """The scanner for these arrays: cuda.compute 1.x's makers take keywords only (d_in, d_out, op,
    init_value), the earlier ones their arguments in that order (the last named h_init)."""
    try:
        return make(d_in=d_in, d_out=d_out, op=op, init_value=init)
    except TypeError:
        return make(d_in, d_out, op, init)


@implementation(
    "scan", "cub-scan", backend="cuda-cccl", cuda=True, modules=("torch", "cupy", "cuda.cccl"), unit="memory",
    dtypes=tuple(NUMPY_TYPES),
    description="CUB DeviceScan through cuda-cccl's cuda.compute (optional; pip install cuda-cccl)",
)
def cub_scan(case, inputs, out):
    import cupy
    import numpy as np
    import torch

    module = scan_module()
    x, y = cupy.from_dlpack(inputs["x"]), cupy.from_dlpack(out)
    init = np.zeros(1, dtype=NUMPY_TYPES[case.dtype])
    op = sum_operator(module)
    make = module.make_exclusive_scan if case.exclusive else module.make_inclusive_scan
    scanner = build_scanner(make, x, y, op, init)  # builds CUB's kernels for these types (NVRTC): never timed
    call = make_call(scanner, op, takes_op(scanner))
    stream = TorchStream(torch.cuda.current_stream().cuda_stream)
    temp_bytes = call(None, x, y, case.n, init, stream)  # a size query: no work on the GPU
    temp = cupy.empty(max(int(temp_bytes), 1), dtype=np.uint8)

    def run():
        if case.n:
            call(temp, x, y, case.n, init, TorchStream(torch.cuda.current_stream().cuda_stream))
        return None

    version = getattr(module, "__version__", None)
    if version is None:
        import cuda.cccl

        version = getattr(cuda.cccl, "__version__", "unknown")
    run.config = {"cuda-cccl": str(version), "api": module.__name__, "temp_storage_bytes": int(temp_bytes)}
    return run
