"""Records built by hand for tests that need a results file without running anything: an attention
row of the case n=1, and rows of a history over commits (importable from any test folder: tests/ is
on sys.path beside conftest.py)."""

from __future__ import annotations

import random

from kbench.record import Record

KEY = "n=1"


def fake_record(impl: str, status: str = "OK", case_key: str = KEY, median: float = 1.0) -> Record:
    rec = {"schema": 1, "suite": "attention", "impl": impl, "label": impl, "backend": "torch", "case": {},
           "case_key": case_key, "status": status, "reason": "" if status == "OK" else f"why {status}",
           "baseline": "naive", "env": {"device": "cpu"}}
    if status == "OK":
        rec["timing"] = {"method": "cpu-wall-clock", "samples": [median] * 3,
                         "stats": {"median": median, "p20": median, "p80": median, "n": 3}, "warnings": []}
    return Record.from_json(rec)


H200 = {"name": "NVIDIA H200", "driver": "580.159.04", "cuda_runtime": "13.0"}
REASONS = {"FAIL": "max error 3.1e-01 over its bound 2.0e-03 (normal inputs)", "SKIP": "needs cupy"}
ATTENTION_CASE = {"n": 4096, "d": 128, "batch": 4, "heads": 16, "dtype": "fp16", "causal": False}


def gpu_record(impl: str, commit: str, created_at: str, median: float, status: str = "OK", gpu: dict = H200,
               case: dict = ATTENTION_CASE, noise: float = 0.01, n: int = 40, seed: int = 0) -> Record:
    """An attention record as a GPU run writes it, at ``commit`` and ``created_at``: ``n`` samples spread
    ``noise`` (relative) around ``median`` ms (seeded: the same arguments give the same samples), the
    case's FLOPs and fewest bytes, a tensor-core roof. A FAIL or SKIP has a reason and no timing."""
    n_, d = case["n"], case["d"]
    bh = case["batch"] * case["heads"]
    rec = {"schema": 1, "created_at": created_at, "suite": "attention", "impl": impl, "label": impl,
           "backend": "torch", "case": dict(case), "case_key": ",".join(f"{k}={v}" for k, v in case.items()),
           "status": status, "reason": REASONS.get(status, ""),
           "baseline": "naive", "flops": 4.0 * bh * n_ * n_ * d, "min_bytes": 4.0 * bh * n_ * d * 2,
           "env": {"device": "cuda", "gpu": dict(gpu), "git": {"commit": commit, "dirty": False}}}
    if status == "OK":
        rng = random.Random(f"{impl}{commit}{created_at}{seed}")
        samples = sorted(median * (1 + rng.uniform(-noise, noise)) for _ in range(n))
        mid = samples[n // 2]
        rec["timing"] = {"method": "cuda-events+l2-flush", "samples": samples, "warnings": [],
                         "stats": {"n": n, "median": mid, "p20": samples[n // 5], "p80": samples[4 * n // 5]}}
        rec["roof"] = {"gpu": "h200", "unit": "tensor"}
    return Record.from_json(rec)


A100 = {"name": "NVIDIA A100-SXM4-80GB", "driver": "580.159.04", "cuda_runtime": "13.0"}


def commit(i: int) -> str:
    return f"{i:x}" * 40  # 0000..., 1111...: short commits 0000000, 1111111, ...


def attention_history(runs: int = 6, slower_at: int | None = 4, gpu: dict = H200) -> list[Record]:
    """An attention case over ``runs`` commits, a day apart: naive (the baseline) and triton-fa2 steady
    within 1 % noise; sdpa 20 % slower from run ``slower_at`` on (a regression there, and none after);
    cupy-fa2 FAILs at run 3 and SKIPs at the last run."""
    records = []
    for i in range(runs):
        when = f"2026-11-{10 + i:02d}T10:00:%02d+00:00"
        sdpa = 1.56 * (1.2 if slower_at is not None and i >= slower_at else 1.0)
        records += [gpu_record("naive", commit(i), when % 0, 5.8, gpu=gpu),
                    gpu_record("sdpa", commit(i), when % 1, sdpa, gpu=gpu),
                    gpu_record("triton-fa2", commit(i), when % 2, 0.97, gpu=gpu),
                    gpu_record("cupy-fa2", commit(i), when % 3, 1.7, gpu=gpu,
                               status="FAIL" if i == 3 else "SKIP" if i == runs - 1 else "OK")]
    return records
