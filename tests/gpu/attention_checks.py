"""An attention implementation's cases through kbench's own check (every input distribution, poisoned outputs,
the timed calls verified) against the float64 reference, every case tried and the failures listed together:
the GPU tests of cuda-fa3 and gluon-fa3."""

from __future__ import annotations

from kbench import correctness

# (N, causal) at the sizes that catch tile tails: one query, fewer than a K/V tile, exactly one 128-row Q tile, one
# past it, a partial last tile, many tiles.
TAIL_SIZES = ((1, False), (17, True), (128, False), (129, True), (1000, False), (4099, True))


def failures(registry, name: str, cases, params) -> list[str]:
    suite, impl = registry.suite("attention"), registry.implementations("attention")[name]
    problems = []
    for case in cases:
        label = ",".join(f"{k}={v}" for k, v in case.values.items())
        try:
            verdict = correctness.check(suite, impl, case, "cuda", seed=case.n, trials=2, params=params)
        except Exception as exc:  # noqa: BLE001 - every case is tried, the failures listed together
            problems.append(f"{label}: {type(exc).__name__}: {str(exc)[:300]}")
            continue
        if not verdict.ok:
            problems.append(f"{label}: {verdict.reason[:300]}")
    return problems
