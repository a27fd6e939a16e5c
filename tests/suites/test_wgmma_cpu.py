"""The Hopper wgmma matmul without a GPU: its launch plans and refusals, its TMA tensor-map arguments,
and (where nvcc is installed) the layout arithmetic of wgmma.cu itself, built for the host and checked
against independent models: the tile order against the Python one, the wgmma shared-memory
descriptors against where the TMA unit puts each element of A and B (128-byte swizzle), and the
accumulator positions against CUTLASS's layout of wgmma's D fragment.

Whether the kernel is right on an H200 is tests/gpu/test_matmul_gpu.py's job."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest
import torch

from kbench.errors import UserError
from kbench.loader import BUILTIN_KERNELS, load_helper
from kbench.registry import Unsupported
from kbench.suite import Case
from kernel_modules import load_kernel_module

MATMUL = BUILTIN_KERNELS / "matmul"
NVCC = shutil.which("nvcc")
TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


@pytest.fixture(scope="module")
def wg():
    return load_kernel_module(MATMUL / "wgmma.py")


@pytest.fixture(scope="module")
def tma():
    return load_helper(BUILTIN_KERNELS / "_tensor_map.py")


def case(m, n, k, dtype="fp16"):
    return Case({"m": m, "n": n, "k": k, "dtype": dtype, "tf32": False})


def operands(m, n, k, dtype="fp16"):
    t = TORCH[dtype]
    return torch.zeros(m, k, dtype=t), torch.zeros(k, n, dtype=t), torch.zeros(m, n, dtype=t)


def plan(wg, m, n, k, dtype="fp16", block_m=128, block_n=256, stages=4, group_m=8, variant="ws", **kw):
    return wg.plan(case(m, n, k, dtype), *operands(m, n, k, dtype), block_m, block_n, stages, group_m, variant, **kw)


# --- launch plans -----------------------------------------------------------------------------------


def test_default_plan_is_persistent_and_warp_specialized(wg):
    p = plan(wg, 4096, 4096, 4096)
    assert p["name"] == "matmul_wgmma_ws<128, 256, 4, false>"
    assert p["tiles"] == (32, 16)
    assert p["grid"] == (132,)  # one block per SM: 512 tiles, fewer blocks
    assert p["block"] == (384,)  # producer + two consumer warpgroups
    # 4 stages of A 128x64 and B 64x256 (16 + 32 KiB), 8 mbarriers, 1 KiB of alignment slack
    assert p["smem"] == 4 * (16384 + 32768) + 64 + 1024


def test_plain_variant_has_one_tile_per_block_and_no_producer(wg):
    p = plan(wg, 4096, 4096, 4096, "bf16", block_n=128, variant="plain")
    assert p["name"] == "matmul_wgmma_plain<128, 128, 4, true>"
    assert p["grid"] == (32 * 32,) and p["block"] == (256,)


def test_small_problems_get_no_more_blocks_than_tiles(wg):
    assert plan(wg, 100, 200, 64)["grid"] == (1,)
    assert plan(wg, 5000, 3000, 7000)["tiles"] == (40, 12)  # the odd shape: K and N multiples of 8
    assert plan(wg, 5000, 3000, 7000, sms=114)["grid"] == (114,)
    assert plan(wg, 64, 64, 8, block_m=64, block_n=64)["block"] == (256,)


def test_tensor_maps_of_a_and_b(wg):
    a, b, c = operands(300, 136, 200)
    map_a, map_b = wg.plan(case(300, 136, 200), a, b, c, 128, 256, 4, 8, "ws")["maps"]
    # dimension 0 is the contiguous one: A is read as {K, M} in boxes of {64, block_m}, B as {N, K} in {64, 64}
    assert (map_a.dims, map_a.strides, map_a.box, map_a.address) == ((200, 300), (400,), (64, 128), a.data_ptr())
    assert (map_b.dims, map_b.strides, map_b.box, map_b.address) == ((136, 200), (272,), (64, 64), b.data_ptr())


@pytest.mark.parametrize("shape, who, multiple", [((64, 64, 333), "A", "must be a multiple of 8"),
                                                   ((64, 777, 64), "B", "must be a multiple of 8"),
                                                   ((64, 64, 12), "A", "24 bytes")])
def test_shapes_tma_cannot_describe_are_refused_with_the_reason(wg, shape, who, multiple):
    with pytest.raises(Unsupported, match=f"TMA cannot read {who}: .*{multiple}"):
        plan(wg, *shape)


def test_misaligned_operands_are_refused(wg):
    a, b, c = operands(64, 64, 64)
    shifted = torch.zeros(64 * 64 + 8, dtype=torch.float16)[8:].view(64, 64)  # 16-byte aligned storage + 16 bytes
    assert shifted.data_ptr() % 16 == 0
    wg.plan(case(64, 64, 64), shifted, b, c, 128, 256, 4, 8, "ws")
    odd = torch.zeros(64 * 64 + 1, dtype=torch.float16)[1:].view(64, 64)
    with pytest.raises(Unsupported, match="TMA cannot read A: the tensor's address is not a multiple of 16"):
        wg.plan(case(64, 64, 64), odd, b, c, 128, 256, 4, 8, "ws")
    with pytest.raises(Unsupported, match="TMA cannot read B"):
        wg.plan(case(64, 64, 64), a, odd, c, 128, 256, 4, 8, "ws")
    with pytest.raises(Unsupported, match="C must be 4-byte aligned"):
        wg.plan(case(64, 64, 64), a, b, odd, 128, 256, 4, 8, "ws")


def test_configurations_and_types_refused(wg):
    with pytest.raises(Unsupported, match="fp16 or bf16"):
        plan(wg, 64, 64, 64, "fp32")
    with pytest.raises(Unsupported, match="block_m=192"):
        plan(wg, 64, 64, 64, block_m=192)
    with pytest.raises(Unsupported, match="block_n=96"):
        plan(wg, 64, 64, 64, block_n=96)
    with pytest.raises(Unsupported, match="stages=1"):
        plan(wg, 64, 64, 64, stages=1)
    with pytest.raises(Unsupported, match="variant='pingpong'"):
        plan(wg, 64, 64, 64, variant="pingpong")
    # 5 stages of 48 KiB do not fit in the H200's 227 KiB a block
    with pytest.raises(Unsupported, match="KiB of shared memory per block"):
        plan(wg, 4096, 4096, 4096, stages=5, smem_limit=232448)
    assert plan(wg, 4096, 4096, 4096, block_n=128, stages=6, smem_limit=232448)["smem"] <= 232448


def test_tiles_of_192_columns_fill_more_of_the_last_wave(wg):
    """5000 x 3000: 40 x 12 = 480 tiles of 128 x 256 are 3.6 waves of 132 SMs, 40 x 16 = 640 tiles of
    128 x 192 are 4.8; a stage of 128 x 192 is 40 KiB, so four fit the H200's 227 KiB."""
    wide, narrow = plan(wg, 5000, 3000, 7000), plan(wg, 5000, 3000, 7000, block_n=192)
    assert wide["tiles"] == (40, 12) and narrow["tiles"] == (40, 16)
    assert narrow["name"] == "matmul_wgmma_ws<128, 192, 4, false>" and narrow["grid"] == (132,)
    assert narrow["smem"] == 4 * (128 * 64 * 2 + 64 * 192 * 2) + 2 * 4 * 8 + 1024
    assert plan(wg, 5000, 3000, 7000, "bf16", block_n=192, cluster=2)["name"] == \
        "matmul_wgmma_ws_cluster2<128, 192, 4, true>"


def test_tile_order_visits_every_tile_once_in_groups(wg):
    for tiles_m, tiles_n, group_m in ((32, 16, 8), (40, 12, 8), (3, 5, 8), (7, 3, 2), (1, 1, 1)):
        seen = [wg.tile_coords(t, tiles_m, tiles_n, group_m) for t in range(tiles_m * tiles_n)]
        assert sorted(seen) == [(m, n) for m in range(tiles_m) for n in range(tiles_n)]
    # down the first group's 8 tile rows, then the next column: consecutive blocks share B's column
    assert [wg.tile_coords(t, 32, 16, 8) for t in (0, 1, 7, 8, 127, 128)] == \
        [(0, 0), (1, 0), (7, 0), (0, 1), (7, 15), (8, 0)]


def test_clusters_of_two_take_neighbouring_tile_rows_of_one_column(wg):
    p = plan(wg, 4096, 4096, 4096, cluster=2)
    assert p["name"] == "matmul_wgmma_ws_cluster2<128, 256, 4, false>" and p["grid"] == (132,)
    assert plan(wg, 300, 512, 64, cluster=2)["grid"] == (8,)  # 3 x 2 tiles: 2 x 2 units, 4 clusters of 2
    assert plan(wg, 5000, 3000, 7000, cluster=2, sms=133)["grid"] == (132,)  # whole clusters only
    # as many clusters as the driver says run at once (a GPC's odd SM makes no cluster), not one per 2 SMs
    assert plan(wg, 4096, 4096, 4096, cluster=2, resident_clusters=62)["grid"] == (124,)
    # the kernel's units (wgmma_ws_body): unit u covers tile rows 2 m' + rank of column n', each tile once
    for tiles_m, tiles_n, group_m in ((32, 16, 8), (40, 12, 8), (3, 5, 8), (7, 3, 2)):
        units_m = -(-tiles_m // 2)
        covered = sorted((2 * um + rank, un) for u in range(units_m * tiles_n)
                         for um, un in [wg.tile_coords(u, units_m, tiles_n, max(1, group_m // 2))] for rank in (0, 1))
        real = [t for t in covered if t[0] < tiles_m]
        assert real == [(m, n) for m in range(tiles_m) for n in range(tiles_n)]
    for kw, message in (({"block_n": 64}, "block_n=64"), ({"variant": "plain"}, "variant=plain"),
                        ({"cluster": 4}, "cluster=4")):
        with pytest.raises(Unsupported, match=message):
            plan(wg, 4096, 4096, 4096, cluster=kw.pop("cluster", 2), **kw)


def test_tma_store_epilogue_stages_c_and_adds_its_map(wg):
    """epilogue=tma: the _store kernels, a third TMA map for C in 64 x 64 boxes, and shared memory for the
    consumers' staging of a 128 x 256 tile (64 KiB), which leaves room for three stages, not four."""
    p = plan(wg, 4096, 4096, 4096, stages=3, cluster=2, epilogue="tma", smem_limit=232448)
    assert p["name"] == "matmul_wgmma_ws_cluster2_store<128, 256, 3, false>"
    assert p["smem"] == 3 * (128 * 64 * 2 + 64 * 256 * 2) + 128 * 256 * 2 + 2 * 3 * 8 + 1024
    map_c = p["maps"][2]
    assert len(p["maps"]) == 3 and (map_c.rows, map_c.cols, map_c.box_rows, map_c.box_cols) == (4096, 4096, 64, 64)
    assert map_c.swizzle_bytes == 128  # stage_tile's chunk ^ row % 8
    assert plan(wg, 5000, 3000, 7000, "bf16", stages=3, epilogue="tma")["name"] == \
        "matmul_wgmma_ws_store<128, 256, 3, true>"
    assert len(plan(wg, 4096, 4096, 4096)["maps"]) == 2  # the direct epilogue: A and B only
    with pytest.raises(Unsupported, match="KiB of shared memory per block"):
        plan(wg, 4096, 4096, 4096, epilogue="tma", smem_limit=232448)  # four stages and the staging
    with pytest.raises(Unsupported, match="epilogue=tma with variant=plain"):
        plan(wg, 4096, 4096, 4096, variant="plain", epilogue="tma")
    with pytest.raises(Unsupported, match="epilogue='smem' is not one of direct, tma"):
        plan(wg, 4096, 4096, 4096, epilogue="smem")


def test_registration(registry):
    impl = registry.implementations("matmul")["wgmma"]
    assert impl.needs.min_cc == (9, 0) and impl.needs.dtypes == ("fp16", "bf16")
    assert impl.params == {"block_m": 128, "block_n": 256, "stages": 3, "group_m": 8, "variant": "ws",
                           "l2_promotion": 128, "cluster": "auto", "epilogue": "auto"}
    from kbench.registry import _param_value

    assert _param_value(impl, "cluster", "2") == "2" and _param_value(impl, "cluster", "auto") == "auto"
    with pytest.raises(UserError, match="not one of auto, 1, 2"):
        _param_value(impl, "cluster", "4")
    with pytest.raises(UserError, match="'fast' is not one of auto, direct, tma"):
        _param_value(impl, "epilogue", "fast")
    assert _param_value(impl, "epilogue", "auto") == "auto"

    assert _param_value(impl, "variant", "plain") == "plain"
    with pytest.raises(UserError, match="not one of ws, plain"):
        _param_value(impl, "variant", "simple")
    with pytest.raises(UserError, match="fewer than 2"):
        _param_value(impl, "stages", "1")


def test_explain_describes_roles_instructions_and_schedule(registry):
    impl = registry.implementations("matmul")["wgmma"]
    single = dict(impl.params, cluster=1, epilogue="direct", stages=4)
    figures = impl.explain(case(4096, 4096, 4096), single)
    assert figures["kernel"] == "matmul_wgmma_ws<128, 256, 4, false>"
    assert figures["warpgroups"].startswith("1 producer (one thread issues the TMA loads; setmaxnreg 40) + 2 consumers")
    assert figures["wgmma"].startswith("m64n256k16 .f32.f16")
    assert "4 per stage and warpgroup, 512 per tile (64 k-steps of 64)" in figures["wgmma"]
    assert figures["tile schedule"].startswith("32 x 16 = 512 tiles of 128 x 256 on 132 persistent blocks")
    # 512 tiles on 132 blocks: 4 rounds, the last with 116 blocks busy, 97 % of the 528 slots
    assert figures["tile schedule"].endswith("4 rounds, the last with 116 of 132 blocks busy (97% of the rounds' slots used)")
    odd_wide = impl.explain(case(5000, 3000, 7000), single)["tile schedule"]
    odd_narrow = impl.explain(case(5000, 3000, 7000), dict(single, block_n=192))["tile schedule"]
    assert odd_wide.endswith("4 rounds, the last with 84 of 132 blocks busy (91% of the rounds' slots used)")
    assert odd_narrow.endswith("5 rounds, the last with 112 of 132 blocks busy (97% of the rounds' slots used)")
    assert figures["pipeline"].startswith("4 stages of 48 KiB (A 16 KiB in one TMA box, B 32 KiB in 4 boxes")
    assert "read into L2 128 bytes at a time" in figures["pipeline"]
    assert figures["epilogue"].startswith("C stored from the accumulator registers")
    staged = impl.explain(case(4096, 4096, 4096), impl.params)  # epilogue=auto: TMA stores for ws
    assert staged["kernel"] == "matmul_wgmma_ws_cluster2_store<128, 256, 3, false>"
    assert staged["epilogue"].startswith("each consumer stages its 64 x 256 slice of C in shared memory (4 boxes")
    assert "the staging of C" in staged["pipeline"]
    wider = impl.explain(case(4096, 4096, 4096), dict(single, l2_promotion=256))
    assert "read into L2 256 bytes at a time" in wider["pipeline"]
    # cluster=auto: one block where clusters do not apply (no warp specialization), two by default
    plain = impl.explain(case(4096, 4096, 4096, "bf16"), dict(impl.params, variant="plain", block_n=128))
    assert plain["kernel"] == "matmul_wgmma_plain<128, 128, 3, true>"  # epilogue=auto: register stores
    assert plain["epilogue"].startswith("C stored from the accumulator registers")
    assert plain["tile schedule"].startswith("32 x 32 = 1,024 tiles of 128 x 128, one per block")
    clustered = impl.explain(case(4096, 4096, 4096), dict(impl.params, epilogue="direct", stages=4))
    assert clustered["clusters"].startswith("66 clusters of 2 blocks") and "every other one of the 4 B boxes" in \
        clustered["clusters"]
    assert clustered["kernel"] == "matmul_wgmma_ws_cluster2<128, 256, 4, false>"
    assert clustered["tile schedule"].endswith("4 rounds, the last with 58 of 66 clusters busy (97% of the rounds' slots used)")
    assert impl.explain(case(4096, 4096, 4096), dict(impl.params, block_m=64))["kernel"] == \
        "matmul_wgmma_ws_store<64, 256, 3, false>"  # auto: clusters only for the 128-row tiles measured so
    odd = impl.explain(case(1000, 777, 333), impl.params)
    assert odd["configuration"].startswith("not runnable: TMA cannot read A")


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed: no ptxas figures")
def test_explain_reads_ptxas_for_sm90a(registry):
    impl = registry.implementations("matmul")["wgmma"]
    figures = impl.explain(case(512, 512, 512), impl.params)
    assert figures["registers per thread"].endswith("(ptxas (sm_90a, nvcc))")
    assert figures["spills per thread"] == "0 bytes stored, 0 loaded"


# --- tensor maps ------------------------------------------------------------------------------------


def test_tensor_map_requirements(tma):
    ok = tma.Tiled2D("fp16", 4096, rows=300, cols=200, box_rows=128, box_cols=64)
    assert ok.problem() is None
    assert "multiple of 8" in tma.Tiled2D("bf16", 4096, 300, 204, 128, 64).problem()
    assert "multiple of 4" in tma.Tiled2D("fp32", 4096, 300, 202, 128, 32).problem()
    assert "16 bytes" in tma.Tiled2D("fp16", 4104 + 2, 300, 200, 128, 64).problem()
    assert "between 1 and 256" in tma.Tiled2D("fp16", 4096, 300, 200, 512, 64).problem()
    assert "wider than the 128-byte swizzle" in tma.Tiled2D("fp16", 4096, 300, 200, 128, 128).problem()
    assert "no TMA data type" in tma.Tiled2D("int8", 4096, 300, 200, 128, 64).problem()


def test_tensor_map_encoding_passes_the_drivers_arguments(tma):
    calls = []

    def fake_encode(out, dtype, rank, address, dims, strides, box, element_strides, interleave, swizzle, l2, oob):
        calls.append((dtype, rank, address.value, list(dims), list(strides), list(box), list(element_strides),
                      interleave, swizzle, l2, oob))
        ctypes.memmove(out.value, bytes(range(128)), 128)
        return 0

    spec = tma.Tiled2D("bf16", 0x7F0000001000, rows=5000, cols=7000, box_rows=128, box_cols=64)
    record = tma.encode(spec, encoder=fake_encode)
    # CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank 2, {K, M}, row stride in bytes, box {64, 128}, no interleave,
    # CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, zero fill
    assert calls == [(9, 2, 0x7F0000001000, [7000, 5000], [14000], [64, 128], [1, 1], 0, 3, 3, 0)]
    # another L2 promotion: CU_TENSOR_MAP_L2_PROMOTION_L2_128B, NONE
    tma.encode(tma.Tiled2D("bf16", 0x7F0000001000, 5000, 7000, 128, 64, l2_promotion=128), encoder=fake_encode)
    tma.encode(tma.Tiled2D("bf16", 0x7F0000001000, 5000, 7000, 128, 64, l2_promotion=0), encoder=fake_encode)
    assert [call[9] for call in calls[1:]] == [2, 0]
    assert "an L2 promotion of 96 bytes" in tma.Tiled2D("bf16", 4096, 64, 64, 64, 64, l2_promotion=96).problem()
    # the kernel argument: one 128-byte record (CuPy passes a size-1 numpy array by value), 64-byte aligned
    assert record.shape == (1,) and record.size == 1 and record.dtype.itemsize == 128
    assert record.ctypes.data % 64 == 0
    assert record.tobytes() == bytes(range(128))


def test_tensor_map_encoding_failures(tma):
    with pytest.raises(ValueError, match="multiple of 16"):
        tma.encode(tma.Tiled2D("fp16", 4096, 64, 60, 64, 64), encoder=lambda *args: 0)
    with pytest.raises(RuntimeError, match="CUresult 1"):
        tma.encode(tma.Tiled2D("fp16", 4096, 64, 64, 64, 64), encoder=lambda *args: 1)


# --- wgmma.cu's layout arithmetic, built for the host -------------------------------------------------

HOST_PROGRAM = r"""
#include "wgmma.cu"
#include <cstdio>
using namespace kbench_wgmma;
int main() {
    const int shapes[][3] = {{32, 16, 8}, {40, 12, 8}, {3, 5, 8}, {7, 3, 2}};
    for (const auto& s : shapes)
        for (int t = 0; t < s[0] * s[1]; ++t) {
            const TileCoords c = tile_coords(t, s[0], s[1], s[2]);
            std::printf("tile %d %d %d %d %d %d\n", s[0], s[1], s[2], t, c.m, c.n);
        }
    const unsigned bases[][2] = {{0x400, 0x400 + 4 * 16384}, {0x10000, 0x10000 + 6 * 16384}};
    for (const auto& base : bases)
        for (int g = 0; g < 2; ++g)
            for (int kk = 0; kk < BK / 16; ++kk) {
                const StageDescriptors d = stage_descriptors(base[0] + g * 64 * 128, base[1], kk);
                std::printf("desc %u %u %d %d %llu %llu\n", base[0], base[1], g, kk, d.a, d.b);
            }
    for (int t = 0; t < 128; ++t)
        for (int i = 0; i < 128; ++i) {
            const Position p = accumulator_position(t, i);
            std::printf("acc %d %d %d %d\n", t, i, p.row, p.col);
        }
    return 0;
}
"""


@pytest.fixture(scope="module")
def host_output(tmp_path_factory):
    if NVCC is None:
        pytest.skip("nvcc is not installed: wgmma.cu's host-side arithmetic not built")
    tmp = tmp_path_factory.mktemp("wgmma-host")
    (tmp / "host.cu").write_text(HOST_PROGRAM)
    from kbench.kernel_resources import arch_flags

    built = subprocess.run([NVCC, "-std=c++17", f"-I{MATMUL}", f"-I{BUILTIN_KERNELS / '_cuda'}",
                            *arch_flags("sm_90a"), "-o", str(tmp / "host"), str(tmp / "host.cu")],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    ran = subprocess.run([str(tmp / "host")], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    rows: dict[str, list[list[int]]] = {}
    for line in ran.stdout.splitlines():
        kind, *values = line.split()
        rows.setdefault(kind, []).append([int(v) for v in values])
    return rows


def test_host_tile_order_matches_python(wg, host_output):
    assert len(host_output["tile"]) == 32 * 16 + 40 * 12 + 3 * 5 + 7 * 3
    for tiles_m, tiles_n, group_m, tile, m, n in host_output["tile"]:
        assert (m, n) == wg.tile_coords(tile, tiles_m, tiles_n, group_m)


def swizzle_128b(address: int) -> int:
    """The 128-byte swizzle of TMA and wgmma: 16-byte chunk bits [4, 7) XOR row bits [7, 10) of the address."""
    return address ^ (((address >> 7) & 7) << 4)


def decode(desc: int) -> tuple[int, int, int]:
    """(start, LBO, SBO) in bytes of a wgmma shared-memory descriptor, checking the other fields."""
    assert desc >> 62 == 1, "swizzle mode 1: 128-byte"
    assert (desc >> 49) & 7 == 0, "base offset 0"
    return (desc & 0x3FFF) << 4, ((desc >> 16) & 0x3FFF) << 4, ((desc >> 32) & 0x3FFF) << 4


def k_major_address(desc: int, row: int, k: int) -> int:
    """Where wgmma reads element (row, k) of a 64 x 16 K-major operand with the 128-byte swizzle: the
    canonical layout ((8, m), 2) : ((8, SBO), 1) in 16-byte units (PTX ISA; CUTLASS make_gmma_desc)."""
    start, _, sbo = decode(desc)
    return swizzle_128b(start + (row % 8) * 128 + (row // 8) * sbo + (k // 8) * 16 + (k % 8) * 2)


def mn_major_address(desc: int, k: int, col: int) -> int:
    """Where wgmma reads element (k, col) of a 16 x N MN-major operand with the 128-byte swizzle: the
    canonical layout ((8, n), (8, k)) : ((1, LBO), (8, SBO)) in 16-byte units."""
    start, lbo, sbo = decode(desc)
    return swizzle_128b(start + (col % 64) * 2 + (col // 64) * lbo + (k % 8) * 128 + (k // 8) * sbo)


def tma_stage(base_a: int, base_b: int, block_m: int, block_n: int) -> dict[int, tuple]:
    """Shared memory after one stage's TMA loads as wgmma.cu issues them: byte address -> element.
    A's box (block_m rows of 64 k) at base_a; B's boxes (64 k rows of 64 n) at base_b + j * 8192."""
    smem = {}
    for row in range(block_m):
        for k in range(64):
            smem[swizzle_128b(base_a + row * 128 + k * 2)] = ("A", row, k)
    for j in range(block_n // 64):
        for k in range(64):
            for c in range(64):
                smem[swizzle_128b(base_b + j * 8192 + k * 128 + c * 2)] = ("B", k, 64 * j + c)
    return smem


def test_host_descriptors_read_what_tma_wrote(host_output):
    """Every element each wgmma of a stage reads is the element of A or B it multiplies: A rows
    64g .. 64g+63 and k 16kk .. 16kk+15, B k 16kk .. 16kk+15 and every column."""
    rows = host_output["desc"]
    assert len(rows) == 2 * 2 * 4
    for base_a, base_b, group, kk, desc_a, desc_b in rows:
        smem = tma_stage(base_a, base_b, 128, 256)
        for row in range(64):
            for k in range(16):
                assert smem[k_major_address(desc_a, row, k)] == ("A", 64 * group + row, 16 * kk + k)
        for k in range(16):
            for col in range(256):
                assert smem[mn_major_address(desc_b, k, col)] == ("B", 16 * kk + k, col)


def test_host_accumulator_positions_match_the_wgmma_d_layout(host_output):
    """CUTLASS's CLayout_64xN of wgmma's D: (thread, value) -> m + 64 n, with thread shape (4, 8, 4) and
    stride (128, 1, 16), value shape (2, 2, N/8) and stride (64, 8, 512). Each of the 64 x 256 elements once."""
    seen = set()
    for t, i, row, col in host_output["acc"]:
        t0, t1, t2 = t % 4, (t // 4) % 8, t // 32
        v0, v1, v2 = i % 2, (i // 2) % 2, i // 4
        offset = 128 * t0 + t1 + 16 * t2 + 64 * v0 + 8 * v1 + 512 * v2
        assert (row, col) == (offset % 64, offset // 64)
        seen.add((row, col))
    assert len(seen) == 64 * 256


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed: CUDA sources not compiled")
def test_wgmma_source_refuses_a_target_without_wgmma(tmp_path):
    done = subprocess.run([NVCC, "-std=c++17", "-DKBENCH_INSTANTIATE", f"-I{BUILTIN_KERNELS / '_cuda'}",
                           "-arch=sm_90", "-cubin", "-o", str(tmp_path / "out.cubin"), str(MATMUL / "wgmma.cu")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode != 0
    assert "compile it for sm_90a" in done.stderr
