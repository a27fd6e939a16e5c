"""Every reduction and scan implementation right on a GPU, in this process: each type, inclusive and
exclusive, sizes from empty through warp and tile edges to sixteen million and five, blelloch's other
parameter paths, and inputs that are not 16-byte aligned; the optional CUB peer (cub-scan) where
cuda-cccl is installed. (The same sweep of kbench's own kernels under compute-sanitizer:
test_sanitizer_gpu.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from kbench.loader import load_helper
from kbench.registry import skip_reason
from kbench.suite import Case

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_cuda", "needs_cupy")]

sweeps = load_helper(Path(__file__).with_name("reduce_scan_sweep.py"))

# Empty, one element, a warp less one, a warp, part of a tile, one element past 2,048 (blelloch's
# default int64 tile), 4,096 (its default 4-byte tile, its one-tile-a-block int64 tile, and its 4-byte
# tile at 128 threads) and 8,192 elements (its one-tile-a-block 4-byte tile), many tiles (the look-back
# across them), 2^20 + 3, and 2^24 + 5: more tiles than the persistent grid has blocks, so each block
# loops over several (4,097 tiles of 4,096 on at most a few hundred blocks at once).
SIZES = (0, 1, 31, 32, 1000, 2049, 4097, 8193, 70_001, (1 << 20) + 3, (1 << 24) + 5)
UNALIGNED_SIZES = (31, 1000, 4097, (1 << 20) + 3, (1 << 24) + 5)
# Peers whose package is optional: checked on their own below, skipped where absent.
OPTIONAL = ("cub-scan",)


@pytest.mark.parametrize("suite_name,dtype", [(s, t) for s, types in sweeps.TYPES.items() for t in types])
def test_every_implementation_matches_the_exact_sum(registry, suite_name, dtype):
    assert sweeps.own_kernels(registry, suite_name), f"kbench's own {suite_name} kernel did not load: " \
                                                     f"{registry.load_errors}"
    impls = [name for name in registry.implementations(suite_name) if name not in OPTIONAL]
    checks, problems = sweeps.sweep(registry, suite_name, dtype, impls, SIZES, UNALIGNED_SIZES)
    assert not problems, f"{len(problems)} of {checks} {suite_name} {dtype} checks failed:\n" + "\n".join(problems)


@pytest.mark.parametrize("dtype", sweeps.TYPES["scan"])
def test_cub_scan_matches_the_exact_sum(registry, dtype):
    """CUB's DeviceScan through cuda-cccl, inclusive and exclusive, at every size: a SKIP, with the
    reason kbench run gives, where cuda-cccl is not installed."""
    import torch

    impl = registry.implementations("scan")["cub-scan"]
    reason = skip_reason(impl, Case({"n": 1, "dtype": dtype, "exclusive": False}), "cuda",
                         torch.cuda.get_device_capability())
    if reason:
        pytest.skip(f"cub-scan: {reason}")
    checks, problems = sweeps.sweep(registry, "scan", dtype, ["cub-scan"], SIZES, UNALIGNED_SIZES)
    assert not problems, f"{len(problems)} of {checks} cub-scan {dtype} checks failed:\n" + "\n".join(problems)
