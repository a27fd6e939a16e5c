"""Sum of a vector, s = x[0] + ... + x[n-1]: the classic warp-shuffle reduction.

Memory-bound: the fewest bytes are x read once (and the one output written);
FLOPs are n - 1 additions, counted as n.

Inputs are exactly summable: fp32 and fp16 values are k / 64 for integers
|k| <= 64 (random signs), and int32 values are integers in [-1000, 1000]. A
random walk of n such steps stays far below 2^18 (where fp32 stops holding
every multiple of 1/64) for any n kbench runs, so every partial sum a correct
kernel forms, in any order, with fp32 accumulation, is exact: the result must
equal the float64 reference to within a quarter of the input step. Dropping,
repeating or half-precision-accumulating elements all fail.
"""

from pathlib import Path

from kbench.dtypes import ELEMENT_BYTES, torch_dtype
from kbench.loader import load_helper
from kbench.registry import suite
from kbench.suite import Axis, Suite

exact_sums = load_helper(Path(__file__).resolve().parent.parent / "_common" / "exact_sums.py")
DISTRIBUTIONS, INPUT_STEP = exact_sums.DISTRIBUTIONS, exact_sums.INPUT_STEP
check_length, step_multiples = exact_sums.check_length, exact_sums.step_multiples

DTYPES = ("fp32", "fp16", "int32")


def output_dtype(dtype: str) -> str:
    """What the sum is returned as: fp16 input accumulates (and returns) fp32."""
    return "int32" if dtype == "int32" else "fp32"


@suite
class Reduction(Suite):
    name = "reduction"
    description = "Sum of a vector (fp32, fp16 accumulated in fp32, or int32)"
    axes = (
        Axis("n", int, (1 << 28,), "elements (default 2^28: 1 GiB of fp32)"),
        Axis("dtype", str, ("fp32",), "element type of x", choices=DTYPES),
    )
    baseline = "cupy-sum"
    distributions = DISTRIBUTIONS  # uniform, long runs of one sign, cancellation (../_common/exact_sums.py)
    trials = 3

    def validate(self, case):
        check_length(case.n)

    def tolerance(self, case):
        # Exact in any order (module docstring); a quarter step leaves room for nothing else.
        return (0.0, 0.0) if case.dtype == "int32" else (INPUT_STEP / 4, 0.0)

    def make_inputs(self, case, seed, device, distribution="uniform"):
        return {"x": step_multiples(case.n, case.dtype, device, seed, distribution)}

    def make_output(self, case, inputs):
        import torch

        return torch.empty((), dtype=torch_dtype(output_dtype(case.dtype)), device=inputs["x"].device)

    def reference(self, case, inputs):
        import torch

        return inputs["x"].to(torch.float64).sum()

    def flops(self, case):
        return float(case.n)

    def min_bytes(self, case):
        return float(case.n * ELEMENT_BYTES[case.dtype] + ELEMENT_BYTES[output_dtype(case.dtype)])

    def explain(self, case):
        figures = super().explain(case)
        figures["input"] = f"{case.n:,} x {case.dtype} = {case.n * ELEMENT_BYTES[case.dtype] / 2**20:,.1f} MiB"
        return figures
