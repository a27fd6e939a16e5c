"""The matmul implementations right on a GPU at odd and even shapes: cuBLAS and kbench's CUDA C++ kernels
(each dtype they take and each tile configuration the benchmarks time; the Hopper wgmma kernel at the
shapes TMA can read, on sm_90 only) checked in this process against the float64 reference, and the
Triton matmul through `kbench run` (its workers compile the kernel and autotune it per shape). (The CUDA
kernels under compute-sanitizer: test_sanitizer_gpu.py.)"""

from __future__ import annotations

import pytest

from kbench import correctness, results
from kbench.registry import skip_reason
from kbench.suite import Case

# The CuPy kernels skip themselves where CuPy is missing (skip_reason), the Triton one needs none.
pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_cuda")]

# One element; odd sizes (the bounds-checked element-wise copy paths: K or N not a multiple of 8); one
# tile; a K tail that is a multiple of 8 but not of 16; edge tiles in M and N; several tiles each way.
SHAPES = ((1, 1, 1), (17, 17, 17), (1000, 777, 333), (128, 128, 128), (33, 40, 24), (130, 264, 200),
          (256, 512, 1024))
# wmma-smem: every warps x block_n x stages the benchmarks time (4 warps x 256 columns is refused: its
# warp tile would spill). bf16 differs from fp16 only in its conversions: its defaults cover them.
# The default prefetches each k16 step's fragments (64-deep k-tiles: four steps); one and two steps a
# tile with prefetch, and the loop without it at 32- and 64-deep tiles.
WMMA_SMEM_CONFIGS = ([{}, {"prefetch": 1, "block_k": 16}, {"prefetch": 1, "block_k": 32},
                      {"prefetch": 0, "block_k": 32}, {"prefetch": 0}]
                     + [{"warps": w, "block_n": n, "stages": st}
                        for w, n in ((4, 128), (8, 128), (8, 256)) for st in (2, 3, 4)]
                     # 168 registers: 32-deep k-tiles without prefetch spill 40-48 bytes, the default tile more
                     + [{"min_blocks": 3, "stages": st, "block_k": 32, "prefetch": 0} for st in (3, 4)])
CHECKS = (
    [("cublas", dtype, {}) for dtype in ("fp16", "bf16", "fp32")]
    + [("tiled-smem", "fp32", {}), ("tiled-smem", "fp32", {"tile": 32})]
    + [("tiled-regblock", "fp32", {}),
       ("tiled-regblock", "fp32", {"block_m": 64, "block_n": 64, "block_k": 16, "thread_m": 4, "thread_n": 4})]
    + [("wmma", dtype, {}) for dtype in ("fp16", "bf16")]
    + [("wmma-smem", "fp16", config) for config in WMMA_SMEM_CONFIGS]
    + [("wmma-smem", "bf16", config) for config in ({}, {"prefetch": 0}, {"min_blocks": 3},
                                                     {"block_k": 32, "stages": 4, "prefetch": 0})]
    + [("wmma-smem", dtype, {"loads": "api"}) for dtype in ("fp16", "bf16")]
)


def _id(check) -> str:
    name, dtype, params = check
    return "-".join([name, dtype, *(f"{k}={v}" for k, v in params.items())])


def _check_every_shape(registry, name: str, dtype: str, params: dict, shapes, sm90_only: bool = False) -> None:
    """One implementation and configuration against float64 at each shape, the failures listed together;
    a SKIP where the implementation cannot run here (or, sm90_only, off Hopper)."""
    import torch

    suite, impl = registry.suite("matmul"), registry.implementations("matmul")[name]
    capability = torch.cuda.get_device_capability()
    problems = []
    for m, n, k in shapes:
        case = Case({"m": m, "n": n, "k": k, "dtype": dtype, "tf32": False})
        reason = skip_reason(impl, case, "cuda", capability)
        if reason or (sm90_only and tuple(capability) != (9, 0)):
            pytest.skip(f"{name}: {reason or 'needs sm_90 (Hopper)'}")
        try:
            verdict = correctness.check(suite, impl, case, "cuda", seed=1, trials=2, params={**impl.params, **params})
        except Exception as exc:  # noqa: BLE001 - every shape is tried, the failures listed together
            problems.append(f"{m}x{n}x{k}: {type(exc).__name__}: {str(exc)[:300]}")
            continue
        if not verdict.ok:
            problems.append(f"{m}x{n}x{k}: {verdict.reason[:300]}")
    assert not problems, f"{_id((name, dtype, params))} is wrong at:\n" + "\n".join(problems)


@pytest.mark.parametrize("name,dtype,params", CHECKS, ids=map(_id, CHECKS))
def test_cuda_kernel_matches_float64_at_every_shape(registry, name, dtype, params):
    _check_every_shape(registry, name, dtype, params, SHAPES)


# wgmma (Hopper only: a SKIP elsewhere) reads A and B through TMA, which needs K and N multiples of 8: one
# row, one element pair; a K tail inside a 64-wide k-step; edge tiles in M and N; fewer k-steps than
# stages with more tiles than SMs (the persistent blocks' ring runs on across tiles); several tiles per
# block with a long K; the odd benchmark shape.
WGMMA_SHAPES = ((1, 8, 8), (33, 40, 24), (64, 136, 72), (130, 264, 200), (256, 512, 1024), (3000, 3000, 64),
                (4096, 2048, 1000), (5000, 3000, 7000))
# Both kernels, each tile width and warpgroup count, a deep and a shallow ring, other L2 promotions of the
# TMA reads, clusters of two sharing B by multicast (the default for 128-row tiles; odd tile-row counts
# leave a unit half past M) and single blocks, C stored by TMA from shared memory (the default; edge tiles
# clipped by the copy engine) and from the registers; bf16 differs in its conversions and its wgmma type: the default of each kernel
# covers them.
WGMMA_CONFIGS = ([("fp16", {}), ("bf16", {}), ("fp16", {"block_n": 128, "stages": 6}), ("fp16", {"block_n": 64}),
                  ("fp16", {"block_m": 64}), ("fp16", {"stages": 2}), ("fp16", {"l2_promotion": 0}),
                  ("bf16", {"l2_promotion": 256}), ("fp16", {"cluster": 1}), ("bf16", {"cluster": 1}),
                  ("fp16", {"cluster": 2, "block_n": 128, "stages": 2}), ("fp16", {"block_n": 192}),
                  ("bf16", {"block_n": 192, "cluster": 1}), ("fp16", {"epilogue": "direct", "stages": 4}),
                  ("bf16", {"epilogue": "direct", "cluster": 1}), ("fp16", {"epilogue": "direct", "block_n": 128})]
                 + [(dtype, {"variant": "plain", **config}) for dtype, config in
                    (("fp16", {}), ("bf16", {}), ("fp16", {"block_n": 128}), ("fp16", {"block_m": 64, "stages": 2}))])


@pytest.mark.parametrize("dtype,params", WGMMA_CONFIGS, ids=[_id(("wgmma", d, p)) for d, p in WGMMA_CONFIGS])
def test_wgmma_matches_float64_at_every_shape(registry, dtype, params):
    _check_every_shape(registry, "wgmma", dtype, params, WGMMA_SHAPES, sm90_only=True)


def test_wgmma_refuses_shapes_tma_cannot_read(registry):
    import torch

    from kbench.registry import Unsupported

    if tuple(torch.cuda.get_device_capability()) != (9, 0):
        pytest.skip("wgmma: needs sm_90 (Hopper)")
    suite, impl = registry.suite("matmul"), registry.implementations("matmul")["wgmma"]
    case = Case({"m": 1000, "n": 777, "k": 333, "dtype": "fp16", "tf32": False})
    with pytest.raises(Unsupported, match="TMA cannot read A: .*333 must be a multiple of 8"):
        correctness.check(suite, impl, case, "cuda", seed=1, trials=1, params=impl.params)


# Every new shape autotunes the Triton matmul over its twelve configurations: one with edge tiles and a
# K that no block divides, one with edge tiles, a masked K and 16-byte rows (the ALIGN form: K and N
# multiples of 8), one whose K every block divides (the unmasked loop).
TRITON_SHAPES = ((1000, 777, 333), (1000, 776, 344), (256, 512, 1024))


@pytest.mark.parametrize("m,n,k", TRITON_SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in TRITON_SHAPES])
def test_triton_matmul_is_right_through_kbench_run(cli, tmp_path, compiled_triton, m, n, k):
    out = tmp_path / "triton.jsonl"
    result = cli("run", "matmul", "--m", m, "--n", n, "--k", k, "--dtype", "fp16,bf16,fp32", "--device", "cuda",
                 "--impl", "triton", "--baseline", "triton", "--timeout", "300", "--max-time", "0.2", "--out", out)
    statuses = {r.case["dtype"]: (r.status, r.reason) for r in results.read(out)}
    assert {dtype: status for dtype, (status, _) in statuses.items()} == {"fp16": "OK", "bf16": "OK", "fp32": "OK"}, \
        f"kbench run matmul --impl triton at {m}x{n}x{k}: {statuses}\n{result.output}"
    assert result.exit_code == 0, result.output


# persistent=1 (TMA descriptors: K and N multiples of 8) at a shape with edge tiles in M and N
# and a K no 64- or 128-deep step divides, and at one every tile divides.
PERSISTENT_SHAPES = ((1000, 776, 344), (256, 512, 1024))


@pytest.mark.parametrize("m,n,k", PERSISTENT_SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in PERSISTENT_SHAPES])
def test_triton_persistent_matmul_is_right_through_kbench_run(cli, tmp_path, compiled_triton, m, n, k):
    out = tmp_path / "persistent.jsonl"
    result = cli("run", "matmul", "--m", m, "--n", n, "--k", k, "--dtype", "fp16,bf16,fp32", "--device", "cuda",
                 "--impl", "triton", "--param", "persistent=1", "--timeout", "300", "--max-time", "0.2",
                 "--out", out)
    statuses = {r.case["dtype"]: (r.status, r.reason) for r in results.read(out)}
    assert {dtype: status for dtype, (status, _) in statuses.items()} == {"fp16": "OK", "bf16": "OK", "fp32": "SKIP"}, \
        f"kbench run matmul --impl triton --param persistent=1 at {m}x{n}x{k}: {statuses}\n{result.output}"
