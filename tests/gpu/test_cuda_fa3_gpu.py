"""cuda-fa3 right on a Hopper GPU: every dtype and head dim at the sizes that catch tile tails (one
query, fewer than a K/V tile, exactly one Q tile, one past it, a partial last tile, many tiles), causal
and not, several heads; and each schedule and tile parameter on its own, through kbench's own check
(every input distribution, poisoned outputs) against the float64 reference; and blocks that walk
many units of work one after another (the persistent grid), with each schedule."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbench.loader import load_helper
from kbench.suite import Case

checks = load_helper(Path(__file__).with_name("attention_checks.py"))

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_cuda", "needs_cupy")]

# Each parameter's other values, one at a time from the defaults, and the plain schedule.
CONFIGS = ({}, {"block_n": 64}, {"block_n": 128}, {"block_n": 192}, {"stages": 1}, {"block_n": 128, "stages": 3},
           {"overlap": 0}, {"pingpong": 0},
           {"overlap": 0, "pingpong": 0}, {"block_n": 64, "stages": 3}, {"persistent": 0}, {"dynamic": 0},
           {"narrow_tail": 0}, {"chains": 2}, {"chains": 4}, {"block_n": 64, "chains": 4}, {"rescale": 0},
           {"rescale": 0, "overlap": 0}, {"rescale": 0, "block_n": 64})


@pytest.mark.usefixtures("needs_hopper")
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("d", [64, 128])
def test_default_configuration_matches_float64(registry, d, dtype):
    impl = registry.implementations("attention")["cuda-fa3"]
    cases = [Case({"n": n, "d": d, "batch": 2, "heads": 3, "dtype": dtype, "causal": causal})
             for n, causal in checks.TAIL_SIZES]
    problems = checks.failures(registry, "cuda-fa3", cases, impl.params)
    assert not problems, f"cuda-fa3 {dtype} d={d} is wrong at:\n" + "\n".join(problems)


@pytest.mark.usefixtures("needs_hopper")
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "default")
@pytest.mark.parametrize("d", [64, 128])
def test_each_configuration_matches_float64(registry, config, d):
    impl = registry.implementations("attention")["cuda-fa3"]
    cases = [Case({"n": n, "d": d, "batch": 1, "heads": 2, "dtype": "fp16", "causal": causal})
             for n, causal in ((1000, False), (1000, True), (4099, True), (300, False))]
    problems = checks.failures(registry, "cuda-fa3", cases, {**impl.params, **config})
    assert not problems, f"cuda-fa3 {config} d={d} is wrong at:\n" + "\n".join(problems)


@pytest.mark.usefixtures("needs_hopper")
@pytest.mark.parametrize("config", ({}, {"overlap": 0, "pingpong": 0}, {"pingpong": 0}, {"stages": 1},
                                    {"block_n": 64, "stages": 3}, {"dynamic": 0}, {"dynamic": 0, "overlap": 0},
                                    {"rescale": 0}),
                         ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_persistent_blocks_walk_many_units(registry, config):
    """More units than SMs, so each persistent block takes several one after another: the Q buffer, the
    K/V ring and the ping-pong turns carry over from one unit to the next (and causal units differ in
    length). Several launches of one closure (the checks call it again and again) find the dynamic
    schedule's counter set back to zero by the launch before."""
    import torch

    impl = registry.implementations("attention")["cuda-fa3"]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    cases = [Case({"n": n, "d": d, "batch": 2, "heads": heads, "dtype": "fp16", "causal": causal})
             for n, d, heads, causal in ((1000, 128, 40, False), (1000, 64, 40, True), (300, 128, 150, True))]
    assert all(-(-c.n // 128) * c.batch * c.heads > 2 * sms for c in cases)
    problems = checks.failures(registry, "cuda-fa3", cases, {**impl.params, **config, "persistent": 1})
    assert not problems, f"cuda-fa3 persistent {config} is wrong at:\n" + "\n".join(problems)


@pytest.mark.usefixtures("needs_hopper")
@pytest.mark.parametrize("config", ({}, {"block_n": 64}, {"pingpong": 0}, {"overlap": 0, "pingpong": 0},
                                    {"persistent": 0}, {"dynamic": 0}, {"chains": 4}, {"stages": 3}, {"rescale": 0}),
                         ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_three_consumers_match_float64(registry, config):
    """consumers=3 (d = 64): 192-row units in three consumer warpgroups taking turns in a ring, at every size
    of the default test in both types, and with many more units than SMs (each persistent block takes
    several: the ring of turns carries over from one unit to the next)."""
    impl = registry.implementations("attention")["cuda-fa3"]
    cases = [Case({"n": n, "d": 64, "batch": 2, "heads": 3, "dtype": dtype, "causal": causal})
             for n, causal in checks.TAIL_SIZES for dtype in ("fp16", "bf16")]
    cases += [Case({"n": 2000, "d": 64, "batch": 2, "heads": 40, "dtype": "fp16", "causal": causal})
              for causal in (False, True)]  # 11 Q tiles x 80 = 880 units
    problems = checks.failures(registry, "cuda-fa3", cases, {**impl.params, "block_n": 128, "consumers": 3, **config})
    assert not problems, f"cuda-fa3 consumers=3 {config} is wrong at:\n" + "\n".join(problems)
