"""The transpose lesson: naive, a shared-memory tile, and the tile padded by one column (bank conflicts).

The CUDA source is ``transpose.cu`` beside this file (compiled at run time with NVRTC through
``cupy.RawModule``); all three kernels move 32 x 32 tiles with 32 x 8 threads and differ only in
the lesson's point. ``kbench run patterns --lesson transpose``.
"""

from pathlib import Path

from kbench.loader import load_helper

SOURCE = Path(__file__).with_suffix(".cu")
LESSON = "transpose"

_p = load_helper(Path(__file__).parent / "_patterns.py")

KERNELS = {"transpose-naive": "transpose_naive", "transpose-smem": "transpose_tiled<0>",
           "transpose-padded": "transpose_tiled<1>"}
PAD = {"transpose-smem": 0, "transpose-padded": 1}
PREDICTS = {
    "transpose-naive": _p.Prediction("coalesced reads, column writes (a warp's store touches 32 sectors)"),
    "transpose-smem": _p.Prediction("both global accesses coalesced; the tile's column read is a 32-way bank "
                                    "conflict", versus="transpose-naive", low=1.1),
    "transpose-padded": _p.Prediction("tile[32][33]: no bank conflicts, near a copy's bandwidth",
                                      versus="transpose-smem", low=1.1),
}


def plan(case, variant: str) -> dict:
    """The launch for one case (raises Unsupported for another lesson): kernel name, grid, block."""
    _p.require(case, LESSON)
    return _p.tile_plan(KERNELS[variant], case.n)


def column_read_conflict(pad: int, column: int = 0) -> int:
    """Bank-conflict ways of one warp reading tile[lane][column] from a 32 x (32 + pad) float tile."""
    return _p.bank_conflict_ways([lane * (_p.TILE + pad) + column for lane in range(32)])


def store_sectors(variant: str, n: int) -> int:
    """32-byte sectors of one warp's store to `out` (the first warp of the first block); the naive
    transpose's lane x writes out[x][y]: rows n floats apart."""
    return _p.warp_sectors(n, strided=variant == "transpose-naive")


def mechanism(case, variant: str) -> dict:
    figures = {"global accesses of a warp": f"load 4 sectors (a row), store {store_sectors(variant, case.n)} "
                                            f"sectors of 32 bytes for its 128 bytes"}
    if variant in PAD:
        ways = column_read_conflict(PAD[variant])
        figures["shared-memory tile"] = (
            f"float tile[32][{32 + PAD[variant]}]: the column read tile[lane][c] is "
            + ("conflict-free (1 wavefront)" if ways == 1 else f"a {ways}-way bank conflict ({ways} wavefronts)"))
    return figures


def arguments(case, inputs, out) -> tuple:
    import numpy as np

    return (*_p.pointer_args(inputs["a"], out), np.int32(case.n))


WHAT = {
    "transpose-naive": "transpose, 32 x 8 threads a 32 x 32 tile, straight from global to global",
    "transpose-smem": "transpose through a 32 x 32 shared-memory tile",
    "transpose-padded": "transpose through a shared-memory tile padded to 32 x 33",
}

_p.register(LESSON, SOURCE, KERNELS, PREDICTS, WHAT, unit="memory", plan=plan, mechanism=mechanism,
            arguments=arguments, config=lambda variant: {"tile": _p.TILE, "pad": PAD.get(variant)})
