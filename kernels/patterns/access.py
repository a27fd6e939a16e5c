"""The access lesson: the same n x n copy with each warp along a row (coalesced) or down a column (strided).

The CUDA source is ``access.cu`` beside this file. ``kbench run patterns --lesson access``.
"""

from pathlib import Path

from kbench.loader import load_helper

SOURCE = Path(__file__).with_suffix(".cu")
LESSON = "access"

_p = load_helper(Path(__file__).parent / "_patterns.py")

KERNELS = {"access-strided": "copy_access<true>", "access-coalesced": "copy_access<false>"}
PREDICTS = {
    "access-strided": _p.Prediction("a warp's lanes are a row apart: 32 sectors for 128 useful bytes"),
    "access-coalesced": _p.Prediction("4 sectors a warp access instead of 32 (up to 8x)",
                                      versus="access-strided", low=4.0),
}
WHAT = {
    "access-strided": "n x n copy, the lanes of a warp down a column (stride n)",
    "access-coalesced": "n x n copy, the lanes of a warp along a row (consecutive addresses)",
}


def plan(case, variant: str) -> dict:
    """The launch for one case (raises Unsupported for another lesson): kernel name, grid, block."""
    _p.require(case, LESSON)
    return _p.tile_plan(KERNELS[variant], case.n)


def warp_sectors(variant: str, n: int) -> int:
    """32-byte sectors one warp's load touches (the first warp of the first block)."""
    return _p.warp_sectors(n, strided=variant == "access-strided")


def mechanism(case, variant: str) -> dict:
    s = warp_sectors(variant, case.n)
    return {"a warp's load and store": f"{s} sectors of 32 bytes for {4 * min(32, case.n)} useful bytes "
                                       f"({32 * s / (4 * min(32, case.n)):.0f}x the bytes moved)"}


def arguments(case, inputs, out) -> tuple:
    import numpy as np

    return (*_p.pointer_args(inputs["a"], out), np.int32(case.n))


_p.register(LESSON, SOURCE, KERNELS, PREDICTS, WHAT, unit="memory", plan=plan, mechanism=mechanism,
            arguments=arguments, config=lambda variant: {"tile": _p.TILE})
