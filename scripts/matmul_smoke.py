"""The matmul correctness sweep and a quick speed check on a GPU, in this process (no kbench workers).

    python3 scripts/matmul_smoke.py [IMPL,...]      (default: all; e.g. wmma,wmma-smem)

Checks every implementation, each dtype it supports and each tile configuration
the benchmarks time, against the float64 reference on odd and even shapes
(two trials of fresh inputs each, outputs poisoned: kbench.correctness.check),
then times a handful of large products with CUDA events (a few calls after 3
warm-ups) beside cuBLAS. Exit status 1 if any check failed. For the
measurements that count, use `kbench run matmul` (kbench's timing, L2
flushed, adaptive stop).
"""

import sys
import time

import torch

from kbench import correctness, loader
from kbench.suite import Case

SHAPES = ((1, 1, 1), (17, 17, 17), (1000, 777, 333), (128, 128, 128), (33, 40, 24), (130, 264, 200),
          (256, 512, 1024))
# every warps x block_n x stages the bench step times, less 4 warps x 256 columns (refused: its warp tile spills)
WMMA_SMEM_CONFIGS = [{"warps": w, "block_n": n, "stages": st} for w, n in ((4, 128), (8, 128), (8, 256))
                     for st in (2, 3, 4)]
CHECKS = (
    [("cublas", dt, {}) for dt in ("fp16", "bf16", "fp32")]
    + [("triton", dt, {}) for dt in ("fp16", "bf16", "fp32")]
    + [("tiled-smem", "fp32", {}), ("tiled-smem", "fp32", {"tile": 32})]
    + [("tiled-regblock", "fp32", {}),
       ("tiled-regblock", "fp32", {"block_m": 64, "block_n": 64, "block_k": 16, "thread_m": 4, "thread_n": 4})]
    + [("wmma", dt, {}) for dt in ("fp16", "bf16")]
    + [("wmma-smem", dt, cfg) for dt in ("fp16", "bf16") for cfg in [{}, {"block_k": 64}] + WMMA_SMEM_CONFIGS]
)

start = time.time()
registry = loader.load()
print("load errors:", registry.load_errors or "none")
suite = registry.suite("matmul")
impls = registry.implementations("matmul")

chosen = set(sys.argv[1].split(",")) if len(sys.argv) > 1 else None
failed = 0
for name, dtype, params in CHECKS:
    if chosen and name not in chosen:
        continue
    impl = impls[name]
    problems = []
    for m, n, k in SHAPES:
        case = Case({"m": m, "n": n, "k": k, "dtype": dtype, "tf32": False})
        try:
            verdict = correctness.check(suite, impl, case, "cuda", seed=1, trials=2, params={**impl.params, **params})
            if not verdict.ok:
                problems.append(f"{m}x{n}x{k}: {verdict.reason[:120]}")
        except Exception as exc:  # noqa: BLE001 - report and go on
            problems.append(f"{m}x{n}x{k}: {type(exc).__name__}: {str(exc)[:300]}")
    failed += bool(problems)
    print(f"{name:15s} {dtype} {params}: {'OK' if not problems else problems}", flush=True)
print(f"correctness done in {time.time() - start:.1f} s", flush=True)


def bench(name, dtype, size, params=None):
    impl = impls[name]
    case = Case({"m": size, "n": size, "k": size, "dtype": dtype, "tf32": False})
    inputs = suite.make_inputs(case, seed=0, device="cuda")
    out = suite.make_output(case, inputs)
    fn = impl.make(case, inputs, out, **{**impl.params, **(params or {})})
    for _ in range(3):
        fn()
    calls = 10 if size <= 4096 else 5
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    ms = begin.elapsed_time(end) / calls
    cfg = getattr(fn, "config", {})
    print(f"{name:15s} {dtype} {size} {params or {}}: {ms:.3f} ms {2 * size**3 / ms / 1e9:7.1f} TF/s "
          f"regs={cfg.get('registers_per_thread')} local={cfg.get('local_bytes_per_thread')}", flush=True)


for size in (4096, 8192):
    bench("cublas", "fp16", size)
    bench("wmma-smem", "fp16", size)
    bench("wmma-smem", "fp16", size, {"warps": 8, "stages": 3})  # the old default
    bench("wmma-smem", "fp16", size, {"warps": 8, "block_n": 256})  # 4 warps x 256 columns spill: refused
    bench("wmma-smem", "fp16", size, {"block_k": 64})
    if size == 4096:
        bench("wmma", "fp16", size)
bench("cublas", "fp32", 4096)
bench("tiled-smem", "fp32", 4096)
bench("tiled-regblock", "fp32", 4096)
print(f"total {time.time() - start:.1f} s")
sys.exit(1 if failed else 0)
