"""A compiled kernel's loops in its SASS, for `kbench explain`: how many instructions one pass of the
kernel's main loop (its largest innermost loop) issues and which ones, read from `cuobjdump -sass` of
the cubin nvcc or Triton built (no GPU needed). For a kernel that issues more instructions than its data needs (an
attention kernel's softmax, a dequantizing decode kernel), this count per tile is the cost that
parameters and code changes move, and it is known before anything runs.

The counts are static: every instruction between a backward branch and its target, including any
that a pass skips at run time (a branch around a rare rescale, say).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

# "/*1e50*/   @!P0 HFMA2 R1, R2, R3, R4 ;" -> address 0x1e50, opcode HFMA2 (the part before the first dot)
_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[0-9T]\s+)?([A-Z][A-Z0-9_]*)")
_BRANCH = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[0-9T]\s+)?BRA\s+(?:!?U?P[0-9T],\s*)?(0x[0-9a-f]+)")


@dataclass(frozen=True)
class Loop:
    start: int  # address of the first instruction (the branch target)
    end: int  # address of the backward branch
    opcodes: Counter

    @property
    def instructions(self) -> int:
        return sum(self.opcodes.values())

    def summary(self, most: int = 6) -> str:
        mix = ", ".join(f"{name} {count}" for name, count in self.opcodes.most_common(most))
        return f"{self.instructions:,} instructions a pass (static count): {mix}"


def loops(sass: str) -> list[Loop]:
    """Every backward branch's loop in a disassembly, largest first."""
    addressed = [(int(m.group(1), 16), m.group(2)) for m in map(_INSTRUCTION.search, sass.splitlines()) if m]
    found = []
    for match in _BRANCH.finditer(sass):
        end, start = int(match.group(1), 16), int(match.group(2), 16)
        if start < end:
            found.append(Loop(start, end, Counter(op for at, op in addressed if start <= at <= end)))
    return sorted(found, key=lambda loop: loop.instructions, reverse=True)


def innermost(found: list[Loop], at_least: int = 32) -> list[Loop]:
    """The loops that hold no other loop of ``at_least`` instructions or more (a persistent kernel's
    outer loop over tiles holds its loop over k-steps; a spin on an mbarrier is a loop of a few
    instructions and does not count), largest first."""
    def holds(outer: Loop, inner: Loop) -> bool:
        return outer != inner and outer.start <= inner.start and inner.end <= outer.end

    return [loop for loop in found
            if not any(holds(loop, other) and other.instructions >= at_least for other in found)]


def cuda_tool(name: str) -> str | None:
    """A CUDA command-line tool: on PATH (a CUDA toolkit), else where pip's NVIDIA wheels put it
    (nvidia/cu13/bin or cu12/bin of the nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels, which
    kbench's extras install); None where neither has it."""
    found = shutil.which(name)
    if found:
        return found
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for cuda in ("cu13", "cu12"):
            tool = Path(root) / cuda / "bin" / name
            if tool.is_file() and os.access(tool, os.X_OK):
                return str(tool)
    return None


def disassemble(cubin: Path | bytes) -> str | None:
    """`cuobjdump -sass` of a cubin (a file, or its bytes as Triton returns them), or None where the tool
    is not installed (it comes with the CUDA toolkit, or the nvidia-cuda-cuobjdump wheel, which runs
    nvdisasm: the nvidia-cuda-nvdisasm wheel) or cannot read it."""
    tool = cuda_tool("cuobjdump")
    if tool is None:
        return None
    if isinstance(cubin, bytes):
        with tempfile.TemporaryDirectory(prefix="kbench-sass-") as tmp:
            path = Path(tmp) / "kernel.cubin"
            path.write_bytes(cubin)
            return disassemble(path)
    env = dict(os.environ)
    nvdisasm = cuda_tool("nvdisasm")
    if nvdisasm:  # where cuobjdump looks for it when it is not on PATH
        env["NVDISASM_PATH"] = str(Path(nvdisasm).parent)
    done = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, timeout=120, env=env)
    return done.stdout if done.returncode == 0 else None


def innermost_loops(cubin: Path | bytes) -> list[Loop]:
    """The cubin's innermost loops, largest first; none without cuobjdump."""
    sass = disassemble(cubin)
    return innermost(loops(sass)) if sass else []


def main_loop(cubin: Path | bytes) -> str | None:
    """The summary of the cubin's largest innermost loop (the kernel's loop over tiles or k-steps), and
    of the next one where it is at least half as large (a kernel that runs its loop in two versions,
    with and without its edge cases); None without cuobjdump or a loop."""
    found = innermost_loops(cubin)
    if not found:
        return None
    text = found[0].summary()
    if len(found) > 1 and 2 * found[1].instructions >= found[0].instructions:
        text += f"; another loop: {found[1].summary()}"
    return text
