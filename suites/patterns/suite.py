"""The classic CUDA memory-access lessons, each as two or three kernels side by side.

`kbench run patterns --lesson transpose` (or access, divergence, constant, ptx) times a lesson's
variants on the same problem; each row shows its speedup over the lesson's plain variant (the
baseline, chosen per case by :meth:`Patterns.baseline_for`) and, beside it, what the lesson
predicts and whether the measured ratio bears it out on this GPU.

Sizes: ``--n`` is the matrix side of the two 2-D lessons (transpose and access: n x n) and gives
the 1-D lessons n·n elements, so one ``--n`` moves the same bytes in every lesson
(the default 8192: 2^26 fp32 elements, 256 MiB an array).

| lesson     | inputs                        | output          | FLOPs per element        |
| ---------- | ----------------------------- | --------------- | ------------------------ |
| transpose  | a (n x n)                     | a^T (n x n)     | 0                        |
| access     | a (n x n)                     | a copy (n x n)  | 0                        |
| divergence | x (n·n) in (0.05, 0.95)       | f(x) (n·n)      | 2 R (even i), 3 R (odd)  |
| constant   | x (n·n + 255), w (256)        | conv (n·n)      | 2 x 256                  |
| ptx        | x (n·n) in [1, 2)             | Σ sqrt (n·n)    | 3 T                      |

divergence: even elements take R = 128 steps of y = y·(1 - 2^-10) + 2^-10, odd ones R steps of
y = y - y²·2^-10 (two different paths, each long enough that the kernel is compute-bound, so a
warp that runs both shows it). constant: out[i] = Σ_j x[i + j]·w[j], j < 256 (the classic
``convWeights[256]``). ptx: out[i] = Σ_{r < T} sqrt(x[i] + r), T = 32.
The fewest bytes are every input read once and the output written once.
"""

import math
from pathlib import Path

from kbench.dtypes import UNIT_ROUNDOFF
from kbench.errors import UserError
from kbench.registry import suite
from kbench.loader import load_helper
from kbench.suite import Axis, Column, Suite

lessons = load_helper(Path(__file__).resolve().parent / "lessons.py")

LESSONS = ("transpose", "access", "divergence", "constant", "ptx")
# Each lesson's plain variant: its speedups (and most predictions) are relative to it.
BASELINES = {"transpose": "transpose-naive", "access": "access-strided", "divergence": "divergence-lane",
             "constant": "constant-global", "ptx": "ptx-plain"}
TEACHES = {
    "transpose": "a transpose through a shared-memory tile makes both global accesses coalesced; "
                 "padding the tile by one column removes the 32-way bank conflict of its column read",
    "access": "a warp whose lanes read consecutive addresses needs 4 sectors of 32 bytes; "
              "lanes a row apart need 32 (8x the sectors for the same 128 useful bytes)",
    "divergence": "a branch that splits a warp runs both paths one after the other (up to 2x); "
                  "a branch on the warp index never splits one",
    "constant": "__constant__ memory broadcasts one address to the whole warp from its cache, "
                "with the weight as an operand of the FMA; from global memory each weight is a load",
    "ptx": "inline PTX: sqrt.approx.f32 is one MUFU instruction where sqrtf (sqrt.rn.f32) is a "
           "corrected sequence; ld.global.cg caches in L2 only",
}
DIVERGENCE_ROUNDS = 128  # R: steps of each path (kernels/patterns/divergence.py launches the same)
CONV_TAPS = 256  # the classic convWeights[256] (kernels/patterns/constant.cu: conv_weights[256])
SQRT_TERMS = 32  # T: square roots summed per element (kernels/patterns/ptx.py)
MAX_N = 32768  # n·n = 2^30 elements: 4 GiB an fp32 array (and 8 GiB the float64 reference)
FP32_ROUNDOFF = UNIT_ROUNDOFF["fp32"]


def one_dimensional(case) -> bool:
    return case.lesson in ("divergence", "constant", "ptx")


def elements(case) -> int:
    """Elements of the output: n·n for every lesson."""
    return case.n * case.n


@suite
class Patterns(Suite):
    name = "patterns"
    description = ("The classic CUDA memory-access lessons side by side: transpose, access, divergence, "
                   "constant, ptx (--lesson), each against its plain variant, with what the lesson predicts")
    axes = (
        Axis("lesson", str, LESSONS, "which lesson's kernels to time", choices=LESSONS),
        Axis("n", int, (8192,), "matrix side (transpose, access: n x n); the other lessons take n·n elements"),
        Axis("dtype", str, ("fp32",), "element type", choices=("fp32",)),
    )
    baseline = ""  # one per lesson: baseline_for
    trials = 3

    def baseline_for(self, case):
        return BASELINES[case.lesson]

    def validate(self, case):
        if case.n <= 0:
            raise UserError(f"--n must be positive (got {case.n})")
        if case.n > MAX_N:
            raise UserError(f"--n must be at most {MAX_N} (got {case.n}: n·n = {elements(case):,} elements, "
                            f"{4 * elements(case) / 2**30:.0f} GiB an fp32 array)")

    def tolerance(self, case):
        """Transpose and access copy values: exact. divergence: every step of either path changes the
        error by a factor of at most 1 and adds one fp32 rounding (<= u·|y|, |y| < 1), so R·u bounds it.
        constant: 256 fp32 FMAs, partial sums of size about 1: 256·u. ptx: T positive terms, each
        within a few ulp (sqrt.approx too), summed in fp32: relative T·u. Each with a factor of 4."""
        u = FP32_ROUNDOFF
        if case.lesson in ("transpose", "access"):
            return 0.0, 0.0
        if case.lesson == "divergence":
            return 4 * DIVERGENCE_ROUNDS * u, 0.0
        if case.lesson == "constant":
            return 4 * CONV_TAPS * u, 4 * u
        return 0.0, 4 * SQRT_TERMS * u

    # --- data ------------------------------------------------------------
    def make_inputs(self, case, seed, device):
        import torch

        gen = torch.Generator(device="cpu").manual_seed(seed)
        n, count = case.n, elements(case)
        if case.lesson in ("transpose", "access"):
            tensors = {"a": torch.randn(n, n, generator=gen)}
        elif case.lesson == "divergence":
            tensors = {"x": 0.05 + 0.9 * torch.rand(count, generator=gen)}
        elif case.lesson == "constant":
            tensors = {"x": torch.randn(count + CONV_TAPS - 1, generator=gen),
                       "w": torch.randn(CONV_TAPS, generator=gen) / math.sqrt(CONV_TAPS)}
        else:
            tensors = {"x": 1.0 + torch.rand(count, generator=gen)}
        return {name: t.to(device=device, dtype=torch.float32) for name, t in tensors.items()}

    def make_output(self, case, inputs):
        import torch

        device = next(iter(inputs.values())).device
        shape = (elements(case),) if one_dimensional(case) else (case.n, case.n)
        return torch.empty(shape, dtype=torch.float32, device=device)

    def reference(self, case, inputs):
        import torch

        if case.lesson == "transpose":
            return inputs["a"].to(torch.float64).t().contiguous()
        if case.lesson == "access":
            return inputs["a"].to(torch.float64)
        x = inputs["x"].to(torch.float64)
        if case.lesson == "divergence":
            out = torch.empty_like(x)
            even, odd = x[0::2].clone(), x[1::2].clone()
            step = 2.0**-10
            for _ in range(DIVERGENCE_ROUNDS):
                even = even * (1.0 - step) + step
                odd = odd - odd * odd * step
            out[0::2], out[1::2] = even, odd
            return out
        if case.lesson == "constant":
            count = elements(case)
            out = torch.zeros(count, dtype=torch.float64, device=x.device)
            for j, w in enumerate(inputs["w"].to(torch.float64).tolist()):
                out.add_(x[j:j + count], alpha=w)
            return out
        out = torch.zeros_like(x)
        for r in range(SQRT_TERMS):
            out += torch.sqrt(x + r)
        return out

    # --- cost model ------------------------------------------------------
    def flops(self, case):
        count = elements(case)
        if case.lesson in ("transpose", "access"):
            return 0.0
        if case.lesson == "divergence":
            evens = (count + 1) // 2
            return float(DIVERGENCE_ROUNDS * (2 * evens + 3 * (count - evens)))
        if case.lesson == "constant":
            return 2.0 * CONV_TAPS * count
        return 3.0 * SQRT_TERMS * count  # an add, the square root and the sum's add

    def min_bytes(self, case):
        count = elements(case)
        if case.lesson == "constant":
            return 4.0 * ((count + CONV_TAPS - 1) + CONV_TAPS + count)
        return 4.0 * 2 * count

    def explain(self, case):
        count = elements(case)
        shape = f"{case.n} x {case.n}" if not one_dimensional(case) else f"{count:,} elements"
        figures = {
            "lesson": case.lesson,
            "what it teaches": TEACHES[case.lesson],
            "problem": f"{shape}, fp32 ({4 * count:,} bytes an array)",
            "baseline (speedups are relative to it)": BASELINES[case.lesson],
        }
        figures.update(super().explain(case))
        return figures

    def columns(self, records):
        """The lesson's prediction for each row and whether this GPU bears it out."""
        cells = [lessons.cell(r, records) for r in records]
        if not any(cells):
            return []
        return [Column("lesson predicts: measured", tuple(lessons.styled(c) for c in cells))]

    def summary_lines(self, records):
        """Each prediction in full and, when measured, whether it holds on this GPU (some of the
        classic lessons no longer do on recent ones)."""
        predicted = lessons.lines(records)
        return ["what the lessons predict:", *(f"  {line}" for line in predicted)] if predicted else []
