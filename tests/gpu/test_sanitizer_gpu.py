"""kbench's CUDA C++ kernels (and its Gluon one) under compute-sanitizer: small cases of each
(tests/gpu/sanitized.py) run once and checked, with memcheck (out-of-bounds and misaligned accesses) for
every kernel and racecheck (shared-memory hazards) for those whose blocks share tiles through shared
memory: cupy-fa2, cuda-fa3 and gluon-fa3 (on Hopper), cupy-bitdecode and the reduction and scan kernels.
Each family of kernels runs under each tool in a process of its own, so that one's verdict stands whatever another's run does. A run passes
when the tool reports zero errors and every check was right; it is an expected failure (xfail), with
what the tool said, when the tool itself stops on an internal error: it then has no verdict. compute-sanitizer 2025.3's racecheck does so on the
H200 for cupy-fa2, cupy-bitdecode and cuda-fa3 ("failed to handle a hardware exception", with the
instrumentation limited to each kernel alone; memcheck passes them), and it does not model an mbarrier's
arrival and wait as ordering two threads' shared-memory accesses (cuda-fa3's unit slot)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kbench.loader import load_helper

checks = load_helper(Path(__file__).with_name("attention_checks.py"))  # compiling_env: the child's environment
pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_cuda", "needs_cupy")]

DRIVER = Path(__file__).with_name("sanitized.py")
REPO_ROOT = Path(__file__).resolve().parents[2]
SANITIZER_ERRORS = 9  # --error-exitcode: tells the tool's findings from the driver's own exit 1
# The tool's last word on a run with no error (racecheck counts hazards: warnings are not errors).
CLEAN = {"memcheck": r"ERROR SUMMARY: 0 errors",
         "racecheck": r"RACECHECK SUMMARY: \d+ hazards? displayed \(0 errors,"}


# racecheck reports hazards in cuBLAS's Hopper GEMM kernels (nvjet, torch's matrix products in the inputs'
# and references), which are not kbench's and not this test's business; they also take minutes under it.
TOOL_OPTIONS = {"memcheck": [], "racecheck": ["--kernel-name-exclude", "kns=nvjet"]}


def sanitized(compute_sanitizer: str, env: dict, tool: str, runs: list[str]) -> None:
    """One process of tests/gpu/sanitized.py RUNS under ``compute-sanitizer --tool TOOL``; fails the test
    unless the tool found nothing, every check was right, and each run checked something."""
    # Without torch's caching allocator every tensor is an allocation of its own, so memcheck sees an
    # access past a tensor's end (inside a cached block it would pass unseen). Kernels compiled, not
    # interpreted; kbench importable from the source tree.
    env = checks.compiling_env(env, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    proc = subprocess.run([compute_sanitizer, "--tool", tool, *TOOL_OPTIONS[tool],
                           "--error-exitcode", str(SANITIZER_ERRORS), sys.executable, str(DRIVER), *runs],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=540)
    output = proc.stdout + proc.stderr
    tail = output[-6000:]
    if "Internal Sanitizer Error" in output:
        # each race as the tool words it: "Race reported between Read access at A in K" and, on the next
        # line, "and Write access at B in K" (either access may be the read or the write)
        lines = [line.strip("= ") for line in output.splitlines()]
        reported = [line for line in lines
                    if "Race reported" in line or line.startswith(("and Read access at", "and Write access at"))]
        pytest.xfail(f"compute-sanitizer --tool {tool} stopped on an internal error running {runs}, no verdict"
                     + (f"; before it, it reported: {' / '.join(reported)[:800]}" if reported else ""))
    assert proc.returncode != SANITIZER_ERRORS, f"compute-sanitizer --tool {tool} found errors:\n{tail}"
    assert proc.returncode == 0, f"under {tool}, exit {proc.returncode} (1: a wrong result or an error):\n{tail}"
    assert re.search(CLEAN[tool], output), f"no clean summary from compute-sanitizer --tool {tool}:\n{tail}"
    for run in runs:
        counted = re.search(rf"^{re.escape(run)}: (\d+) checked, 0 failed$", proc.stdout, re.MULTILINE)
        assert counted and int(counted.group(1)) > 0, f"{run} checked nothing under {tool}:\n{tail}"


@pytest.mark.parametrize("run", ["matmul", "fa2", "fa3", "gluon-fa3", "decode", "reduce-scan"])
def test_no_out_of_bounds_or_misaligned_access_under_memcheck(compute_sanitizer, proc_env, run):
    sanitized(compute_sanitizer, proc_env(), "memcheck", [run])


@pytest.mark.parametrize("run", ["fa2", "fa3", "gluon-fa3", "decode", "reduce-scan"])
def test_no_shared_memory_race_under_racecheck(compute_sanitizer, proc_env, run):
    sanitized(compute_sanitizer, proc_env(), "racecheck", [run])
