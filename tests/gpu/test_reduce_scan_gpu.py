"""Every reduction and scan implementation right on a GPU, in this process: each type, inclusive and
exclusive, sizes from empty through warp and tile edges to a million and three, blelloch's other
parameter paths, and inputs that are not 16-byte aligned. (The same sweep of kbench's own kernels
under compute-sanitizer: test_sanitizer_gpu.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from kbench.loader import load_helper

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_cuda", "needs_cupy")]

sweeps = load_helper(Path(__file__).with_name("reduce_scan_sweep.py"))

# Empty, one element, a warp less one, a warp, part of a tile, one element past a 4096-element tile
# (blelloch's int64 tile, and its 4-byte tile at 128 threads), many tiles (the look-back across
# them), and 2^20 + 3.
SIZES = (0, 1, 31, 32, 1000, 4097, 70_001, (1 << 20) + 3)
UNALIGNED_SIZES = (31, 1000, 4097, (1 << 20) + 3)


@pytest.mark.parametrize("suite_name,dtype", [(s, t) for s, types in sweeps.TYPES.items() for t in types])
def test_every_implementation_matches_the_exact_sum(registry, suite_name, dtype):
    assert sweeps.own_kernels(registry, suite_name), f"kbench's own {suite_name} kernel did not load: " \
                                                     f"{registry.load_errors}"
    impls = list(registry.implementations(suite_name))
    checks, problems = sweeps.sweep(registry, suite_name, dtype, impls, SIZES, UNALIGNED_SIZES)
    assert not problems, f"{len(problems)} of {checks} {suite_name} {dtype} checks failed:\n" + "\n".join(problems)
