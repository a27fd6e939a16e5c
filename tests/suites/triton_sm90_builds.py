"""Compile the GPU paths of kbench's Triton kernels for sm_90 with Triton's own compiler and ptxas, no GPU
needed, and print one JSON line per build: {"build": NAME, "registers", "spill_stores", "shared"} or
{"build": NAME, "error": ...}.

Run by tests/suites/test_triton_sm90_builds.py in a process of its own without TRITON_INTERPRET (the
interpreter, which the other CPU tests use, never runs the compiler): each build is a form a kernel takes
on an H200 that the interpreter's checks cannot compile, e.g. the Triton matmul's 16-byte-rows form and
its persistent TMA form, or triton-splitkv's whole-group scales.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parents[1])]

from kbench.kernel_resources import from_triton  # noqa: E402
from kbench.sass import innermost_loops  # noqa: E402
from kbench.loader import BUILTIN_KERNELS  # noqa: E402
from kernel_modules import load_kernel_module  # noqa: E402


def matmul_builds():
    m = load_kernel_module(BUILTIN_KERNELS / "matmul" / "triton_matmul.py")
    # As the wrapper passes them: N, K and the strides in 8-element units (ALIGN 8) at 5000 x 3000 x 7000 and
    # 4096³, element by element where rows are not 16-byte aligned (5000 x 777 x 333).
    shapes = {"aligned 5000x3000x7000": (3000, 7000, 8), "4096^3": (4096, 4096, 8), "unaligned 5000x777x333": (777, 333, 1)}
    for name, (n, k, align) in shapes.items():
        args = {"A": "*fp16", "B": "*fp16", "C": "*fp16", "M": 5000, "n_units": n // align, "k_units": k // align,
                "am_units": k // align, "stride_ak": 1, "bk_units": n // align, "stride_bn": 1,
                "cm_units": n // align, "stride_cn": 1}
        config = m.GPU_CONFIGS[0]
        yield (f"triton matmul {name} {config.kwargs}", m._matmul, args,
               {**config.kwargs, "PRECISION": "native", "EVEN_K": k % 64 == 0, "ALIGN": align},
               {"num_warps": config.num_warps, "num_stages": config.num_stages})
    args = {"A": "*bf16", "B": "*bf16", "C": "*bf16", "M": 5000, "N": 3000, "K": 7000, "stride_am": 7000,
            "stride_bk": 3000, "stride_cm": 3000}
    for config in m.PERSISTENT_CONFIGS:
        yield (f"triton matmul persistent=1 {config.kwargs} {config.num_warps}w {config.num_stages}s",
               m._matmul_persistent, args, {**config.kwargs, "PROGRAMS": 132, "PRECISION": "native"},
               {"num_warps": config.num_warps, "num_stages": config.num_stages})


def splitkv_builds():
    m = load_kernel_module(BUILTIN_KERNELS / "decode" / "triton_splitkv.py")
    from kbench.suite import Case

    # 128k tokens, GQA 32/8, d 128: int4, int8 and int2 caches in groups of 32 (whole groups a tile), int4
    # in groups of 48 (a scale gathered per element) and of 128 (a K scale a tile), at eight sequences (int4
    # and int8 in whole groups: 64 pieces, three stages; int2 and int4 in groups of 48: 8, two); fp16 at
    # eight (two stages) and at one (three)
    for kv_dtype, group, batch in (("int4", 32, 8), ("int8", 32, 8), ("int2", 32, 8), ("int4", 48, 8), ("int4", 128, 8),
                                   ("fp16", 32, 8), ("fp16", 32, 1)):
        case = Case({"l": 131072, "q": 1, "batch": batch, "hq": 32, "hkv": 8, "d": 128, "kv_dtype": kv_dtype,
                     "group": group})
        bits = m.CACHE_BITS[kv_dtype]
        plan = m.launch_plan(case, 132, bits)
        yield (f"triton-splitkv bits={bits} whole_groups={plan['whole_groups']} stages={plan['stages']}", m._partial,
               m.sm90_arguments(case, plan, bits), m.partial_constants(case, plan, bits),
               m.partial_options(plan, bits, 4))
        if group == 32:  # and K/V read through tensor descriptors (loads=tma; loads=auto's form but for int4)
            yield (f"triton-splitkv bits={bits} batch={batch} loads=tma", m._partial,
                   m.sm90_arguments(case, plan, bits, loads="tma"), m.partial_constants(case, plan, bits, loads="tma"),
                   m.partial_options(plan, bits, 4, loads="tma"))
        if batch == 1:  # the merge launched as the partial kernel's programmatic dependent (pdl=1)
            yield (f"triton-splitkv bits={bits} batch={batch} pdl=1", m._partial, m.sm90_arguments(case, plan, bits),
                   m.partial_constants(case, plan, bits, pdl=True), m.partial_options(plan, bits, 4))
    args = {"PartO": "*fp32", "PartM": "*fp32", "PartL": "*fp32", "Out": "*fp16", "so_b": 4096, "so_h": 128,
            "so_q": 128, "HKV": 8, "GROUP": 4, "NQ": 1, "splits": 33, "row_blocks": 1}
    for pdl in (False, True):
        yield (f"triton-splitkv merge{' pdl=1' if pdl else ''}", m._combine, args,
               {"BLOCK_M": 16, "HEAD_D": 128, "CHANNELS": m.COMBINE_CHANNELS, "PIECES": m.MAX_COMBINE_PIECES,
                "AFTER_PARTIAL": pdl}, {"num_warps": 4, **({"launch_pdl": True} if pdl else {})})


def attention_builds():
    m = load_kernel_module(BUILTIN_KERNELS / "attention" / "triton_fa2.py")
    args = {name: "*fp16" for name in "QKVO"}
    for t in "qkvo":
        args.update({f"stride_{t}b": 16 * 4096 * 128, f"stride_{t}h": 4096 * 128, f"stride_{t}n": 128})
    args.update(heads=16, n_ctx=4096, qk_scale_log2=0.1)
    # Config 1 (8 warps) and config 6 (4 warps), N a multiple of their tiles (EVEN_N: one K/V loop).
    for index in (1, 6):
        config = m.CONFIGS[index]
        yield (f"triton-fa2 TMA config {index}", m._fa2_forward, args,
               {"HEAD_DIM": 128, "CAUSAL": False, "PRECISION": "native", "TMA": True,
                "BLOCK_M": config["BLOCK_M"], "BLOCK_N": config["BLOCK_N"], "EVEN_N": True, "RESCALE": 0},
               m._launch_options(config))
    # The rows' maxima moved only past a margin of 2^8 (--param rescale=8), config 1
    config = m.CONFIGS[1]
    yield ("triton-fa2 TMA config 1 rescale=8", m._fa2_forward, args,
           {"HEAD_DIM": 128, "CAUSAL": False, "PRECISION": "native", "TMA": True, "BLOCK_M": config["BLOCK_M"],
            "BLOCK_N": config["BLOCK_N"], "EVEN_N": True, "RESCALE": 8}, m._launch_options(config))


def gluon_attention_builds():
    m = load_kernel_module(BUILTIN_KERNELS / "attention" / "gluon_fa3.py")
    if m.gl is None:  # a Triton without Gluon: nothing to build
        return
    from kbench.suite import Case

    # The default (warp-specialized, ping-pong) and each other form, at d 128 and 64, fp16 and bf16, causal and
    # not, with the deepest ring each tile allows.
    for dtype, d, causal, block_n, stages, ws, pingpong in (
            ("fp16", 128, False, 128, 2, 1, 1), ("fp16", 128, False, 128, 2, 1, 0), ("fp16", 128, True, 128, 2, 0, 0),
            ("bf16", 64, True, 128, 2, 1, 1), ("fp16", 128, False, 64, 3, 1, 1), ("bf16", 128, False, 128, 3, 0, 0)):
        case = Case({"n": 4096, "d": d, "batch": 2, "heads": 16, "dtype": dtype, "causal": causal})
        yield (f"gluon-fa3 {dtype} d={d} causal={int(causal)} block_n={block_n} stages={stages} ws={ws} "
               f"pingpong={pingpong}", *m.sm90_build(case, block_n, stages, bool(ws), bool(pingpong)))


def largest_loop(cubin: bytes) -> dict | None:
    """The opcodes of the cubin's largest innermost loop (kbench.sass), or None without cuobjdump."""
    found = innermost_loops(cubin)
    return dict(found[0].opcodes) if found else None


def main() -> int:
    for name, kernel, args, constexprs, options in (*matmul_builds(), *splitkv_builds(), *attention_builds(),
                                                    *gluon_attention_builds()):
        try:
            res = from_triton(kernel, args, constexprs, options)
        except RuntimeError as exc:
            print(json.dumps({"build": name, "error": str(exc)}), flush=True)
            continue
        print(json.dumps({"build": name, "registers": res["registers"], "spill_stores": res["spill_stores"],
                          "shared": res["dynamic_smem_bytes"],
                          "griddepcontrol": sorted(set(re.findall(r"griddepcontrol\.\w+", res["ptx"]))),
                          # how many wgmma groups a wait leaves in flight, and the register counts setmaxnreg sets
                          "wgmma_waits": sorted(set(map(int, re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)",
                                                                         res["ptx"])))),
                          "setmaxnreg": sorted(set(map(int, re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)",
                                                                        res["ptx"])))),
                          "loop": largest_loop(res["cubin"])}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
