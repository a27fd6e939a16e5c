"""Run cupy-fa2 once on a small case, for compute-sanitizer (memcheck / racecheck).

    compute-sanitizer --tool memcheck python3 scripts/fa2_sanitize.py [block_m block_n warps]
"""

import sys

import torch

from kbench import correctness, loader
from kbench.suite import Case

block_m, block_n, warps = (int(x) for x in sys.argv[1:4]) if len(sys.argv) > 3 else (128, 64, 4)
registry = loader.load()
suite = registry.suite("attention")
impl = registry.implementations("attention")["cupy-fa2"]
for causal in (False, True):
    case = Case({"n": 200, "d": 128, "batch": 1, "heads": 2, "dtype": "fp16", "causal": causal})
    verdict = correctness.check(suite, impl, case, "cuda", seed=0, trials=1,
                                params={"block_m": block_m, "block_n": block_n, "warps": warps, "lse": 1})
    torch.cuda.synchronize()
    print(f"causal={causal} block_m={block_m} block_n={block_n} warps={warps}: ok={verdict.ok} {verdict.reason}")
