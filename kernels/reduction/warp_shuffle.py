"""The classic warp-shuffle reduction as a CuPy RawKernel (``warp_shuffle.cu`` beside this file).

Grid: enough 256-thread blocks to fill every SM (``blocks_per_sm`` each), each
thread summing a grid-stride share with 16-byte loads; one atomicAdd a block.
The closure zeroes the output, then launches (two operations on torch's stream).
"""

from pathlib import Path

from kbench.dtypes import ELEMENT_BYTES
from kbench.loader import load_helper
from kbench.registry import Unsupported, implementation

SOURCE = Path(__file__).with_suffix(".cu")
THREADS = 256
UNROLL = 4
CUDA_TYPES = {"fp32": ("float", "float"), "fp16": ("__half", "float"), "int32": ("int", "int")}

_cupy = load_helper(Path(__file__).parent.parent / "_cupy_common.py")


def plan(n: int, dtype: str, sm_count: int, blocks_per_sm: int, aligned: bool) -> dict:
    """Kernel name, grid and block for one launch (no launch at all for n = 0)."""
    if dtype not in CUDA_TYPES:
        raise Unsupported(f"{dtype}: warp-shuffle sums fp32, fp16 or int32")
    if blocks_per_sm < 1:
        raise Unsupported(f"blocks_per_sm={blocks_per_sm} must be at least 1")
    t, acc = CUDA_TYPES[dtype]
    per_load = 16 // ELEMENT_BYTES[dtype] if aligned else 1  # elements a load
    # Never more threads than loads to make: small n gets a small grid.
    blocks = min(sm_count * blocks_per_sm, max(1, _cupy.ceil_div(n, THREADS * per_load)))
    return {"name": _cupy.instance_name("reduce_sum", t, acc, aligned, UNROLL), "grid": (blocks,), "block": (THREADS,),
            "vector": aligned, "per_load": per_load}


def explain(case, params) -> dict:
    """`kbench explain reduction --impl warp-shuffle`: the launch on an H200 (aligned input), without running it."""
    from kbench.devices import by_key

    sms = by_key("h200").sms
    try:
        p = plan(case.n, case.dtype, sms, int(params["blocks_per_sm"]), aligned=True)
    except Unsupported as exc:
        return {"configuration": f"not runnable: {exc}"}
    blocks, threads = _cupy.launch_size(p)
    per_load = p["per_load"]
    loads = _cupy.ceil_div(case.n, per_load)
    return {
        "kernel": p["name"],
        "grid": f"{blocks:,} blocks of {threads} threads ({threads // 32} warps): {params['blocks_per_sm']} a SM "
                f"on {sms} SMs, capped at one thread per 16-byte load",
        "per thread": f"{loads / (blocks * threads):,.1f} 16-byte loads of {per_load} elements (grid-stride, "
                      f"{UNROLL} in flight), then 5 __shfl_down_sync steps",
        "per block": f"{threads // 32} warp partials in shared memory, summed by warp 0; 1 atomicAdd",
        "global traffic": f"{case.n * ELEMENT_BYTES[case.dtype]:,} bytes read once; {blocks:,} atomics to one "
                          f"{'fp32' if case.dtype != 'int32' else 'int32'} word",
        **_cupy.resource_figures(SOURCE, p["name"], blocks, threads),
    }


@implementation(
    "reduction", "warp-shuffle", backend="cupy", cuda=True, modules=("torch", "cupy"), unit="memory",
    dtypes=tuple(CUDA_TYPES), params={"blocks_per_sm": 8}, explain=explain,
    description="grid-stride 16-byte loads, __shfl_down_sync warp sums, one atomicAdd per block (CUDA C++)",
)
def warp_shuffle(case, inputs, out, blocks_per_sm):
    import numpy as np
    import torch

    x = inputs["x"]
    sm_count = torch.cuda.get_device_properties(x.device).multi_processor_count
    p = plan(case.n, case.dtype, sm_count, blocks_per_sm, x.data_ptr() % 16 == 0)
    kernel = _cupy.compiled(str(SOURCE), p["name"])
    args = (*_cupy.pointer_args(x), np.int64(case.n), *_cupy.pointer_args(out))

    def body():
        out.zero_()  # the blocks' atomicAdds land on zero
        if case.n:
            kernel(p["grid"], p["block"], args)

    run = _cupy.on_torch_stream(body)
    run.config = {"vector_loads": p["vector"], "unroll": UNROLL, "blocks_per_sm": blocks_per_sm,
                  **_cupy.kernel_config(kernel, p["grid"], p["block"])}
    return run
