"""gluon-fa3 without a GPU: its refusals, what `--param` takes, its registration and the figures `kbench
explain` gives (compiled here for sm_90 where the installed Triton has Gluon). Whether the kernel is right
on an H200 is tests/gpu/test_gluon_fa3_gpu.py's job; that each form compiles without spilling, with the
softmax under one wgmma group in flight and setmaxnreg in the warp-specialized form, is
tests/suites/test_triton_sm90_builds.py's."""

from __future__ import annotations

import types

import pytest
import torch

from kbench.loader import BUILTIN_KERNELS
from kbench.registry import Unsupported
from kbench.sass import cuda_tool
from kbench.suite import Case
from kernel_modules import load_kernel_module


@pytest.fixture(scope="module")
def gfa3():
    return load_kernel_module(BUILTIN_KERNELS / "attention" / "gluon_fa3.py")


def case(n=4096, d=128, batch=2, heads=16, dtype="fp16", causal=False):
    return Case({"n": n, "d": d, "batch": batch, "heads": heads, "dtype": dtype, "causal": causal})


def test_shared_memory_decides_the_deepest_ring(gfa3):
    assert gfa3.smem_bytes(128, 128, 2) == 163_840  # Q 32 KiB + 2 x (K + V) 64 KiB
    assert gfa3.check_config(128, 128, 3) is None  # 224 KiB: fits sm_90's 227
    assert "KiB of shared memory" in gfa3.check_config(128, 128, 4)
    assert gfa3.check_config(64, 128, 6) is None
    assert "at least 2" in gfa3.check_config(128, 128, 1)
    assert "block_n=96" in gfa3.check_config(128, 96, 2)


def test_unsupported_cases_say_why(gfa3):
    assert "head dim 96" in gfa3._supports(case(d=96))
    assert "32-bit" in gfa3._supports(case(n=2**20, batch=16, heads=16))
    assert "grid" in gfa3._supports(case(n=1, batch=512, heads=256))
    assert gfa3._supports(case(n=131072, batch=1, heads=16)) is None


def test_registration(registry):
    impl = registry.implementations("attention")["gluon-fa3"]
    assert impl.params == {"block_n": 128, "stages": 2, "ws": 1, "pingpong": 1}
    assert impl.needs.cuda and impl.needs.min_cc == (9, 0) and impl.needs.dtypes == ("fp16", "bf16")
    assert impl.allowed["ws"] == (0, 1) and impl.allowed["block_n"] == (64, 128)
    assert impl.allowed["stages"](1) and impl.allowed["stages"](3) is None


@pytest.mark.parametrize("ws", [0, 1])
def test_explain_names_the_partitions_and_compiles_for_sm90(gfa3, ws):
    """Compiled in a child process without TRITON_INTERPRET, which the CPU tests set (kbench.kernel_resources)."""
    figures = gfa3.explain(case(causal=True), {"block_n": 128, "stages": 2, "ws": ws, "pingpong": ws})
    assert figures["grid"].startswith("32 Q tiles of 128 rows x 32 (batch x heads) = 1,024 programs")
    assert "8 x m64n128k16.f32.f16" in figures["wgmma per K/V tile and warpgroup"]
    assert ("loader warp" in figures["partitions"]) == bool(ws)
    assert ("ping-pong" in figures["schedule"]) == bool(ws)
    if gfa3.gl is None:
        pytest.skip("the installed Triton has no Gluon: nothing compiled")
    assert figures["spills per thread"] == "0 bytes stored, 0 loaded", figures
    assert figures["blocks per SM (sm_90)"].startswith("1,"), figures
    assert ("setmaxnreg moves them to 240" in figures["registers per thread"]) == bool(ws), figures
    if cuda_tool("cuobjdump"):  # the main loop's instruction mix: its exponentials among them
        assert "MUFU" in figures["largest innermost loop (SASS)"], figures


def test_explain_refuses_what_does_not_fit(gfa3):
    figures = gfa3.explain(case(), {"block_n": 128, "stages": 4, "ws": 1, "pingpong": 1})
    assert figures == {"configuration": f"not runnable: {gfa3.check_config(128, 128, 4)}"}


class _StandIn:
    """In place of the Gluon kernel: records each launch and answers as Triton's launch does (a compiled kernel
    with its figures)."""

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append((grid, args, kwargs))
            return types.SimpleNamespace(n_regs=168, n_spills=0, metadata=types.SimpleNamespace(shared=164_168))
        return launch


@pytest.mark.parametrize("ws", [0, 1])
def test_the_closure_launches_once_in_set_up_and_returns_nothing(gfa3, monkeypatch, ws):
    """The wrapper on CPU tensors, the kernel stood in for: descriptors of the [B·H·N, d] views with the form's
    boxes, one program per 128 query rows of each head, the launch options of the form, a first launch at
    set-up, and a closure that returns nothing (kbench would take a returned value for the answer)."""
    if gfa3.gl is None:
        pytest.skip("the installed Triton has no Gluon")
    stand_in = _StandIn()
    real = gfa3.kernel_and_options
    monkeypatch.setattr(gfa3, "kernel_and_options", lambda *a: (stand_in, *real(*a)[1:]))
    c = case(n=300, d=64, batch=2, heads=3, dtype="bf16", causal=True)
    q, k, v, out = (torch.zeros(2, 3, 300, 64, dtype=torch.bfloat16) for _ in range(4))
    run = gfa3.closure(c, {"q": q, "k": k, "v": v}, out, 128, 2, ws, ws)
    assert len(stand_in.launches) == 1  # compiled in set-up
    assert run() is None and len(stand_in.launches) == 2
    grid, args, kwargs = stand_in.launches[-1]
    assert grid == (3, 6)
    q_desc, k_desc, v_desc = args[:3]
    assert q_desc.shape == [1800, 64] and q_desc.block_shape == [64 if ws else 128, 64]
    assert k_desc.block_shape == v_desc.block_shape == [128, 64] and k_desc.base.data_ptr() == k.data_ptr()
    assert args[3] is out and args[4:9] == (3 * 300 * 64, 300 * 64, 64, 3, 300)
    assert kwargs["CAUSAL"] is True and kwargs["HEAD_DIM"] == 64 and kwargs["num_warps"] == (4 if ws else 8)
    assert ("maxnreg" in kwargs) == bool(ws) and kwargs.get("PINGPONG", False) == bool(ws)
    assert run.config["registers"] == 168 and run.config["ws"] == bool(ws)


def test_the_closure_refuses_what_it_cannot_read(gfa3):
    if gfa3.gl is None:
        pytest.skip("the installed Triton has no Gluon")
    c = case(n=64, d=64, batch=1, heads=2)
    q, k, v, out = (torch.zeros(1, 2, 64, 64, dtype=torch.float16) for _ in range(4))
    with pytest.raises(Unsupported, match="pingpong=1 takes turns"):
        gfa3.closure(c, {"q": q, "k": k, "v": v}, out, 128, 2, 0, 1)
    with pytest.raises(Unsupported, match="contiguous"):
        gfa3.closure(c, {"q": q.transpose(1, 2), "k": k, "v": v}, out, 128, 2, 1, 1)
    with pytest.raises(Unsupported, match="at least 2"):
        gfa3.closure(c, {"q": q, "k": k, "v": v}, out, 128, 1, 1, 1)
