"""The patterns suite's kernels on a GPU, lesson by lesson, in this process: each variant right at odd
and even sizes (kbench.correctness.check, then recheck: the closure must read its refilled inputs),
refusing the other lessons, and carrying the lesson's prediction in its config, which `kbench run`
sets beside the measured ratio. (Whether a prediction holds is a measurement: `kbench run patterns`.)"""

from __future__ import annotations

import pytest

from kbench import correctness
from kbench.registry import Unsupported
from kbench.suite import Case

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_cuda", "needs_cupy")]

LESSONS = ("transpose", "access", "divergence", "constant", "ptx")
# Sizes below, at and past a warp and a 32 x 32 tile, and ones no block shape divides.
SIZES = (1, 2, 17, 32, 33, 100, 257, 1000)


def case(lesson: str, n: int) -> Case:
    return Case({"lesson": lesson, "n": n, "dtype": "fp32"})


def lesson_of(name: str) -> str:
    return name.split("-")[0]


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_variant_is_right_and_keeps_to_its_lesson(registry, lesson):
    suite = registry.suite("patterns")
    impls = {name: impl for name, impl in registry.implementations("patterns").items() if lesson_of(name) == lesson}
    assert len(impls) >= 2, f"the {lesson} lesson needs a variant beside its baseline; loaded: {sorted(impls)}"
    other = next(x for x in LESSONS if x != lesson)
    problems = []
    for name, impl in impls.items():
        for n in SIZES:
            try:
                verdict = correctness.check(suite, impl, case(lesson, n), "cuda", seed=1, trials=2)
                again = correctness.recheck(verdict, "cuda") if verdict.ok else ""
            except Exception as exc:  # noqa: BLE001 - every size is tried, the failures listed together
                problems.append(f"{name} n={n}: {type(exc).__name__}: {str(exc)[:300]}")
                continue
            if not verdict.ok or again:
                problems.append(f"{name} n={n}: {(verdict.reason or again)[:300]}")
        mine = case(lesson, 17)
        inputs = suite.make_inputs(mine, seed=0, device="cuda")
        config = getattr(impl.make(mine, inputs, suite.make_output(mine, inputs)), "config", {})
        if not config.get("lesson_predicts"):
            problems.append(f"{name}: run.config carries no lesson_predicts ({sorted(config)})")
        versus = (config.get("lesson_check") or {}).get("versus")
        if versus is not None and versus not in impls:
            problems.append(f"{name}: its prediction is judged against {versus!r}, not a variant of the {lesson} lesson")
        theirs = case(other, 17)
        inputs = suite.make_inputs(theirs, seed=0, device="cuda")
        try:
            impl.make(theirs, inputs, suite.make_output(theirs, inputs))
            problems.append(f"{name}: --lesson {other} ran instead of raising Unsupported")
        except Unsupported:
            pass
    assert not problems, f"{lesson} lesson:\n" + "\n".join(problems)
