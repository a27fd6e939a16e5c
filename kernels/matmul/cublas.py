"""The peer: torch.matmul, which is cuBLAS on a GPU (and MKL/oneDNN-style CPU kernels on the CPU).

TF32 is off for fp32 unless the case asks for it (`--tf32`), so fp32 is compared
with fp32 arithmetic.
"""

from kbench.registry import implementation


@implementation("matmul", "cublas", backend="torch", description="torch.matmul (cuBLAS on GPU), TF32 only with --tf32")
def cublas(case, inputs, out):
    import torch

    # Global to this (per-implementation) worker process, like the SDPA pinning.
    torch.backends.cuda.matmul.allow_tf32 = bool(case.tf32)
    a, b = inputs["a"], inputs["b"]

    def run():
        torch.matmul(a, b, out=out)

    run.config = {"allow_tf32": bool(case.tf32), "torch": torch.__version__}
    return run
