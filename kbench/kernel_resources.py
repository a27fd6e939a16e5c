"""Registers, spills and static shared memory of one instantiation of a templated CUDA kernel,
read from ptxas (`nvcc -Xptxas -v`) when no GPU is at hand.

Taking the kernel's address in host code makes nvcc instantiate exactly the
template that kbench would launch (the same name expression NVRTC compiles).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

PTXAS_USED = re.compile(r"Used (\d+) registers")
PTXAS_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
PTXAS_STACK = re.compile(r"(\d+) bytes stack frame")
PTXAS_SMEM = re.compile(r"(\d+) bytes smem")


def from_nvcc(source: Path, name_expression: str, arch: str = "sm_90") -> dict | None:
    """{"registers", "spill_stores", "spill_loads", "stack_bytes", "static_smem_bytes"}, or None without nvcc."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return None
    with tempfile.TemporaryDirectory(prefix="kbench-ptxas-") as tmp:
        unit = Path(tmp) / "instantiate.cu"
        unit.write_text(f'#include "{Path(source).resolve()}"\n'
                        f"void* kbench_instantiate = (void*)&{name_expression};\n")
        headers = Path(source).resolve().parent.parent / "_cuda"  # kernels/_cuda: kbench's own .cuh files
        done = subprocess.run([nvcc, "-std=c++17", f"-I{headers}", f"-arch={arch}", "-cubin", "-Xptxas", "-v",
                               "-o", str(Path(tmp) / "out.cubin"), str(unit)],
                              capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"nvcc failed on {name_expression}: {done.stderr.strip().splitlines()[-1:]}")
    text = done.stderr
    spill = PTXAS_SPILL.search(text)
    stack = PTXAS_STACK.search(text)
    smem = PTXAS_SMEM.search(text)
    return {
        "registers": int(PTXAS_USED.search(text).group(1)),
        "spill_stores": int(spill.group(1)) if spill else 0,
        "spill_loads": int(spill.group(2)) if spill else 0,
        "stack_bytes": int(stack.group(1)) if stack else 0,
        "static_smem_bytes": int(smem.group(1)) if smem else 0,
        "source": f"ptxas ({arch}, nvcc)",
    }
