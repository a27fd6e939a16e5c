"""Dense matrix product C = A · B, row-major A (M x K) and B (K x N), the classic CUDA matmul kernels (tiled and WMMA).

FLOPs are 2·M·N·K; the fewest bytes are A and B read once and C written once.

The correctness trials draw from three input distributions in turn: ``normal`` (N(0, 1)),
``mixed-magnitudes`` (rows of A and columns of B scaled by powers of two from 2^-3 to 2^3, so
entries of C span four decades) and ``cancellation`` (B's second half of rows is minus its first
half plus a little noise, and A's two halves of columns are equal: every dot product sums
large terms to a small result, which an accumulator narrower than fp32 loses).

The tolerance is precision-aware (:meth:`Matmul.plain`, kbench.correctness): the plain computation
is torch.matmul in the case's type with fp32 accumulation, TF32 only with ``--tf32`` (then on
inputs rounded to TF32), so an fp32 product computed on TF32 without ``--tf32`` fails.
"""

from kbench.dtypes import ELEMENT_BYTES, NAMES, torch_dtype
from kbench.errors import UserError
from kbench.precision import round_to_tf32, strict_matmul
from kbench.registry import suite
from kbench.suite import Axis, Suite


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
    distributions = ("normal", "mixed-magnitudes", "cancellation")
    trials = 3
    # Not used to judge (the plain computation sets the bound); kept for records' atol/rtol fields.
    tolerances = {name: (0.0, 0.0) for name in NAMES}

    def validate(self, case):
        for axis in ("m", "n", "k"):
            if case.values[axis] <= 0:
                raise UserError(f"--{axis} must be positive (got {case.values[axis]})")
        if case.tf32 and case.dtype != "fp32":
            raise UserError(f"--tf32 applies to fp32 only (got --dtype {case.dtype})")

    def make_inputs(self, case, seed, device, distribution="normal"):
        import torch

        gen = torch.Generator(device="cpu").manual_seed(seed)
        dtype = torch_dtype(case.dtype)
        a = torch.randn(case.m, case.k, generator=gen, dtype=torch.float32)
        b = torch.randn(case.k, case.n, generator=gen, dtype=torch.float32)
        if distribution == "mixed-magnitudes":
            a *= 2.0 ** torch.randint(-3, 4, (case.m, 1), generator=gen).float()
            b *= 2.0 ** torch.randint(-3, 4, (1, case.n), generator=gen).float()
        elif distribution == "cancellation":
            half = case.k // 2
            a[:, half : 2 * half] = a[:, :half]
            b[half : 2 * half] = -b[:half] + 2.0**-6 * b[half : 2 * half]
        elif distribution != "normal":
            raise ValueError(f"unknown matmul input distribution {distribution!r}")
        return {"a": a.to(device=device, dtype=dtype), "b": b.to(device=device, dtype=dtype)}

    def make_output(self, case, inputs):
        import torch

        return torch.empty(case.m, case.n, dtype=torch_dtype(case.dtype), device=inputs["a"].device)

    def reference(self, case, inputs):
        import torch

        return inputs["a"].to(torch.float64) @ inputs["b"].to(torch.float64)

    def plain(self, case, inputs):
        """torch.matmul in the case's type, fp32 accumulation; with --tf32 on TF32-rounded inputs."""
        import torch

        a, b = inputs["a"], inputs["b"]
        if case.tf32:
            a, b = round_to_tf32(a), round_to_tf32(b)
        with strict_matmul():
            if a.device.type == "cpu" and a.dtype != torch.float32:
                # The CPU's half-precision products may accumulate in their own type: fp32 here, rounded once.
                return (a.float() @ b.float()).to(a.dtype)
            return a @ b

    def flops(self, case):
        return 2.0 * case.m * case.n * case.k

    def min_bytes(self, case):
        return float(case.m * case.k + case.k * case.n + case.m * case.n) * ELEMENT_BYTES[case.dtype]
