"""The inline-PTX lesson: `ld.global.cg` and `sqrt.approx.f32` against the plain load and sqrtf.

The CUDA source is ``ptx.cu`` beside this file. ptx-cg changes only the load, ptx-cg-approx the
load and the square root, so the two effects are told apart. ``kbench run patterns --lesson ptx``.
"""

from pathlib import Path

from kbench.loader import load_helper

SOURCE = Path(__file__).with_suffix(".cu")
LESSON = "ptx"
TERMS = 32  # square roots an element: suites/patterns.py's SQRT_TERMS

_p = load_helper(Path(__file__).parent / "_patterns.py")

KERNELS = {"ptx-plain": "sqrt_sum<false, false>", "ptx-cg": "sqrt_sum<true, false>",
           "ptx-cg-approx": "sqrt_sum<true, true>"}
PREDICTS = {
    "ptx-plain": _p.Prediction("a plain load and sqrtf (sqrt.rn.f32, IEEE-rounded)"),
    "ptx-cg": _p.Prediction("an L2-only load hint changes nothing for data read once", versus="ptx-plain",
                            low=0.9, high=1.1),
    "ptx-cg-approx": _p.Prediction("sqrt.approx.f32 is one MUFU instruction, sqrt.rn a corrected sequence",
                                   versus="ptx-plain", low=1.1),
}
WHAT = {
    "ptx-plain": "sum of 32 square roots an element: plain load, sqrtf",
    "ptx-cg": "the same with inline PTX ld.global.cg.f32 for the load",
    "ptx-cg-approx": "the same with inline PTX ld.global.cg.f32 and sqrt.approx.f32",
}
PTX = {"ptx-plain": "ld.global(.nc).f32, sqrt.rn.f32", "ptx-cg": "ld.global.cg.f32, sqrt.rn.f32",
       "ptx-cg-approx": "ld.global.cg.f32, sqrt.approx.f32"}


def plan(case, variant: str) -> dict:
    """The launch for one case (raises Unsupported for another lesson): kernel name, grid, block."""
    _p.require(case, LESSON)
    return _p.linear_plan(KERNELS[variant], _p.elements(case))


def mechanism(case, variant: str) -> dict:
    return {"PTX": f"{PTX[variant]}; {TERMS} square roots an element"}


def arguments(case, inputs, out) -> tuple:
    import numpy as np

    return (*_p.pointer_args(inputs["x"], out), np.int64(_p.elements(case)), np.int32(TERMS))


_p.register(LESSON, SOURCE, KERNELS, PREDICTS, WHAT, unit="cuda-core", plan=plan, mechanism=mechanism,
            arguments=arguments, config=lambda variant: {"terms": TERMS, "ptx": PTX[variant]})
