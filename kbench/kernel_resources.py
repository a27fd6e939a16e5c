"""Registers, spills and shared memory of one kernel as the GPU would run it, read from ptxas when
no GPU is at hand: a templated CUDA kernel through `nvcc -Xptxas -v`, a @triton.jit kernel through
Triton's own compile for sm_90 (its bundled ptxas); a CUDA kernel's main loop's instructions where
cuobjdump is installed (kbench.sass; `kbench explain` shows no Triton kernel's, whose software
pipelining gives its loop several versions, though from_triton returns the cubin to read them); and the
launch figures `kbench explain` shows.

Taking the kernel's address in host code makes nvcc instantiate exactly the
template that kbench would launch (the same name expression NVRTC compiles).

A @gluon.jit kernel is compiled in a child process, `python -m kbench.kernel_resources`, which reads the
request (the kernel's file and name, its arguments) on stdin and answers with one JSON line.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from kbench.sass import main_loop

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
        cubin = Path(tmp) / "out.cubin"
        done = subprocess.run([nvcc, "-std=c++17", f"-I{headers}", *arch_flags(arch), "-cubin", "-Xptxas", "-v",
                               "-o", str(cubin), str(unit)],
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"nvcc failed on {name_expression}: {done.stderr.strip().splitlines()[-1:]}")
        loop = main_loop(cubin)
    return dict(_ptxas_figures(done.stderr), source=f"ptxas ({arch}, nvcc)", main_loop=loop)


def arch_flags(arch: str) -> list[str]:
    """nvcc's flags for one target: -arch=sm_XY, or for an arch-specific target (sm_90a: wgmma,
    setmaxnreg) the explicit -gencode=arch=compute_90a,code=sm_90a, which builds that target alone
    (some nvcc releases also run a plain sm_90 pass for the -arch=sm_90a shorthand, which rejects them)."""
    if arch.endswith("a"):
        number = arch.removeprefix("sm_")
        return [f"-gencode=arch=compute_{number},code=sm_{number}"]
    return [f"-arch={arch}"]


def _ptxas_figures(text: str) -> dict:
    """registers, spills, stack and static shared memory from ptxas's -v report."""
    used = PTXAS_USED.search(text)
    if used is None:
        raise RuntimeError("ptxas printed no register count")
    spill = PTXAS_SPILL.search(text)
    stack = PTXAS_STACK.search(text)
    smem = PTXAS_SMEM.search(text)
    return {
        "registers": int(used.group(1)),
        "spill_stores": int(spill.group(1)) if spill else 0,
        "spill_loads": int(spill.group(2)) if spill else 0,
        "stack_bytes": int(stack.group(1)) if stack else 0,
        "static_smem_bytes": int(smem.group(1)) if smem else 0,
    }


def from_triton(kernel, args: dict, constexprs: dict, options: dict, capability: int = 90) -> dict | None:
    """The same figures for a @triton.jit kernel compiled by Triton for sm_<capability> (no GPU needed),
    plus ``dynamic_smem_bytes`` (all of a Triton kernel's shared memory), its ``ptx`` and its ``cubin``;
    None under Triton's interpreter (TRITON_INTERPRET=1), which compiles nothing.

    ``args``: every other argument by name as the launch passes it, a tensor as its pointer type
    ("*fp16"), a Gluon tensor descriptor as its type ("tensordesc<fp16[128, 64],NVMMASharedLayout(...)>").
    They get the specialization a launch gives them: pointers and ints divisible by 16
    are marked so, an int equal to 1 becomes a constant. Without it the registers differ from the
    GPU's (triton-fa2's config 1: 187 unspecialized, 191 specialized, 191 as ncu read on the H200).

    A @gluon.jit kernel is compiled through Gluon's front end, in a child process (_compile_gluon_apart),
    interpreter or not."""
    if _is_gluon(kernel) and os.environ.get(_GLUON_CHILD) != "1":
        return _compile_gluon_apart(kernel, args, constexprs, options, capability)
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.runtime.jit import JITFunction
    except ImportError:
        return None
    if not isinstance(kernel, JITFunction):
        return None
    signature, attrs, constants = {}, {}, dict(constexprs)
    for index, name in enumerate(kernel.arg_names):
        value = args.get(name)
        if name in constexprs:
            signature[name] = "constexpr"
        elif isinstance(value, str):
            signature[name] = value
            if value.startswith("*"):
                attrs[(index,)] = [["tt.divisibility", 16]]
        elif isinstance(value, float):
            signature[name] = "fp32"
        elif value == 1:
            signature[name] = "constexpr"
            constants[name] = 1
        else:
            signature[name] = "i32" if -2**31 <= value < 2**31 else "i64"
            if value % 16 == 0:
                attrs[(index,)] = [["tt.divisibility", 16]]
    log = io.StringIO()
    # Triton prints ptxas's report only when asked, and runs ptxas only for a kernel not in its cache.
    knobs = {"TRITON_DUMP_PTXAS_LOG": "1", "TRITON_ALWAYS_COMPILE": "1"}
    saved = {name: os.environ.get(name) for name in knobs}
    os.environ.update(knobs)
    try:
        with contextlib.redirect_stdout(log):
            compiled = triton.compile(_source(kernel)(fn=kernel, signature=signature, constexprs=constants, attrs=attrs),
                                      target=GPUTarget("cuda", capability, 32), options=options)
    except Exception as exc:  # a compile error is the answer here, not a crash of `kbench explain`
        last = str(exc).strip().splitlines()[-1:] or [type(exc).__name__]
        raise RuntimeError(f"Triton could not compile {kernel.__name__} for sm_{capability}: {last[0]}") from None
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return dict(_ptxas_figures(log.getvalue()), dynamic_smem_bytes=compiled.metadata.shared,
                source=f"ptxas (sm_{capability}, Triton {triton.__version__})", ptx=compiled.asm.get("ptx", ""),
                cubin=compiled.asm.get("cubin", b""))


def _is_gluon(kernel) -> bool:
    return bool(getattr(kernel, "is_gluon", lambda: False)())


def _source(kernel):
    """The compiler front end of a kernel: Gluon's for a @gluon.jit one, else Triton's."""
    import triton

    if _is_gluon(kernel):
        from triton.experimental.gluon._runtime import GluonASTSource

        return GluonASTSource
    return triton.compiler.ASTSource


_GLUON_CHILD = "KBENCH_GLUON_COMPILE_CHILD"


def _compile_gluon_apart(kernel, args: dict, constexprs: dict, options: dict, capability: int) -> dict:
    """from_triton of a Gluon kernel in a child process (`python -m kbench.kernel_resources`), which loads the
    kernel's file, compiles and answers in JSON. Two reasons: Gluon's compiler in Triton 3.9 leaves objects
    alive at exit (layouts of 2-D tensors in wgmma's register layout), and the process then prints hundreds of
    lines of nanobind leak warnings, which the child's discarded stderr takes; and a child without
    TRITON_INTERPRET compiles where this process interprets Triton (Gluon's compiler cannot call the
    interpreter's stand-ins for Triton's library functions)."""
    request = {"file": kernel.fn.__code__.co_filename, "name": kernel.fn.__name__, "args": args,
               "constexprs": constexprs, "options": options, "capability": capability}
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env[_GLUON_CHILD] = "1"
    done = subprocess.run([sys.executable, "-m", "kbench.kernel_resources"], input=json.dumps(request),
                          capture_output=True, text=True, timeout=600, env=env)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"Triton could not compile {kernel.fn.__name__} for sm_{capability}: {last}")
    answer = json.loads(lines[-1])
    if "error" in answer:
        raise RuntimeError(answer["error"])
    return dict(answer, cubin=base64.b64decode(answer["cubin"]))


def _compile_requested() -> int:
    """The child's side of _compile_gluon_apart: the request on stdin, one JSON line on stdout."""
    from kbench.loader import load_file, module_name
    from kbench.registry import Registry

    request = json.load(sys.stdin)
    path = Path(request["file"])
    load_file(path, Registry())  # what the file registers goes nowhere
    kernel = getattr(sys.modules[module_name(path)], request["name"])
    try:
        res = from_triton(kernel, request["args"], request["constexprs"], request["options"], request["capability"])
    except RuntimeError as exc:
        print(json.dumps({"error": str(exc)}))
        return 0
    print(json.dumps(dict(res, cubin=base64.b64encode(res["cubin"]).decode())))
    return 0


def launch_figures(res: dict, blocks: int, threads: int, smem: int, shared: str | None = None) -> dict:
    """`kbench explain`'s figures of a compiled kernel: registers, spills, shared memory (``shared``
    describes it, else its size), blocks per SM and waves on an H200."""
    from kbench.devices import by_key
    from kbench.occupancy import blocks_per_sm

    fit = blocks_per_sm(threads, res["registers"], smem, (9, 0))
    h200 = by_key("h200")
    resident = fit["blocks_per_sm"] * h200.sms
    return {
        "registers per thread": f"{res['registers']} ({res['source']})",
        "spills per thread": f"{res['spill_stores']} bytes stored, {res['spill_loads']} loaded",
        "shared memory per block": shared or f"{smem:,} bytes",
        "blocks per SM (sm_90)": f"{fit['blocks_per_sm']}, limited by {' and '.join(fit['limited_by'])}: "
                                 f"occupancy {fit['occupancy']:.1%}",
        "waves on an H200": f"{blocks / resident:.2f} ({resident} blocks at once on {h200.sms} SMs)"
                            if resident else "does not fit on an SM",
        **({"largest innermost loop (SASS)": res["main_loop"]} if res.get("main_loop") else {}),
    }


if __name__ == "__main__":
    sys.exit(_compile_requested())
