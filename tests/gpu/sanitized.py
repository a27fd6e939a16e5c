"""Small cases of kbench's CUDA C++ kernels (and its Gluon one), each run once and checked, for compute-sanitizer to watch.

    compute-sanitizer --tool memcheck --error-exitcode 9 python tests/gpu/sanitized.py matmul fa2 fa3 gluon-fa3 decode reduce-scan

test_sanitizer_gpu.py runs it so, one process for each tool. Prints one line per failed check and,
after each NAME, ``NAME: N checked, M failed``; exits 1 when a check failed (a wrong result) or raised,
so an exit of 9 is compute-sanitizer's alone. The sizes are small on purpose: under the sanitizer
every kernel, torch's included, runs instrumented.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kbench import correctness, loader
from kbench.suite import Case


def checked(suite, impl, case, params, label: str, problems: list[str]) -> None:
    verdict = correctness.check(suite, impl, case, "cuda", seed=0, trials=1, params=params)
    if not verdict.ok:
        problems.append(f"{label}: {verdict.reason[:300]}")


def matmul(registry) -> tuple[int, list[str]]:
    """Each CUDA matmul at odd and even shapes. K and N not multiples of 8 take the bounds-checked
    element-wise paths; 64 x 136 x 72 the vector / cp.async / direct-fragment paths with edge tiles in
    M and N; 33 x 40 x 24 a K tail that is a multiple of 8 but not of 16 (wmma's staged last k-step).
    On an sm_90 GPU also wgmma, at the shapes its TMA loads can read."""
    types = {"tiled-smem": ("fp32",), "tiled-regblock": ("fp32",), "wmma": ("fp16", "bf16"),
             "wmma-smem": ("fp16", "bf16")}
    shapes = ((1, 1, 1), (17, 17, 17), (100, 77, 33), (64, 136, 72), (33, 40, 24), (130, 264, 200))
    suite, impls = registry.suite("matmul"), registry.implementations("matmul")
    problems, count = [], 0
    for name, dtypes in types.items():
        for dtype in dtypes:
            for m, n, k in shapes:
                case = Case({"m": m, "n": n, "k": k, "dtype": dtype, "tf32": False})
                checked(suite, impls[name], case, impls[name].params, f"{name} {dtype} {m}x{n}x{k}", problems)
                count += 1
    # wmma-smem with its registers capped (spilled), without the default's prefetched fragments,
    # and prefetching across one-step k-tiles
    for form in ({"min_blocks": 3}, {"prefetch": 0}, {"prefetch": 1, "block_k": 16}):
        for m, n, k in ((64, 136, 72), (130, 264, 200), (100, 77, 33)):
            case = Case({"m": m, "n": n, "k": k, "dtype": "bf16", "tf32": False})
            label = " ".join(f"{key}={value}" for key, value in form.items())
            checked(suite, impls["wmma-smem"], case, {**impls["wmma-smem"].params, **form},
                    f"wmma-smem {label} bf16 {m}x{n}x{k}", problems)
            count += 1
    # wgmma (Hopper only) at the shapes TMA reads (K and N multiples of 8), both kernels and clusters of
    # two (with B tiles of four boxes and of three), C stored by TMA (the default) and from registers, edge tiles.
    import torch

    if tuple(torch.cuda.get_device_capability()) == (9, 0):
        impl = impls["wgmma"]
        for form in ({"variant": "ws", "cluster": 1}, {"variant": "plain"}, {"variant": "ws", "cluster": 2},
                     {"variant": "ws", "block_n": 192, "cluster": 2},
                     {"variant": "ws", "epilogue": "direct", "stages": 4}, {"variant": "ws", "epilogue": "direct", "cluster": 1}):
            for m, n, k in ((64, 136, 72), (33, 40, 24), (130, 264, 200)):
                case = Case({"m": m, "n": n, "k": k, "dtype": "fp16", "tf32": False})
                label = " ".join(f"{key}={value}" for key, value in form.items())
                checked(suite, impl, case, {**impl.params, **form}, f"wgmma {label} {m}x{n}x{k}", problems)
                count += 1
    return count, problems


def fa2(registry) -> tuple[int, list[str]]:
    """cupy-fa2 (its default tiles, with the log-sum-exp output) on 200 queries: a full 128-row tile and
    a partial one, K/V tiles of 64 with a partial last one; causal and not; as FlashAttention-2 (rescale=0,
    checked copies), as the default (the running maximum moved past a margin, the K/V copies stepped), and
    with the block order the default does not take for that mask: the grid turned (B x H, Q tiles) to take
    every head's last query tile first without a mask (order=heaviest, the causal default), each head's
    tiles in order with one (order=rows)."""
    suite, impl = registry.suite("attention"), registry.implementations("attention")["cupy-fa2"]
    problems = []
    for causal in (False, True):
        other_order = {"order": "rows" if causal else "heaviest"}
        for form in ({"rescale": 0, "loads": "checked"}, {}, other_order):
            case = Case({"n": 200, "d": 128, "batch": 1, "heads": 2, "dtype": "fp16", "causal": causal})
            checked(suite, impl, case, {**impl.params, "lse": 1, **form}, f"cupy-fa2 causal={causal} {form}", problems)
    return 6, problems


def fa3(registry) -> tuple[int, list[str]]:
    """cuda-fa3 (Hopper only) on 200 queries: a full 128-row Q tile and a partial one, K/V tiles with a
    partial last one; causal and not; its default schedule and the plain one (no overlap, no ping-pong);
    with 80 heads, 160 units of work for one block per SM, so some persistent blocks take two; and three
    consumer warpgroups at d = 64 (192-row Q tiles: one, and a partial one for a few rows)."""
    import torch

    if tuple(torch.cuda.get_device_capability()) != (9, 0):
        return 0, ["cuda-fa3 runs on sm_90 only: run this on a Hopper GPU"]
    suite, impl = registry.suite("attention"), registry.implementations("attention")["cuda-fa3"]
    problems, count = [], 0
    for causal in (False, True):
        for schedule in ({}, {"overlap": 0, "pingpong": 0}):
            case = Case({"n": 200, "d": 128, "batch": 1, "heads": 80, "dtype": "fp16", "causal": causal})
            checked(suite, impl, case, {**impl.params, **schedule}, f"cuda-fa3 causal={causal} {schedule}", problems)
            count += 1
        case = Case({"n": 200, "d": 64, "batch": 1, "heads": 80, "dtype": "fp16", "causal": causal})
        checked(suite, impl, case, {**impl.params, "block_n": 128, "consumers": 3}, f"cuda-fa3 causal={causal} "
                "consumers=3", problems)
        count += 1
    return count, problems


def gluon_fa3(registry) -> tuple[int, list[str]]:
    """gluon-fa3 (Hopper only) on 200 queries of 80 heads: a full 128-row Q tile and a partial one, the last
    tile of each head reading on into the next head's rows (and past the last head's end: zeros); causal and
    not; warp-specialized with and without ping-pong, and the one-partition form."""
    import torch

    if tuple(torch.cuda.get_device_capability()) != (9, 0):
        return 0, ["gluon-fa3 runs on sm_90 only: run this on a Hopper GPU"]
    suite, impl = registry.suite("attention"), registry.implementations("attention")["gluon-fa3"]
    problems, count = [], 0
    for causal in (False, True):
        for form in ({}, {"pingpong": 0}, {"ws": 0, "pingpong": 0}):
            case = Case({"n": 200, "d": 128, "batch": 1, "heads": 80, "dtype": "fp16", "causal": causal})
            checked(suite, impl, case, {**impl.params, **form}, f"gluon-fa3 causal={causal} {form}", problems)
            count += 1
    return count, problems


def decode(registry) -> tuple[int, list[str]]:
    """cupy-bitdecode (its cp.async pipeline and shared-memory tiles) over int4, int8 and fp16 caches of
    17 and 1000 tokens: a partial tile, a partial group of 32 tokens, GQA 32/8 with one new query and
    four (more rows than one m16 tile), with every tile masked and with the unmasked loop; and V's scales
    applied to P, and K's to the queries with both raw codes, over caches in groups of 128 (one a token); on
    sm_90 the ring of tiles in shared memory filled by bulk copies (ring=2, 3) over those caches, and on any GPU
    the ring of each warp's own tiles filled by its lanes' cp.async (ring=2, 3, ring_fill=lanes)."""
    import torch

    suite, impl = registry.suite("decode"), registry.implementations("decode")["cupy-bitdecode"]
    problems, count = [], 0
    for kv_dtype in ("int4", "int8", "fp16"):
        for l, q in ((17, 1), (1000, 4)):
            case = Case({"l": l, "q": q, "batch": 1, "hq": 32, "hkv": 8, "d": 128, "kv_dtype": kv_dtype,
                         "group": 32})
            for masks in ("all", "edge"):
                checked(suite, impl, case, dict(impl.params, masks=masks),
                        f"cupy-bitdecode {kv_dtype} l={l} q={q} masks={masks}", problems)
                count += 1
    # V's scales on P (v_scales=p, the default where a token's channels are one group of V)
    for kv_dtype in ("int4", "int8"):
        case = Case({"l": 1000, "q": 4, "batch": 1, "hq": 32, "hkv": 8, "d": 128, "kv_dtype": kv_dtype, "group": 128})
        checked(suite, impl, case, dict(impl.params, v_scales="p"), f"cupy-bitdecode {kv_dtype} group=128 v_scales=p",
                problems)
        count += 1
        # K's scales on Q (k_scales=q: a group of 128 tokens is whole tiles), K's and V's codes raw
        checked(suite, impl, case, dict(impl.params, k_scales="q", v_codes="raw"),
                f"cupy-bitdecode {kv_dtype} group=128 k_scales=q v_codes=raw", problems)
        count += 1
        if torch.cuda.get_device_capability() >= (9, 0):  # the ring's bulk copies and mbarriers (sm_90)
            for ring in (2, 3):
                checked(suite, impl, case, dict(impl.params, ring=ring, masks="edge"),
                        f"cupy-bitdecode {kv_dtype} group=128 ring={ring}", problems)
                count += 1
        for ring in (2, 3):  # a ring a warp, filled by its lanes (cp.async: sm_80 and newer)
            checked(suite, impl, case, dict(impl.params, ring=ring, ring_fill="lanes", masks="edge"),
                    f"cupy-bitdecode {kv_dtype} group=128 ring={ring} ring_fill=lanes", problems)
            count += 1
    return count, problems


def reduce_scan(registry) -> tuple[int, list[str]]:
    """kbench's own reduction and scan kernels (not CuPy's or torch's), every type and variant, at sizes
    that end inside a warp, one past a 4096-element tile, and after many tiles."""
    sweeps = loader.load_helper(Path(__file__).with_name("reduce_scan_sweep.py"))
    sizes = (31, 4097, 70_001)
    count, problems = 0, []
    for suite_name, dtypes in sweeps.TYPES.items():
        own = sweeps.own_kernels(registry, suite_name)
        if not own:
            problems.append(f"no kbench kernel of {suite_name} loaded: {registry.load_errors}")
        for dtype in dtypes:
            checks, failed = sweeps.sweep(registry, suite_name, dtype, own, sizes, unaligned_sizes=(31, 4097))
            count, problems = count + checks, problems + failed
    return count, problems


RUNS = {"matmul": matmul, "fa2": fa2, "fa3": fa3, "gluon-fa3": gluon_fa3, "decode": decode,
        "reduce-scan": reduce_scan}


def main(names: list[str]) -> int:
    if not names or any(name not in RUNS for name in names):
        print(f"usage: sanitized.py {{{','.join(RUNS)}}}...", file=sys.stderr)
        return 2
    registry = loader.load()
    failed = 0
    for name in names:
        count, problems = RUNS[name](registry)
        for line in problems:
            print(f"FAIL {line}")
        print(f"{name}: {count} checked, {len(problems)} failed", flush=True)
        failed += len(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
