"""Correctness of every reduction and scan implementation on a GPU, in one process (issue 5).

    python3 scripts/reduce_scan_check.py            # n in {0, 1, 31, 32, 1000, 2^20 + 3, 2^28}
    compute-sanitizer --tool memcheck python3 scripts/reduce_scan_check.py small
    compute-sanitizer --tool racecheck python3 scripts/reduce_scan_check.py small
    (small: small n, kbench's own CUDA kernels only)

Each implementation, dtype (and inclusive/exclusive) and n is checked with
kbench.correctness.check (fresh inputs each trial, outputs poisoned, float64
reference); also an input that is not 16-byte aligned (the scalar-load paths).
Exit status 1 if any check failed. For the speed figures, use `kbench run`.
"""

import sys
import time

from kbench import correctness, loader
from kbench.suite import Case

SMALL = sys.argv[1:] == ["small"]
SIZES = (0, 1, 31, 32, 1000, 4097, 70_001) if SMALL else (0, 1, 31, 32, 1000, (1 << 20) + 3, 1 << 28)

# blelloch's --param combinations checked besides its defaults
BLELLOCH_VARIANTS = {
    "unstaged": {"staged": 0, "items": 8},
    "early": {"lookback": "early"},
    "packed": {"state": "packed"},
    "split": {"state": "split"},
    "packed early 128 threads": {"state": "packed", "lookback": "early", "threads": 128},
    "split 128 threads": {"state": "split", "threads": 128},
}

registry = loader.load()
failed = 0
start = time.time()


def report(label, verdict):
    global failed
    failed += not verdict.ok
    print(f"{label}: {'OK' if verdict.ok else 'FAIL ' + verdict.reason[:200]} (max abs err {verdict.max_abs_err})",
          flush=True)


def unaligned(impl):
    """The same implementation given x (and y) one element past a 16-byte boundary."""
    def make(case, inputs, out, **params):
        import torch

        x = inputs["x"]
        padded_x = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)
        padded_out = torch.empty(out.numel() + 1, dtype=out.dtype, device=out.device) if out.dim() else None
        fn_inputs = {"x": padded_x[1:]}
        fn_out = padded_out[1:] if padded_out is not None else out
        fn = impl.make(case, fn_inputs, fn_out, **params)

        def run():
            padded_x[1:].copy_(x)
            fn()
            if padded_out is not None:
                out.copy_(fn_out)

        return run

    return type(impl)(impl.suite, impl.name + "-unaligned", impl.backend, make, impl.needs, "", impl.source)


for suite_name, dtypes, flags in (("reduction", ("fp32", "fp16", "int32"), ({},)),
                                  ("scan", ("int32", "int64", "fp32"), ({"exclusive": False}, {"exclusive": True}))):
    suite = registry.suite(suite_name)
    for name, impl in registry.implementations(suite_name).items():
        if SMALL and (impl.backend != "cupy" or name in ("cupy-sum", "cupy-cumsum")):
            continue  # under compute-sanitizer: kbench's own kernels only
        for dtype in dtypes:
            for extra in flags:
                for n in SIZES:
                    case = Case({"n": n, "dtype": dtype, **extra})
                    label = f"{suite_name:9s} {name:13s} {dtype} {extra or ''} n={n}"
                    try:
                        report(label, correctness.check(suite, impl, case, "cuda", seed=n, trials=2, params=impl.params))
                        if name == "blelloch":  # the other paths: own 16-byte loads, look-back orders, states
                            for seed, (variant, params) in enumerate(BLELLOCH_VARIANTS.items(), start=n + 1):
                                report(f"{label} {variant}", correctness.check(
                                    suite, impl, case, "cuda", seed=seed, trials=2, params={**impl.params, **params}))
                        if n in (31, 1000, 4097, (1 << 20) + 3) and name in ("warp-shuffle", "blelloch"):
                            report(label + " unaligned",
                                   correctness.check(suite, unaligned(impl), case, "cuda", seed=n, trials=1,
                                                     params=impl.params))
                    except Exception as exc:  # noqa: BLE001 - one line each, go on
                        failed += 1
                        print(f"{label}: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
print(f"{failed} failed; {time.time() - start:.1f} s")
sys.exit(1 if failed else 0)
