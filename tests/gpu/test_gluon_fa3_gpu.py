"""gluon-fa3 right on a Hopper GPU, through kbench's own check (every input distribution, poisoned outputs,
the timed calls verified) against the float64 reference: every dtype and head dim at the sizes that catch
tile tails (one query, fewer than a K/V tile, exactly one Q tile, one past it, a partial last tile, many
tiles), causal and not, several heads (a head's last tile reads on into the next head's rows, which must be
masked); each form and tile parameter on its own (each test's cases in a process of its own that compiles Triton:
attention_checks.failures_apart); many more programs than SMs; and small cases under
Triton's concurrency sanitizer (ConSan), which checks every shared-memory access of the kernel against the
TMA copies and wgmma still pending on it and the mbarriers that order them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kbench.loader import load_helper
from kbench.suite import Case

checks = load_helper(Path(__file__).with_name("attention_checks.py"))

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_hopper")]

# Each parameter's other values, one at a time from the defaults, and the one-partition form.
FORMS = ({"pingpong": 0}, {"ws": 0, "pingpong": 0}, {"stages": 3}, {"block_n": 64}, {"block_n": 64, "stages": 3},
         {"ws": 0, "pingpong": 0, "stages": 3}, {"ws": 0, "pingpong": 0, "block_n": 64})


def label(config: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in config.items()) or "default"


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("d", [64, 128])
def test_default_form_matches_float64(registry, d, dtype):
    impl = registry.implementations("attention")["gluon-fa3"]
    cases = [Case({"n": n, "d": d, "batch": 2, "heads": 3, "dtype": dtype, "causal": causal})
             for n, causal in checks.TAIL_SIZES]
    problems = checks.failures_apart("gluon-fa3", cases, impl.params)
    assert not problems, f"gluon-fa3 {dtype} d={d} is wrong at:\n" + "\n".join(problems)


@pytest.mark.parametrize("config", FORMS, ids=label)
@pytest.mark.parametrize("d", [64, 128])
def test_each_form_matches_float64(registry, config, d):
    impl = registry.implementations("attention")["gluon-fa3"]
    cases = [Case({"n": n, "d": d, "batch": 1, "heads": 2, "dtype": "fp16", "causal": causal})
             for n, causal in ((1000, False), (1000, True), (4099, True), (300, False))]
    problems = checks.failures_apart("gluon-fa3", cases, {**impl.params, **config})
    assert not problems, f"gluon-fa3 {label(config)} d={d} is wrong at:\n" + "\n".join(problems)


@pytest.mark.parametrize("config", ({}, {"ws": 0, "pingpong": 0}), ids=label)
def test_many_programs_match_float64(registry, config):
    """More programs than SMs hold at once (8 Q tiles x 80 heads), causal ones of every length."""
    impl = registry.implementations("attention")["gluon-fa3"]
    cases = [Case({"n": 1000, "d": 128, "batch": 2, "heads": 40, "dtype": "bf16", "causal": causal})
             for causal in (False, True)]
    problems = checks.failures_apart("gluon-fa3", cases, {**impl.params, **config})
    assert not problems, f"gluon-fa3 {label(config)} is wrong at:\n" + "\n".join(problems)


def test_pingpong_needs_the_warp_specialized_form(registry):
    import torch

    suite, impl = registry.suite("attention"), registry.implementations("attention")["gluon-fa3"]
    case = Case({"n": 256, "d": 128, "batch": 1, "heads": 1, "dtype": "fp16", "causal": False})
    inputs = suite.make_inputs(case, seed=0, device="cuda")
    from kbench.registry import Unsupported

    with pytest.raises(Unsupported, match="pingpong=1"):
        impl.make(case, inputs, suite.make_output(case, inputs), **{**impl.params, "ws": 0, "pingpong": 1})
    torch.cuda.synchronize()


def test_no_hazard_under_triton_concurrency_sanitizer(proc_env):
    """tests/gpu/sanitized.py's gluon-fa3 cases (each form, causal and not, heads whose last tiles read on into
    the next head) compiled with TRITON_INSTRUMENTATION_MODE=consan: a read of a buffer a TMA copy is still
    writing, a copy into a buffer a wgmma still reads, or a wait on a barrier in the wrong phase stops the
    kernel with a device-side assert, and the run fails."""
    import triton.backends.nvidia.compiler as nvidia_compiler

    if "consan" not in Path(nvidia_compiler.__file__).read_text():
        pytest.skip("this Triton has no concurrency sanitizer (ConSan)")
    env = checks.compiling_env(proc_env(), TRITON_INSTRUMENTATION_MODE="consan", CUDA_LAUNCH_BLOCKING="1")
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("sanitized.py")), "gluon-fa3"], cwd=checks.ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    tail = (done.stdout + done.stderr)[-6000:]
    assert done.returncode == 0 and "gluon-fa3: 6 checked, 0 failed" in done.stdout, tail
