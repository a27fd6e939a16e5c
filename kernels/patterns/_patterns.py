"""Shared set-up of the patterns kernels: which lesson a kernel belongs to, launch geometry, what the
lesson predicts (shown beside the measured ratio), and `kbench explain`'s figures.

A private helper (the loader skips `_` files); kernel files load it with
``kbench.loader.load_helper``. Everything here is plain Python,
tested on the CPU; compiling and launching come from ``kernels/_cupy_common.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kbench.loader import load_helper
from kbench.registry import Unsupported

_cupy = load_helper(Path(__file__).parent.parent / "_cupy_common.py")
compiled, compiled_module, launcher = _cupy.compiled, _cupy.compiled_module, _cupy.launcher
kernel_config, pointer_args, ceil_div = _cupy.kernel_config, _cupy.pointer_args, _cupy.ceil_div

THREADS = 256  # the 1-D lessons' block (a multiple of 64: divergence-warp pairs warps)
TILE, ROWS = 32, 8  # the 2-D lessons: a 32 x 32 tile per block of 32 x 8 threads, 4 rows a thread
MAX_GRID_X = 2**31 - 1
MAX_GRID_YZ = 65535
SECTOR = 32  # bytes: the unit a warp's global access is served in
BANKS = 32  # shared-memory banks of 4 bytes


def elements(case) -> int:
    return case.n * case.n


# --- which lesson ------------------------------------------------------------------------

def lesson_only(lesson: str):
    """A `belongs` check: other lessons' cases are SKIPs, decided before any worker starts, and counted
    under each lesson's table rather than listed in it."""

    def belongs(case) -> str | None:
        if case.lesson != lesson:
            return f"{lesson} lesson only (this case is --lesson {case.lesson})"
        return None

    return belongs


def require(case, lesson: str) -> None:
    """In the factory too: a call for another lesson's case raises Unsupported (a SKIP with the reason)."""
    reason = lesson_only(lesson)(case)
    if reason:
        raise Unsupported(reason)
    if case.dtype != "fp32":
        raise Unsupported(f"{case.dtype}: the patterns kernels are fp32 only")


# --- what the lesson predicts -------------------------------------------------------------

@dataclass(frozen=True)
class Prediction:
    """What a lesson says about one variant: median(versus) / median(this) in [low, high]
    (None: unbounded); a baseline has no versus, only its why."""

    why: str
    versus: str | None = None
    low: float | None = None
    high: float | None = None

    @property
    def text(self) -> str:
        if self.versus is None:
            return f"baseline: {self.why}"
        if self.high is None:
            span = f">= {self.low:g}x"
        elif self.low is None:
            span = f"<= {self.high:g}x"
        else:
            span = f"{self.low:g}-{self.high:g}x"
        return f"{span} vs {self.versus}: {self.why}"

    def config(self) -> dict:
        """run.config's entries, which `kbench run`'s table shows beside the measured ratio."""
        entries = {"lesson_predicts": self.text}
        if self.versus is not None:
            entries["lesson_check"] = {"versus": self.versus, "low": self.low, "high": self.high}
        return entries


def describe(what: str, prediction: Prediction) -> str:
    """An implementation's description for `kbench list`: what it is and what the lesson predicts."""
    return f"{what}. Lesson predicts: {prediction.text}"


# --- launch geometry ----------------------------------------------------------------------

def tile_plan(name: str, n: int) -> dict:
    """The 2-D lessons: a block of 32 x 8 threads per 32 x 32 tile of the n x n matrix."""
    grid = (ceil_div(n, TILE), ceil_div(n, TILE))
    if grid[1] > MAX_GRID_YZ:
        raise Unsupported(f"grid {grid} exceeds CUDA's limit of 65535 blocks in y")
    return {"name": name, "grid": grid, "block": (TILE, ROWS)}


def linear_plan(name: str, count: int) -> dict:
    """The 1-D lessons: one element per thread, blocks of 256."""
    grid = (ceil_div(count, THREADS),)
    if grid[0] > MAX_GRID_X:
        raise Unsupported(f"{count:,} elements need {grid[0]:,} blocks (CUDA allows 2^31 - 1)")
    return {"name": name, "grid": grid, "block": (THREADS,)}


def configure(run, kernel, plan: dict, lesson: str, prediction: Prediction, **extra):
    run.config = {"lesson": lesson, **prediction.config(), **extra,
                  **kernel_config(kernel, plan["grid"], plan["block"])}
    return run


# --- the lessons' arithmetic, for `kbench explain` (and tested on the CPU) ----------------------

def sectors(byte_addresses) -> int:
    """Distinct 32-byte sectors one warp access touches."""
    return len({a // SECTOR for a in byte_addresses})


def warp_sectors(n: int, strided: bool) -> int:
    """Sectors one warp's access touches in an n x n float matrix (the first warp of the first block):
    lane x at row x (strided: rows n floats apart) or at column x of one row (consecutive)."""
    return sectors(4 * lane * (n if strided else 1) for lane in range(min(32, n)))


def bank_conflict_ways(word_addresses) -> int:
    """Most distinct 4-byte words one shared-memory bank must serve for one warp access (1: no conflict;
    lanes reading the same word are a broadcast, not a conflict)."""
    per_bank: dict[int, set] = {}
    for word in word_addresses:
        per_bank.setdefault(word % BANKS, set()).add(word)
    return max(len(words) for words in per_bank.values())


def explain_launch(case, plan: dict, source: Path, prediction: Prediction, mechanism: dict) -> dict:
    """`kbench explain patterns`: launch, the lesson's mechanism, ptxas resources and occupancy on an H200."""
    blocks, threads = _cupy.launch_size(plan)
    return {
        "kernel": plan["name"],
        "grid": f"{tuple(plan['grid'])} = {blocks:,} blocks of {threads} threads ({threads // 32} warps)",
        "lesson predicts": prediction.text,
        **mechanism,
        **_cupy.resource_figures(source, plan["name"], blocks, threads),
    }


def register(lesson: str, source: Path, kernels: dict, predicts: dict, what: dict, *, unit: str, plan,
             mechanism, arguments=None, config=None, factory=None) -> None:
    """Register every variant of a lesson (a kernel file calls this once).

    plan(case, variant) -> launch; mechanism(case, variant) -> `kbench explain`'s figures of the
    lesson's point (another lesson's case: {}, listed as not for this case); make() compiles
    kernels[variant] and launches it with arguments(case, inputs, out), its run.config extended by
    config(variant), unless factory(variant) builds make() itself (constant-cmem copies its weights first).
    """
    from kbench.registry import implementation

    def explainer(variant: str):
        def explain(case, params) -> dict:
            if case.lesson != lesson:
                return {}
            return explain_launch(case, plan(case, variant), source, predicts[variant], mechanism(case, variant))

        return explain

    def launched(variant: str):
        def make(case, inputs, out):
            p = plan(case, variant)
            kernel = compiled(str(source), p["name"])
            run = launcher(kernel, p["grid"], p["block"], arguments(case, inputs, out))
            return configure(run, kernel, p, lesson, predicts[variant], **(config(variant) if config else {}))

        return make

    for variant in kernels:
        implementation("patterns", variant, backend="cupy", cuda=True, modules=("torch", "cupy"), dtypes=("fp32",),
                       unit=unit, belongs=lesson_only(lesson), explain=explainer(variant),
                       description=describe(what[variant], predicts[variant]))((factory or launched)(variant))
