"""The reduction and scan correctness sweep on a GPU: every implementation asked for, each type (and,
for scan, inclusive and exclusive) and size, blelloch's other parameter paths, and inputs one element
past a 16-byte boundary (the kernels' scalar-load paths). Each check is kbench.correctness.check:
fresh inputs from every input distribution, outputs poisoned, the exact float64 reference.

Shared by test_reduce_scan_gpu.py (every implementation, in the test process) and sanitized.py
(kbench's own kernels at small sizes, under compute-sanitizer). Loaded by path
(kbench.loader.load_helper), as the kernels load their helpers.
"""

from __future__ import annotations

from kbench import correctness
from kbench.suite import Case

TYPES = {"reduction": ("fp32", "fp16", "int32"), "scan": ("int32", "int64", "fp32")}
FLAGS = {"reduction": ({},), "scan": ({"exclusive": False}, {"exclusive": True})}
# blelloch's --param combinations checked besides its defaults (one pass, persistent blocks with the next
# tile's loads in flight, packed state): one tile a block (staged, per-thread loads, early look-back with
# split state on a smaller block), a deeper prefetch ring with larger tiles, the smallest tiles (the most
# tiles a block and the longest look-back chains), the other look-back order and state layout, a back-off
# between polls, wider look-back steps (the default kernels, int64's 16-byte state words split), state words
# spaced a sector or a line apart, and the three-pass scan (one level above the tiles, several with 1,024-element tiles,
# per-thread loads on a smaller block).
BLELLOCH_VARIANTS = {
    "one tile a block": {"prefetch": 0},
    "one tile a block unstaged": {"prefetch": 0, "staged": 0, "items": 8},
    "one tile a block early split 128 threads": {"prefetch": 0, "lookback": "early", "state": "split", "threads": 128},
    "prefetch 2 items 32": {"prefetch": 2, "items": 32},
    "items 4": {"items": 4},
    "early": {"lookback": "early"},
    "split": {"state": "split"},
    "split 128 threads backoff": {"state": "split", "threads": 128, "backoff": 100},
    "one tile a block window 4": {"prefetch": 0, "window": 4},
    "items 4 window 2 split": {"items": 4, "window": 2, "state": "split"},
    "one tile a block state a line a tile": {"prefetch": 0, "stride": 128},
    "state a sector a tile window 2": {"stride": 32, "window": 2},
    "three passes": {"passes": 3, "prefetch": 0},
    "three passes items 4": {"passes": 3, "prefetch": 0, "items": 4},
    "three passes unstaged 128 threads": {"passes": 3, "prefetch": 0, "staged": 0, "threads": 128},
}
# The implementations given unaligned inputs (the others take whatever torch or CuPy hand them), each with
# the parameters it is checked with there (blelloch: each way of joining the tiles).
UNALIGNED_IMPLS = {"warp-shuffle": ({},), "blelloch": ({}, {"prefetch": 0}, {"passes": 3, "prefetch": 0})}


def own_kernels(registry, suite_name: str) -> list[str]:
    """kbench's CUDA C++ implementations of a suite (CuPy RawKernels), not CuPy's or torch's library calls."""
    return [name for name, impl in registry.implementations(suite_name).items()
            if impl.backend == "cupy" and not name.startswith("cupy-")]


def unaligned(impl):
    """The same implementation given x (and y) one element past a 16-byte boundary."""
    def make(case, inputs, out, **params):
        import torch

        x = inputs["x"]
        padded_x = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)
        padded_out = torch.empty(out.numel() + 1, dtype=out.dtype, device=out.device) if out.dim() else None
        fn_out = padded_out[1:] if padded_out is not None else out
        fn = impl.make(case, {"x": padded_x[1:]}, fn_out, **params)

        def run():
            padded_x[1:].copy_(x)  # the harness refills x between calls: the closure must read it each time
            fn()
            if padded_out is not None:
                out.copy_(fn_out)

        return run

    return type(impl)(impl.suite, impl.name + "-unaligned", impl.backend, make, impl.needs, "", impl.source)


def sweep(registry, suite_name: str, dtype: str, impls, sizes, unaligned_sizes) -> tuple[int, list[str]]:
    """Check each of ``impls`` at every size and flag: (checks made, one line per failed check)."""
    suite = registry.suite(suite_name)
    found = registry.implementations(suite_name)
    checks, problems = 0, []

    def check(label, impl, case, seed, params, trials=2):
        nonlocal checks
        checks += 1
        try:
            verdict = correctness.check(suite, impl, case, "cuda", seed=seed, trials=trials, params=params)
        except Exception as exc:  # noqa: BLE001 - one line each, the sweep goes on
            problems.append(f"{label}: {type(exc).__name__}: {str(exc)[:300]}")
            return
        if not verdict.ok:
            problems.append(f"{label}: {verdict.reason[:300]}")

    for name in impls:
        impl = found[name]
        for extra in FLAGS[suite_name]:
            for n in sizes:
                case = Case({"n": n, "dtype": dtype, **extra})
                label = f"{suite_name} {name} {dtype} {extra or ''} n={n}"
                check(label, impl, case, n, impl.params)
                if name == "blelloch":
                    for seed, (variant, params) in enumerate(BLELLOCH_VARIANTS.items(), start=n + 1):
                        check(f"{label} {variant}", impl, case, seed, {**impl.params, **params})
                if n in unaligned_sizes:
                    for params in UNALIGNED_IMPLS.get(name, ()):
                        check(f"{label} unaligned {params or ''}", unaligned(impl), case, n,
                              {**impl.params, **params}, trials=1)
    return checks, problems
