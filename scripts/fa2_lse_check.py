"""Check cupy-fa2's optional log-sum-exp output against float64 (the harness checks only O).

    python3 scripts/fa2_lse_check.py      # on a CUDA machine; prints one line per case, exits 1 on a mismatch
"""

import sys

import torch

from kbench import loader
from kbench.suite import Case

registry = loader.load()
suite = registry.suite("attention")
impl = registry.implementations("attention")["cupy-fa2"]
params = dict(impl.params, lse=1)
failures = 0
for dtype in ("fp16", "bf16"):
    for d in (64, 128):
        for n, causal in ((1, False), (255, False), (1000, True), (4096, False), (130, True)):
            case = Case({"n": n, "d": d, "batch": 2, "heads": 3, "dtype": dtype, "causal": causal})
            inputs = suite.make_inputs(case, seed=n + d, device="cuda")
            out = suite.make_output(case, inputs)
            run = impl.make(case, inputs, out, **params)
            run.lse.fill_(float("nan"))
            run()
            torch.cuda.synchronize()
            q, k = (inputs[x].double().reshape(-1, n, d) for x in "qk")
            s = q @ k.transpose(-1, -2) * d**-0.5
            if causal:
                s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
            ref = torch.logsumexp(s, dim=-1)
            err = (run.lse.double() - ref).abs().max().item()
            ok = torch.isfinite(run.lse).all().item() and err < 1e-3
            failures += not ok
            print(f"lse {dtype} d={d} n={n} causal={causal}: max abs err {err:.2e} {'OK' if ok else 'FAIL'}")
sys.exit(1 if failures else 0)
