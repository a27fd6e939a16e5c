"""The divergence lesson: a branch on lane parity (every warp runs both paths) against the same work
branched on warp parity (each warp runs one path).

The CUDA source is ``divergence.cu`` beside this file. ``kbench run patterns --lesson divergence``.
"""

from pathlib import Path

from kbench.loader import load_helper

SOURCE = Path(__file__).with_suffix(".cu")
LESSON = "divergence"
ROUNDS = 128  # steps of each path: suites/patterns.py's DIVERGENCE_ROUNDS (its reference takes as many)

_p = load_helper(Path(__file__).parent / "_patterns.py")

KERNELS = {"divergence-lane": "divergence<false>", "divergence-warp": "divergence<true>"}
PREDICTS = {
    "divergence-lane": _p.Prediction("a branch on lane parity: every warp runs both paths, half its lanes idle"),
    "divergence-warp": _p.Prediction("each warp runs one path, not both (the lesson: up to 2x)",
                                     versus="divergence-lane", low=1.5, high=2.5),
}
WHAT = {
    "divergence-lane": "two 128-step paths chosen by the element's (the lane's) parity",
    "divergence-warp": "the same two paths, even elements in one warp and odd in the next, chosen by warp parity",
}


def element(variant: str, thread: int) -> int:
    """The element a (global) thread index takes."""
    if variant == "divergence-lane":
        return thread
    return (thread & ~63) + 2 * (thread & 31) + ((thread >> 5) & 1)


def paths_per_warp(variant: str, warp: int = 0) -> int:
    """How many of the two paths warp ``warp``'s 32 lanes take (2: it diverges)."""
    return len({element(variant, 32 * warp + lane) % 2 for lane in range(32)})


def plan(case, variant: str) -> dict:
    """The launch for one case (raises Unsupported for another lesson): kernel name, grid, block."""
    _p.require(case, LESSON)
    return _p.linear_plan(KERNELS[variant], _p.elements(case))  # 256 threads: a multiple of 64, as it must be


def mechanism(case, variant: str) -> dict:
    return {"paths a warp runs": f"{paths_per_warp(variant)} of 2, {ROUNDS} steps each",
            "memory": "each warp reads every other element of 64 (the other warp of the pair the rest)"
                      if variant == "divergence-warp" else "each warp reads 32 consecutive elements"}


def arguments(case, inputs, out) -> tuple:
    import numpy as np

    return (*_p.pointer_args(inputs["x"], out), np.int64(_p.elements(case)), np.int32(ROUNDS))


_p.register(LESSON, SOURCE, KERNELS, PREDICTS, WHAT, unit="cuda-core", plan=plan, mechanism=mechanism,
            arguments=arguments, config=lambda variant: {"rounds": ROUNDS})
