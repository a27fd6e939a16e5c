"""cuda-fa3 without a GPU: its launch plans and refusals, its 3-D TMA maps (one per tensor, so a box
that overhangs a head's last row reads zeros, not the next head), the figures `kbench explain` gives,
and its registration. Whether the kernel is right on an H200 is tests/gpu/test_cuda_fa3_gpu.py's job;
that the source compiles for sm_90a is tests/suites/test_cuda_sources.py's."""

from __future__ import annotations

import ctypes
import shutil

import pytest
import torch

from kbench.errors import UserError
from kbench.loader import BUILTIN_KERNELS, load_helper
from kbench.registry import Unsupported
from kbench.suite import Case
from kernel_modules import load_kernel_module

NVCC = shutil.which("nvcc")


@pytest.fixture(scope="module")
def fa3():
    return load_kernel_module(BUILTIN_KERNELS / "attention" / "cuda_fa3.py")


@pytest.fixture(scope="module")
def tma():
    return load_helper(BUILTIN_KERNELS / "_tensor_map.py")


def case(n=4096, d=128, batch=2, heads=16, dtype="fp16", causal=False):
    return Case({"n": n, "d": d, "batch": batch, "heads": heads, "dtype": dtype, "causal": causal})


def tensors(c, dtype=torch.float16):
    shape = (c.batch, c.heads, c.n, c.d)
    return [torch.zeros(shape, dtype=dtype) for _ in range(4)]


def plan(fa3, c, block_n=128, stages=2, overlap=1, pingpong=1, persistent=1, **kw):
    return fa3.plan(c, *tensors(c), block_n, stages, overlap, pingpong, persistent, **kw)


def test_default_plan(fa3):
    p = plan(fa3, case())
    assert p["name"] == "fa3_forward<128, 128, 2, false, false, true, true, 1, 2, 0>"
    assert p["grid"] == (132,) and p["block"] == (384,)  # one block per SM of an H200; 3 warpgroups
    # Q 32 KiB + 2 stages x (K + V) 64 KiB + 10 mbarriers + the unit slot + 1 KiB alignment slack
    assert p["smem"] == 32768 + 2 * 65536 + 80 + 8 + 1024
    # Without persistence, one block per unit: 4096 / 128 Q tiles x batch*heads; fewer units than SMs
    # make as many persistent blocks as units.
    assert plan(fa3, case(), persistent=0)["grid"] == (32 * 32,)
    assert plan(fa3, case(n=1000, batch=1, heads=3))["grid"] == (24,)
    assert plan(fa3, case(), sms=78)["grid"] == (78,)
    q_map, k_map, v_map = p["maps"]
    assert q_map.dims == (128, 4096, 32) and q_map.box == (64, 128, 1)
    assert k_map.box == (64, 128, 1) and v_map.box == (64, 128, 1)
    assert q_map.strides == (256, 4096 * 256)


def test_names_carry_every_template_argument(fa3):
    p = plan(fa3, case(n=1000, d=64, dtype="bf16", causal=True), block_n=64, stages=3, overlap=0, pingpong=0,
             persistent=0)
    assert p["name"] == "fa3_forward<64, 64, 3, true, true, false, false, 1, 2, 0>"
    assert plan(fa3, case(), block_n=176, chains=4)["name"] == "fa3_forward<128, 176, 2, false, false, true, true, 4, 2, 0>"
    assert plan(fa3, case(), block_n=176, rescale=8)["name"] == "fa3_forward<128, 176, 2, false, false, true, true, 1, 2, 8>"
    assert p["grid"] == (8 * 32,)  # 1000 rows: 7 full Q tiles and a partial one, for each of 32 heads


def test_three_consumers_take_192_row_units_at_d64(fa3):
    c = case(n=1000, d=64, batch=1, heads=32)
    p = plan(fa3, c, block_n=128, consumers=3, persistent=0)
    assert p["name"] == "fa3_forward<64, 128, 2, false, false, true, true, 1, 3, 0>"
    assert p["block"] == (512,)  # the producer and three consumer warpgroups
    assert p["grid"] == (6 * 32,)  # 1000 rows: five 192-row Q tiles and a partial one, for each of 32 heads
    q_map, k_map, _ = p["maps"]
    assert q_map.box == (64, 192, 1) and k_map.box == (64, 128, 1)
    # Q 192 x 64 x 2 + 2 stages x (K + V) 128 x 64 x 2 each + 10 mbarriers + the unit slot + 1 KiB of slack
    assert p["smem"] == 24576 + 2 * 2 * 16384 + 80 + 8 + 1024
    # 4096 rows at B2 H16: 22 Q tiles of 192 rows a head (the last of 64), each against 32 K/V tiles of 128
    # keys, 4 + 8 k-steps each, in 3 consumers of 4 warps, for 32 heads
    assert fa3.wgmma_per_call(case(d=64), 128, True, consumers=3) == 22 * 32 * (4 + 8) * 3 * 4 * 32
    for d, block_n in ((128, 128), (64, 176), (64, 192)):
        with pytest.raises(Unsupported, match="consumers=3 .*160 registers"):
            plan(fa3, case(d=d), block_n=block_n, consumers=3)


def test_refusals_say_why(fa3):
    with pytest.raises(Unsupported, match="block_n=96: 64, 128, 176, 192"):
        plan(fa3, case(), block_n=96)
    assert plan(fa3, case(), block_n=176)["name"] == "fa3_forward<128, 176, 2, false, false, true, true, 1, 2, 0>"
    with pytest.raises(Unsupported, match="shared memory per block"):
        plan(fa3, case(), block_n=192, stages=3, smem_limit=227 * 1024)
    with pytest.raises(Unsupported, match="stages=0"):
        plan(fa3, case(), stages=0)
    with pytest.raises(Unsupported, match="head dim 96"):
        plan(fa3, case(d=96))
    with pytest.raises(Unsupported, match="shared memory per block"):
        plan(fa3, case(), stages=4, smem_limit=227 * 1024)  # Q 32 KiB + 4 x 64 KiB is past an H200's 227 KiB
    assert plan(fa3, case(), stages=3, smem_limit=227 * 1024)["smem"] <= 227 * 1024
    assert plan(fa3, case(n=16, batch=70_000, heads=1), persistent=0)["grid"] == (70_000,)  # a 1-D grid
    huge = case(n=1 << 20, batch=1 << 15, heads=4)
    with pytest.raises(Unsupported, match="1,073,741,824 units of 128 query rows"):
        fa3.plan(huge, *[fa3._cupy.PLACEHOLDER] * 4, 128, 2, 1, 1, 1)


def test_misaligned_tensors_are_refused(fa3):
    c = case(n=64, d=64, batch=1, heads=1)
    q, k, v, out = tensors(c)
    flat = torch.zeros(64 * 64 + 1, dtype=torch.float16)
    shifted = flat[1:].view(1, 1, 64, 64)  # 2 bytes past an aligned address
    with pytest.raises(Unsupported, match="TMA cannot read K: the tensor's address is not a multiple of 16"):
        fa3.plan(c, q, shifted, v, out, 128, 2, 1, 1)
    with pytest.raises(Unsupported, match="O must be 4-byte aligned"):
        fa3.plan(c, q, k, v, shifted, 128, 2, 1, 1)


def test_batched_map_requirements_and_encoding(tma):
    spec = tma.Batched3D("bf16", 0x7F0000001000, rows=1000, cols=128, box_rows=128, box_cols=64, batches=48)
    assert spec.problem() is None
    assert spec.dims == (128, 1000, 48) and spec.strides == (256, 256_000) and spec.box == (64, 128, 1)
    assert "matrices" in tma.Batched3D("fp16", 4096, 100, 64, 64, 64, batches=0).problem()
    assert "multiple of 8" in tma.Batched3D("fp16", 4096, 100, 60, 64, 64, batches=2).problem()
    calls = []

    def fake_encode(out, dtype, rank, address, dims, strides, box, element_strides, interleave, swizzle, l2, oob):
        calls.append((dtype, rank, list(dims), list(strides), list(box), list(element_strides), swizzle, oob))
        ctypes.memmove(out.value, bytes(128), 128)
        return 0

    tma.encode(spec, encoder=fake_encode)
    # rank 3: {d, N, heads}, two byte strides, a box of one matrix, 128-byte swizzle, zero fill
    assert calls == [(9, 3, [128, 1000, 48], [256, 256_000], [64, 128, 1], [1, 1, 1], 3, 0)]


def test_registration(registry):
    impl = registry.implementations("attention")["cuda-fa3"]
    assert impl.needs.min_cc == (9, 0) and impl.needs.dtypes == ("fp16", "bf16")
    assert impl.params == {"block_n": "auto", "stages": 2, "overlap": 1, "pingpong": 1, "persistent": 1,
                           "dynamic": 1, "narrow_tail": 1, "chains": 1, "consumers": "auto",
                           "rescale": 8}
    from kbench.registry import _param_value

    with pytest.raises(UserError, match="chains"):
        _param_value(impl, "chains", "3")

    assert _param_value(impl, "block_n", "64") == "64"
    with pytest.raises(UserError, match="block_n"):
        _param_value(impl, "block_n", "96")
    with pytest.raises(UserError, match="consumers"):
        _param_value(impl, "consumers", "4")
    with pytest.raises(UserError, match="fewer than 1"):
        _param_value(impl, "stages", "0")


def test_auto_tiles_follow_the_head_dim(fa3):
    assert fa3.resolved(128, "auto", "auto") == (176, 2)
    assert fa3.resolved(64, "auto", "auto") == (128, 3)
    assert fa3.resolved(64, "176", "auto") == (176, 2)  # three consumers take at most 128 keys
    assert fa3.resolved(64, "auto", "2") == (176, 2)
    assert fa3.resolved(128, "128", "auto") == (128, 2)


def test_explain_describes_roles_instructions_and_pipeline(registry):
    impl = registry.implementations("attention")["cuda-fa3"]
    figures = impl.explain(case(), impl.params)
    assert figures["grid"].startswith("32 Q tiles of 128 rows x 32 (batch x heads) = 1,024 units; 132 persistent "
                                      "blocks, each taking the next unit nobody has taken from a counter (132 "
                                      "SMs on an H200, 7.76 units a block)")
    static = impl.explain(case(), dict(impl.params, dynamic=0))["grid"]
    assert "132 persistent blocks, block b taking units b, b + blocks, ..." in static
    assert figures["warpgroups"].startswith("1 producer (one thread issues every TMA load; setmaxnreg 24) + 2 consumers")
    # The default K/V tile is 176 keys: S is m64n176 (8 k-steps of d=128), P V 11 k-steps of 16 keys.
    assert figures["wgmma per K/V tile and consumer"].startswith("S = Q Kᵀ: 8 x m64n176k16.f32.f16")
    assert "O += P V: 11 x m64n128k16.f32.f16 (A = P from registers" in figures["wgmma per K/V tile and consumer"]
    assert figures["TMA boxes"].startswith("Q 2 x {64, 128, 1} once; K and V 2 x {64, 176, 1} each per tile (44 KiB")
    assert figures["pipeline"].startswith("2 stages of K + V = 88 KiB each")
    assert figures["K/V tiles per block"] == "24 of 176 keys"
    # 4096 = 23 x 176 + 48: the last tile is multiplied 64 keys wide, or at full width without narrow_tail
    assert figures["last K/V tile"].startswith("48 of 176 keys: narrow, S by m64n64k16 and P V by 4 k-steps")
    assert impl.explain(case(), dict(impl.params, narrow_tail=0))["last K/V tile"] == (
        "48 of 176 keys, multiplied at full width (the keys past N masked)")
    assert impl.explain(case(n=4000), impl.params)["last K/V tile"].startswith("128 of 176 keys, multiplied at full")
    assert "ping-pong" in figures["schedule"] and "the wait for O += P V before its exponents" in figures["schedule"]
    assert figures["softmax"].startswith("a thread's 44 scores of each of its two rows reduced (max, then sum) in "
                                         "1 independent chain of 44")
    assert "in 4 independent chains of 11" in impl.explain(case(), dict(impl.params, chains=4))["softmax"]
    assert figures["registers per consumer thread"].startswith("O 64 + S 88 fp32 accumulators, P 44 x 32-bit")
    square = impl.explain(case(), dict(impl.params, block_n=128))
    assert square["wgmma per K/V tile and consumer"].startswith("S = Q Kᵀ: 8 x m64n128k16.f32.f16")
    assert "O += P V: 8 x m64n128k16.f32.f16" in square["wgmma per K/V tile and consumer"]
    assert square["pipeline"].startswith("2 stages of K + V = 64 KiB each")
    assert square["last K/V tile"] == "full (128 keys)"
    assert square["registers per consumer thread"].startswith("O 64 + S 64 fp32 accumulators, P 32 x 32-bit")
    causal = impl.explain(case(d=64, causal=True), dict(impl.params, block_n=64, overlap=0, pingpong=0,
                                                          persistent=0))
    assert causal["grid"].endswith("the longest (last) Q tiles first in sections of 32 heads; one block each")
    assert causal["K/V tiles per block"] == "1 to 64 of 64 keys (causal: up to the diagonal of the block's last row)"
    assert causal["schedule"] == "S, softmax, O += P V in sequence"
    assert impl.explain(case(d=96), impl.params)["configuration"].startswith("not runnable: head dim 96")
    three = impl.explain(case(d=64), dict(impl.params, block_n=128, consumers=3))
    assert three["warpgroups"].startswith("1 producer (one thread issues every TMA load; setmaxnreg 32) + 3 consumers")
    assert three["warpgroups"].endswith("setmaxnreg 160)")
    assert three["grid"].startswith("22 Q tiles of 192 rows x 32 (batch x heads) = 704 units")
    assert three["schedule"].endswith("the 3 consumers take turns at the tensor cores (ping-pong, in a ring)")
    assert three["TMA boxes"].startswith("Q 1 x {64, 192, 1} once")


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed: no ptxas figures")
def test_explain_reads_ptxas_for_sm90a_and_the_default_does_not_spill(registry):
    impl = registry.implementations("attention")["cuda-fa3"]
    figures = impl.explain(case(n=512), impl.params)
    assert figures["registers per thread"].endswith("(ptxas (sm_90a, nvcc))")
    assert figures["spills per thread"] == "0 bytes stored, 0 loaded"


def test_skipped_without_a_hopper_gpu(registry):
    from kbench.registry import skip_reason

    impl = registry.implementations("attention")["cuda-fa3"]
    assert skip_reason(impl, case(), "cuda", (8, 0))  # an A100: below sm_90


def test_causal_sections_keep_their_k_and_v_within_32_mib(fa3):
    # K and V of one head: 2 x N x d x 2 bytes. N=4096, d=128: 2 MiB, so 16 heads a section; N=16384: 4.
    assert fa3.section_heads(case(n=4096, causal=True)) == 16
    assert fa3.section_heads(case(n=16384, causal=True)) == 4
    assert fa3.section_heads(case(n=16384, d=64, causal=True)) == 8
    assert fa3.section_heads(case(n=3000, causal=True)) == 16  # 32 MiB / 1.46 MiB = 21, rounded down to 16
    assert fa3.section_heads(case(n=1 << 20, causal=True)) == 1  # one head's K and V past 32 MiB
    assert fa3.section_heads(case(n=256, batch=1, heads=3, causal=True)) == 3  # at most every head


def test_wgmma_count_per_call(fa3):
    # N=4096, d=128, 176-key tiles: 1,024 units; each consumer warpgroup multiplies 23 full tiles (8 + 11
    # k-steps) and one narrow tile of 48 keys (8 + 4), and each of its 4 warps issues every wgmma.
    assert fa3.wgmma_per_call(case(), 176, True) == 1024 * (23 * 19 + 12) * 2 * 4
    assert fa3.wgmma_per_call(case(), 176, False) == 1024 * 24 * 19 * 2 * 4
    # Causal, 128-key tiles on 128-row Q tiles: Q tile i takes i + 1 tiles of 8 + 8 k-steps.
    assert fa3.wgmma_per_call(case(causal=True), 128, True) == 32 * sum(i + 1 for i in range(32)) * 16 * 2 * 4
    # Causal, N=300, 176-key tiles: Q tile 0 (rows 0-127) takes one tile, 1 and 2 take two; the second
    # tile holds 124 keys, past the narrow width, so every tile is full (d=64: 4 + 11 k-steps).
    assert fa3.wgmma_per_call(case(n=300, d=64, batch=1, heads=1, causal=True), 176, True) == (1 + 2 + 2) * 15 * 8
