"""Dense matrix product C = A · B, row-major A (M x K) and B (K x N), the second seed text's kernels.

FLOPs are 2·M·N·K; the fewest bytes are A and B read once and C written once.
"""

import math

from kbench.dtypes import ELEMENT_BYTES, NAMES, UNIT_ROUNDOFF, torch_dtype
from kbench.errors import UserError
from kbench.registry import suite
from kbench.suite import Axis, Suite

# Unit roundoff of TF32's 10-bit mantissa (the element types' are in kbench.dtypes).
TF32_ROUNDOFF = 2.0**-11
FP32_ROUNDOFF = UNIT_ROUNDOFF["fp32"]
# |accumulation error| / (u32·K) that a correct fp32 accumulator stays under (see Matmul.tolerance).
ACCUMULATION_TAIL = 6


@suite
class Matmul(Suite):
    name = "matmul"
    description = "Matrix product C = A·B, A (M x K) and B (K x N) row-major"
    axes = (
        Axis("m", int, (1024,), "rows of A and C"),
        Axis("n", int, (1024,), "columns of B and C"),
        Axis("k", int, (1024,), "columns of A, rows of B (the reduction)"),
        Axis("dtype", str, ("fp16",), "element type of A, B and C", choices=NAMES),
        Axis("tf32", bool, (False,), "allow TF32 tensor cores for fp32 (cublas, triton)"),
    )
    baseline = "cublas"
    trials = 3

    def validate(self, case):
        for axis in ("m", "n", "k"):
            if case.values[axis] <= 0:
                raise UserError(f"--{axis} must be positive (got {case.values[axis]})")
        if case.tf32 and case.dtype != "fp32":
            raise UserError(f"--tf32 applies to fp32 only (got --dtype {case.dtype})")

    def tolerance(self, case):
        """Scaled with K. Inputs are N(0, 1), so entries of C are about sqrt(K) in size.

        The reference uses the same (already rounded) inputs, so a correct kernel
        differs by: rounding C to its type (relative, u_out; 4 u_out sqrt(K));
        fp32 accumulation, a random walk of K roundings of partial sums of size
        up to sqrt(K) (about u32·K); and with TF32 the inputs' 10-bit mantissas
        (u_tf32·sqrt(K)).

        The accumulation term is a tail bound over every output: sequential fp32
        FMA accumulation of 2^20 such dot products (K = 4096, simulated in float64)
        gave |err| / (u32·K) quantiles of 1.0 at 1 - 1e-2, 2.3 at 1 - 1e-4 and 3.4
        at 1 - 1e-6, about +0.6 a decade, and cuBLAS itself exceeded 4 u32·K on one
        of 16.8M outputs at 4096^3 fp32 on the H200. 6 u32·K holds to about 1e-10
        per output; a TF32 product (u_tf32 sqrt(K), 30x larger at K = 4096) still fails.
        """
        u_out = UNIT_ROUNDOFF[case.dtype]
        atol = 4 * u_out * math.sqrt(case.k) + ACCUMULATION_TAIL * FP32_ROUNDOFF * case.k
        if case.tf32:
            atol += 8 * TF32_ROUNDOFF * math.sqrt(case.k)
        return atol, 4 * u_out

    def make_inputs(self, case, seed, device):
        import torch

        gen = torch.Generator(device="cpu").manual_seed(seed)
        dtype = torch_dtype(case.dtype)
        a = torch.randn(case.m, case.k, generator=gen, dtype=torch.float32)
        b = torch.randn(case.k, case.n, generator=gen, dtype=torch.float32)
        return {"a": a.to(device=device, dtype=dtype), "b": b.to(device=device, dtype=dtype)}

    def make_output(self, case, inputs):
        import torch

        return torch.empty(case.m, case.n, dtype=torch_dtype(case.dtype), device=inputs["a"].device)

    def reference(self, case, inputs):
        import torch

        return inputs["a"].to(torch.float64) @ inputs["b"].to(torch.float64)

    def flops(self, case):
        return 2.0 * case.m * case.n * case.k

    def min_bytes(self, case):
        return float(case.m * case.k + case.k * case.n + case.m * case.n) * ELEMENT_BYTES[case.dtype]
