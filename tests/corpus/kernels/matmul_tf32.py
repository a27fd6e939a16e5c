"""An fp32 matrix product on TF32 although the case did not ask for it (no --tf32): on a GPU through
cuBLAS with TF32 allowed; on a CPU, which has no TF32, on inputs rounded to TF32's 10-bit mantissa
the way tensor cores read them. About a thousand times the error of an fp32 product."""

from kbench.registry import implementation


@implementation("matmul", "cheat-tf32", backend="torch", description="fp32 on TF32 without --tf32")
def tf32_without_asking(case, inputs, out):
    import torch

    from kbench.precision import round_to_tf32

    a, b = inputs["a"], inputs["b"]
    if a.is_cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        return lambda: torch.matmul(a, b, out=out)
    return lambda: torch.matmul(round_to_tf32(a), round_to_tf32(b), out=out)
