"""The CuPy matmul kernels' host-side logic, on the CPU: configuration checks, launch plans
(kernel name, grid, block, shared memory, which load path), and the reasons a case is refused.

Nothing here runs a kernel (that needs a GPU: the `gpu` tests and `kbench run matmul`)."""

from __future__ import annotations

import re

import pytest
import torch

from kbench.loader import BUILTIN_KERNELS
from kbench.registry import Unsupported
from kbench.suite import Case
from kernel_modules import load_kernel_module

MATMUL = BUILTIN_KERNELS / "matmul"
TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def load(stem: str):
    return load_kernel_module(MATMUL / f"{stem}.py")


@pytest.fixture(scope="module")
def mods():
    return {stem: load(stem) for stem in ("tiled_smem", "tiled_regblock", "wmma", "wmma_smem")}


def case(m, n, k, dtype="fp16"):
    return Case({"m": m, "n": n, "k": k, "dtype": dtype, "tf32": False})


def operands(m, n, k, dtype="fp16"):
    t = TORCH[dtype]
    return torch.zeros(m, k, dtype=t), torch.zeros(k, n, dtype=t), torch.zeros(m, n, dtype=t)


def misaligned(rows, cols, dtype):
    """A contiguous (rows x cols) view starting one element into its storage: not 16-byte aligned."""
    return torch.zeros(rows * cols + 1, dtype=TORCH[dtype])[1:].view(rows, cols)


# --- tiled-smem -------------------------------------------------------------------


def test_tiled_smem_plan(mods):
    p = mods["tiled_smem"].plan(case(1000, 777, 333, "fp32"), None, None, None, 16)
    assert p["name"] == "matmul_tiled_smem<16>"
    assert p["grid"] == (49, 63)  # ceil(777/16), ceil(1000/16)
    assert p["block"] == (16, 16)
    assert mods["tiled_smem"].plan(case(1, 1, 1, "fp32"), None, None, None, 32)["grid"] == (1, 1)


def test_tiled_smem_refusals(mods):
    with pytest.raises(Unsupported, match="tile=12"):
        mods["tiled_smem"].plan(case(16, 16, 16, "fp32"), None, None, None, 12)
    with pytest.raises(Unsupported, match="fp32 only"):
        mods["tiled_smem"].plan(case(16, 16, 16, "fp16"), None, None, None, 16)
    with pytest.raises(Unsupported, match="grid"):  # 16 · 65536 rows: grid.y > 65535
        mods["tiled_smem"].plan(case(16 * 65536, 16, 16, "fp32"), None, None, None, 16)


# --- tiled-regblock ---------------------------------------------------------------


def test_regblock_configurations(mods):
    check = mods["tiled_regblock"].check_config
    assert check(128, 128, 8, 8, 8) is None  # the default: 256 threads
    assert check(64, 64, 16, 4, 4) is None
    assert "runs of 4" in check(128, 128, 8, 6, 8)
    assert "divide" in check(100, 128, 8, 8, 8)
    assert "threads per block" in check(256, 256, 8, 4, 4)  # 4096 threads
    assert "float4" in check(64, 64, 8, 4, 4)  # 512-float tiles for 256 threads: half a float4 each
    assert "static shared memory" in check(256, 128, 32, 16, 8)
    assert mods["tiled_regblock"].smem_bytes(128, 128, 8) == 2 * 8 * (132 + 128) * 4


@pytest.mark.parametrize(
    "shape, vec", [((4096, 4096, 4096), True), ((1000, 777, 333), False), ((128, 130, 128), False),
                   ((128, 128, 130), False), ((17, 20, 8), True)],
)
def test_regblock_vector_path_needs_k_and_n_multiples_of_4(mods, shape, vec):
    m, n, k = shape
    p = mods["tiled_regblock"].plan(case(m, n, k, "fp32"), *operands(m, n, k, "fp32"), 128, 128, 8, 8, 8)
    assert p["vec"] is vec
    assert p["name"] == f"matmul_regblock<128, 128, 8, 8, 8, {'true' if vec else 'false'}>"
    assert p["grid"] == (-(-n // 128), -(-m // 128)) and p["block"] == (256,)


def test_regblock_vector_path_needs_aligned_tensors(mods):
    a, b, c = operands(64, 64, 64, "fp32")
    a = misaligned(64, 64, "fp32")
    assert a.is_contiguous() and a.data_ptr() % 16 != 0
    assert mods["tiled_regblock"].plan(case(64, 64, 64, "fp32"), a, b, c, 64, 64, 16, 4, 4)["vec"] is False


# --- wmma -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_wmma_plan(mods, dtype):
    p = mods["wmma"].plan(case(1000, 777, 333, dtype), *operands(1000, 777, 333, dtype), 2, 2)
    assert p["name"] == f"matmul_wmma<2, 2, {'true' if dtype == 'bf16' else 'false'}>"
    assert p["grid"] == (25, 32)  # ceil(777/32), ceil(1000/32)
    assert p["block"] == (128,)
    assert p["direct"] is False  # K = 333: fragments are staged through shared memory


@pytest.mark.parametrize(
    "shape, direct", [((4096, 4096, 4096), True), ((17, 17, 17), False), ((33, 40, 24), True),
                      ((16, 16, 12), False), ((16, 12, 16), False), ((1, 8, 8), True)],
)
def test_wmma_direct_loads_need_k_and_n_multiples_of_8(mods, shape, direct):
    m, n, k = shape
    assert mods["wmma"].plan(case(m, n, k), *operands(m, n, k), 2, 2)["direct"] is direct


def test_wmma_direct_loads_need_32_byte_aligned_inputs(mods):
    _, b, c = operands(64, 64, 64)
    a = misaligned(64, 64, "fp16")
    assert mods["wmma"].plan(case(64, 64, 64), a, b, c, 2, 2)["direct"] is False


def test_wmma_refusals(mods):
    with pytest.raises(Unsupported, match="fp16 or bf16"):
        mods["wmma"].plan(case(16, 16, 16, "fp32"), *operands(16, 16, 16, "fp32"), 2, 2)
    with pytest.raises(Unsupported, match="warps"):
        mods["wmma"].plan(case(16, 16, 16), *operands(16, 16, 16), 8, 8)


# --- wmma-smem --------------------------------------------------------------------

DEFAULT = {"block_m": 128, "block_n": 128, "block_k": 32, "warps": 8, "stages": 3, "group_m": 8}


def test_wmma_smem_shared_memory(mods):
    smem = mods["wmma_smem"].smem_bytes
    # 3 stages of A (128 rows of 32+8 halves) and B (32 rows of 128+8 halves): 55.5 KiB, above 48 KiB.
    assert smem(128, 128, 32, 8, 3) == 3 * (128 * 40 + 32 * 136) * 2 == 56832
    assert smem(128, 256, 32, 8, 4) == 4 * (128 * 40 + 32 * 264) * 2
    assert smem(16, 16, 16, 1, 2) == 2 * (16 * 24 + 16 * 24) * 2  # the pipeline: more than the 1 KiB epilogue
    assert smem(32, 32, 16, 16, 2) == 16 * 1024  # 16 warps' epilogue scratch is the larger


def test_wmma_smem_configurations(mods):
    check = mods["wmma_smem"].check_config
    assert check(**DEFAULT) is None
    assert check(**{**DEFAULT, "warps": 4}) is None  # 2 x 2 warps of 64x64
    assert check(**{**DEFAULT, "block_n": 256}) is None  # 2 x 4 warps of 64x64
    assert check(**{**DEFAULT, "block_k": 64, "stages": 4}) is None
    assert "not one of" in check(**{**DEFAULT, "warps": 3})
    assert "warp rows" in check(**{**DEFAULT, "block_m": 48})
    assert "warp columns" in check(**{**DEFAULT, "block_n": 96})
    assert "accumulator fragments" in check(**{**DEFAULT, "warps": 4, "block_n": 256})  # 64x128 warp tile
    assert "multiple of 16" in check(**{**DEFAULT, "block_k": 24})
    assert "at least 2" in check(**{**DEFAULT, "stages": 1})
    assert "group_m" in check(**{**DEFAULT, "group_m": 0})
    assert "16-byte chunks" in check(block_m=32, block_n=64, block_k=16, warps=8, stages=2, group_m=1)
    # 128 threads cannot each copy one column of a 192-wide B tile's 24 chunks a row
    assert "multiple of the 16-byte chunks" in check(**{**DEFAULT, "warps": 4, "block_m": 64, "block_n": 192})


def test_wmma_smem_warp_grid(mods):
    assert mods["wmma_smem"].warp_grid(8) == (2, 4)
    assert mods["wmma_smem"].warp_grid(4) == (2, 2)
    assert mods["wmma_smem"].warp_grid(1) == (1, 1)


@pytest.mark.parametrize(
    "shape, use_async", [((4096, 4096, 4096), True), ((1000, 777, 333), False), ((128, 128, 132), False),
                         ((128, 132, 128), False), ((130, 264, 200), True)],
)
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_wmma_smem_plan(mods, shape, use_async, dtype):
    m, n, k = shape
    p = mods["wmma_smem"].plan(case(m, n, k, dtype), *operands(m, n, k, dtype), **DEFAULT, smem_limit=227 * 1024)
    bf16 = "true" if dtype == "bf16" else "false"
    assert p["async"] is use_async
    assert p["name"] == f"matmul_wmma_smem<128, 128, 32, 2, 4, 3, {bf16}, {'true' if use_async else 'false'}, true, 1, false>"
    api = mods["wmma_smem"].plan(case(m, n, k, dtype), *operands(m, n, k, dtype), **DEFAULT, loads="api")
    assert api["name"].endswith(", false, 1, false>")
    assert p["grid"] == (-(-m // 128) * -(-n // 128),)  # one block per tile, 1-D (grouped raster in the kernel)
    assert p["block"] == (256,) and p["smem"] == 56832


def test_wmma_smem_refusals(mods):
    ops = operands(64, 64, 64)
    with pytest.raises(Unsupported, match=r"KiB of shared memory per block; this GPU allows 48.0 KiB"):
        mods["wmma_smem"].plan(case(64, 64, 64), *ops, **DEFAULT, smem_limit=48 * 1024)
    with pytest.raises(Unsupported, match="fp16 or bf16"):
        mods["wmma_smem"].plan(case(64, 64, 64, "fp32"), *operands(64, 64, 64, "fp32"), **DEFAULT)
    with pytest.raises(Unsupported, match="warps=3"):
        mods["wmma_smem"].plan(case(64, 64, 64), *ops, **{**DEFAULT, "warps": 3})


def test_wmma_smem_async_needs_aligned_tensors(mods):
    a, b, _ = operands(64, 64, 64)
    c = misaligned(64, 64, "fp16")
    assert mods["wmma_smem"].plan(case(64, 64, 64), a, b, c, **DEFAULT)["async"] is False


# --- shared operand checks -----------------------------------------------------------


def test_operands_are_checked(mods):
    common = mods["wmma"]._common
    good = case(4, 5, 6)
    a, b, c = operands(4, 5, 6)
    assert common.operands(good, {"a": a, "b": b}, c) == (a, b, c)
    with pytest.raises(Unsupported, match="expected"):
        common.operands(good, {"a": b, "b": a}, c)
    with pytest.raises(Unsupported, match="expected float16"):
        common.operands(good, {"a": a.float(), "b": b}, c)
    with pytest.raises(Unsupported, match="contiguous"):
        common.operands(good, {"a": torch.zeros(6, 4, dtype=torch.float16).t(), "b": b}, c)


# --- the .cu files instantiate what the .py files launch by default ----------------------


@pytest.mark.parametrize(
    "stem, pattern",
    [("tiled_smem", r"matmul_tiled_smem<16>"),
     ("tiled_regblock", r"KBENCH_REGBLOCK\(128, 128, 8, 8, 8\)"),
     ("wmma", r"KBENCH_WMMA\(2, 2\)"),
     ("wmma_smem", r"KBENCH_WMMA_SMEM\(128, 128, 64, 2, 2, 3, 1, true\)")],
)
def test_default_configuration_is_built_by_nvcc_check(stem, pattern):
    source = (MATMUL / f"{stem}.cu").read_text()
    block = source[source.index("#ifdef KBENCH_INSTANTIATE"):]
    assert re.search(pattern, block), f"{stem}.cu's KBENCH_INSTANTIATE block lacks the default configuration"
