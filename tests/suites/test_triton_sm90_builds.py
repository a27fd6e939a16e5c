"""The Triton kernels' GPU forms compile for sm_90 (an H200) with Triton's compiler and ptxas, on a machine
with no GPU: each builds, spills nothing and fits the H200's shared memory (tests/suites/triton_sm90_builds.py,
run without TRITON_INTERPRET, which the other CPU tests set and under which nothing is compiled)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kbench.sass import cuda_tool

pytest.importorskip("triton")

BUILDS = Path(__file__).with_name("triton_sm90_builds.py")
H200_SHARED = 232_448  # bytes of shared memory a block may opt in to on sm_90
# Builds only required to compile, each a form for inputs the fast forms cannot take, which spills with
# Triton 3.9: triton-splitkv's per-element gather of scales, for groups of tokens that neither divide its
# tiles nor are a multiple of them (int4 in groups of 48: 260 bytes; none with Triton 3.6; groups of 32 and
# 128 take the spread form), and the matmul's element-wide loads where
# rows are not 16-byte aligned (the 128 x 256 tile: 476 bytes; the autotuner has eleven others).
ONLY_COMPILES = {"triton-splitkv bits=4 whole_groups=0 stages=2",
                 "triton matmul unaligned 5000x777x333 {'BLOCK_M': 128, 'BLOCK_N': 256, 'BLOCK_K': 64, 'GROUP_M': 8}"}


def gluon_present() -> bool:
    try:
        from triton.experimental.gluon.language.nvidia import hopper  # noqa: F401
    except ImportError:
        return False
    return True


def test_every_triton_build_compiles_for_sm90_without_spilling():
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(BUILDS)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    builds = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    names = [b["build"] for b in builds]
    assert sum(name.startswith(("triton matmul aligned", "triton matmul 4096", "triton matmul unaligned"))
               for name in names) == 3
    assert sum(name.startswith("triton matmul persistent=1") for name in names) == 6
    assert sum(name.startswith("triton-splitkv") for name in names) == 15
    assert sum(name.startswith("triton-fa2") for name in names) == 3
    # pdl=1: the partial kernel lets its dependent launch, the merge waits for it; nothing else uses either
    assert {b["build"]: b["griddepcontrol"] for b in builds if b.get("griddepcontrol")} == {
        "triton-splitkv bits=0 batch=1 pdl=1": ["griddepcontrol.launch_dependents"],
        "triton-splitkv merge pdl=1": ["griddepcontrol.wait"]}
    # triton-splitkv dequantizes without conversion instructions (codes under the exponent of 1024, one fp16
    # fma a pair): a thread's 128 codes a tile take 64 HFMA2, no I2F, and F2FP only for P's 8 values (in
    # fp32, with a conversion a code, the int4 loop had 128 I2F and 68 F2FP), where cuobjdump is found
    if cuda_tool("cuobjdump"):
        for name in ("triton-splitkv bits=4 whole_groups=32 stages=3", "triton-splitkv bits=8 whole_groups=32 stages=3",
                     "triton-splitkv bits=2 whole_groups=32 stages=2", "triton-splitkv bits=4 whole_groups=128 stages=3"):
            loop = next(b["loop"] for b in builds if b["build"] == name)
            assert (loop.get("HFMA2", 0) >= 64 and loop.get("I2F", 0) + loop.get("I2FP", 0) <= 1
                    and loop.get("F2FP", 0) <= 4), (name, loop)
    # gluon-fa3 (where the installed Triton has Gluon): the softmax of a tile waits for its scores only, one
    # wgmma group (P V) left in flight; the warp-specialized form moves registers to its consumers and loader
    gluon = [b for b in builds if b["build"].startswith("gluon-fa3")]
    if gluon_present():
        assert len(gluon) == 6
        for b in gluon:
            assert b.get("wgmma_waits") == [0, 1], b
            assert ({240, 24} <= set(b["setmaxnreg"])) == (" ws=1 " in b["build"]), b
    problems = [b for b in builds if "error" in b or b["shared"] > H200_SHARED
                or (b["spill_stores"] and b["build"] not in ONLY_COMPILES)]
    assert not problems, "\n".join(json.dumps(b) for b in problems)
