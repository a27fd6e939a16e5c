"""An attention implementation's cases through kbench's own check (every input distribution, poisoned outputs,
the timed calls verified) against the float64 reference, every case tried and the failures listed together:
the GPU tests of cuda-fa3 and gluon-fa3.

``failures_apart`` runs them in a child process (this file as a script: the request on stdin, the failures as
one JSON line on stdout) without TRITON_INTERPRET, which tests/conftest.py sets for the CPU tests: a Gluon
kernel cannot be compiled in a process that interprets Triton; ``compiling_env`` is that child's environment,
which the compute-sanitizer runs (tests/gpu/test_sanitizer_gpu.py) take too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kbench import correctness

# (N, causal) at the sizes that catch tile tails: one query, fewer than a K/V tile, exactly one 128-row Q tile, one
# past it, a partial last tile, many tiles.
TAIL_SIZES = ((1, False), (17, True), (128, False), (129, True), (1000, False), (4099, True))
ROOT = Path(__file__).resolve().parents[2]


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


def compiling_env(base: dict | None = None, **extra: str) -> dict:
    """The environment of a child process that compiles Triton kernels with kbench from this tree: ``base``
    (os.environ if None) without TRITON_INTERPRET, the tree first on PYTHONPATH, and ``extra``."""
    env = {key: value for key, value in (os.environ if base is None else base).items() if key != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def failures_apart(name: str, cases, params, extra_env: dict | None = None, timeout: float = 900) -> list[str]:
    """failures() in a child process with Triton compiling (no TRITON_INTERPRET)."""
    env = compiling_env(**(extra_env or {}))
    request = {"name": name, "cases": [case.values for case in cases], "params": params}
    done = subprocess.run([sys.executable, __file__], input=json.dumps(request), capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=timeout)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return [f"the checking process ended with exit {done.returncode}: {(done.stdout + done.stderr)[-3000:]}"]
    return json.loads(lines[-1])


def _main() -> int:
    from kbench import loader
    from kbench.suite import Case

    request = json.load(sys.stdin)
    cases = [Case(values) for values in request["cases"]]
    print(json.dumps(failures(loader.load(), request["name"], cases, request["params"])))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
