"""Run each CUDA matmul implementation once on small odd and even cases, for compute-sanitizer.

    compute-sanitizer --tool memcheck --error-exitcode 9 python3 scripts/matmul_sanitize.py [IMPL,...]

Odd shapes (K and N not multiples of 8) take the bounds-checked element-wise
paths; 64 x 136 x 72 takes the vector / cp.async / direct-fragment paths with
edge tiles in M and N; 33 x 40 x 24 has a K tail that is a multiple of 8 but
not of 16 (wmma's staged last k-step). Prints one line per case.
"""

import sys

import torch

from kbench import correctness, loader
from kbench.suite import Case

IMPLS = {
    "tiled-smem": ("fp32",),
    "tiled-regblock": ("fp32",),
    "wmma": ("fp16", "bf16"),
    "wmma-smem": ("fp16", "bf16"),
}
SHAPES = ((1, 1, 1), (17, 17, 17), (100, 77, 33), (64, 136, 72), (33, 40, 24), (130, 264, 200))

chosen = sys.argv[1].split(",") if len(sys.argv) > 1 else list(IMPLS)
registry = loader.load()
suite = registry.suite("matmul")
failed = 0
for name in chosen:
    impl = registry.implementations("matmul")[name]
    for dtype in IMPLS[name]:
        for m, n, k in SHAPES:
            case = Case({"m": m, "n": n, "k": k, "dtype": dtype, "tf32": False})
            verdict = correctness.check(suite, impl, case, "cuda", seed=0, trials=1, params=impl.params)
            torch.cuda.synchronize()
            failed += not verdict.ok
            print(f"{name:15s} {dtype} {m}x{n}x{k}: ok={verdict.ok} max_abs_err={verdict.max_abs_err} {verdict.reason}")
sys.exit(1 if failed else 0)
