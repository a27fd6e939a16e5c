"""Prefix sum, inclusive (y[i] = x[0] + ... + x[i]) or exclusive (y[i] = x[0] + ... + x[i-1]).

Memory-bound: the fewest bytes are x read once and y written once; FLOPs are n additions.

Integers are checked exactly. fp32 inputs are k / 64 for random integers |k| <= 64
(as in the reduction suite), so every prefix and every partial sum of a correct
kernel stays a multiple of 1/64 far below 2^18 and is exact in fp32 whatever the
order; the tolerance grows with n anyway (4 u32 sqrt(n)) and stays below a quarter
of the input step for every n kbench runs, so a dropped or repeated element fails.
"""

import math

from pathlib import Path

from kbench.dtypes import ELEMENT_BYTES, UNIT_ROUNDOFF
from kbench.loader import load_helper
from kbench.registry import suite
from kbench.suite import Axis, Suite

exact_sums = load_helper(Path(__file__).resolve().parent.parent / "_common" / "exact_sums.py")
DISTRIBUTIONS, INPUT_STEP = exact_sums.DISTRIBUTIONS, exact_sums.INPUT_STEP
check_length, step_multiples = exact_sums.check_length, exact_sums.step_multiples

DTYPES = ("int32", "int64", "fp32")


@suite
class Scan(Suite):
    name = "scan"
    description = "Prefix sum, inclusive or --exclusive (int32, int64 exactly; fp32)"
    axes = (
        Axis("n", int, (1 << 28,), "elements (default 2^28)"),
        Axis("dtype", str, ("int32",), "element type of x and y", choices=DTYPES),
        Axis("exclusive", bool, (False,), "y[i] sums x[0..i-1] (y[0] = 0) instead of x[0..i]"),
    )
    baseline = "torch-cumsum"
    distributions = DISTRIBUTIONS  # uniform, long runs of one sign, cancellation (../_common/exact_sums.py)
    trials = 3

    def validate(self, case):
        check_length(case.n)

    def tolerance(self, case):
        if case.dtype != "fp32":
            return 0.0, 0.0
        return min(4 * UNIT_ROUNDOFF["fp32"] * math.sqrt(max(case.n, 1)), INPUT_STEP / 4), 0.0

    def make_inputs(self, case, seed, device, distribution="uniform"):
        return {"x": step_multiples(case.n, case.dtype, device, seed, distribution)}

    def make_output(self, case, inputs):
        import torch

        return torch.empty_like(inputs["x"])

    def reference(self, case, inputs):
        import torch

        x = inputs["x"]
        exact = torch.cumsum(x.to(torch.int64 if case.dtype != "fp32" else torch.float64), 0)
        if case.exclusive:
            exact = torch.cat([exact.new_zeros(min(1, x.numel())), exact[:-1]])
        return exact.to(torch.float64)

    def flops(self, case):
        return float(case.n)

    def min_bytes(self, case):
        return 2.0 * case.n * ELEMENT_BYTES[case.dtype]
