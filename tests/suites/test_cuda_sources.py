"""Every CUDA source under kernels/ compiles with nvcc for sm_80 and sm_90, warnings as errors; a source
built for an arch-specific target (sm_90a: wgmma, setmaxnreg) compiles for that target alone.

Where nvcc is missing the tests skip with a message. Sources are templates
(NVRTC instantiates them at run time); -DKBENCH_INSTANTIATE makes each file
instantiate the configurations kbench launches so that nvcc compiles them.
"""

import functools
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kbench.loader import BUILTIN_KERNELS

SOURCES = sorted(BUILTIN_KERNELS.rglob("*.cu"))
NVCC = shutil.which("nvcc")
# Sources whose instructions exist on one arch-specific target only (they #error elsewhere).
ARCH_SPECIFIC = {"wgmma.cu": ("sm_90a",), "cuda_fa3.cu": ("sm_90a",)}
BUILDS = [(source, arch) for source in SOURCES for arch in ARCH_SPECIFIC.get(source.name, ("sm_80", "sm_90"))]


@functools.cache
def _parallel_flags() -> list[str]:
    """-split-compile=0 (nvcc 12.1 and newer): a file's instances optimized on every core, about a quarter
    less time for the largest template files on two cores; nothing for an older nvcc."""
    done = subprocess.run([NVCC, "--version"], capture_output=True, text=True, timeout=60)
    found = re.search(r"release (\d+)\.(\d+)", done.stdout)
    return ["-split-compile=0"] if found and (int(found[1]), int(found[2])) >= (12, 1) else []


def test_there_are_cuda_sources():
    assert SOURCES, "kernels/ holds no .cu file"


def test_arch_specific_sources_exist():
    names = {source.name for source in SOURCES}
    assert set(ARCH_SPECIFIC) <= names, f"ARCH_SPECIFIC names a source kernels/ lacks: {set(ARCH_SPECIFIC) - names}"


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed here: CUDA sources not compiled")
@pytest.mark.parametrize("source,arch", BUILDS, ids=[f"{source.name}-{arch}" for source, arch in BUILDS])
def test_compiles_without_warnings(source: Path, arch: str, tmp_path):
    from kbench.kernel_resources import arch_flags

    done = subprocess.run(
        [NVCC, "-std=c++17", "-DKBENCH_INSTANTIATE", f"-I{BUILTIN_KERNELS / '_cuda'}", *arch_flags(arch), "-cubin",
         "-Xptxas", "-v", *_parallel_flags(),
         "-Werror", "all-warnings", "-o", str(tmp_path / "out.cubin"), str(source)],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr.lower(), done.stderr
    assert "Compiling entry function" in done.stderr, "KBENCH_INSTANTIATE instantiated no kernel"


def test_cupy_fa2_configuration_checks():
    from kernel_modules import load_kernel_module

    module = load_kernel_module(BUILTIN_KERNELS / "attention" / "cupy_fa2.py")
    # The FlashAttention walkthrough's configuration: Q 32 KiB + two K/V pairs of 64 KiB = 160 KiB at d=128.
    assert module.smem_bytes(128, 128, 128) == 160 * 1024
    assert module.check_config(128, 128, 128, 4) is None
    assert module.check_config(128, 128, 64, 4) is None
    assert "multiple of 16 rows" in module.check_config(128, 64, 64, 8)  # 8 rows a warp
    assert "multiple of 16" in module.check_config(128, 128, 40, 4)
    # stepped loads: a thread's copies 8 rows apart at d=128 with 4 warps, 4 apart with 2 warps
    assert module.check_config(128, 128, 64, 4, loads="stepped") is None
    assert "4 rows apart" in module.check_config(128, 64, 64, 2, loads="stepped")
    assert module.check_config(128, 64, 64, 2) is None
    # loads=auto (the default) steps where the tile allows it, else checks each copy: never a refusal
    assert module.resolve_loads("auto", 128, 64, 4) == "stepped"
    assert module.resolve_loads("auto", 128, 64, 2) == "checked"
    assert module.resolve_loads("checked", 128, 64, 4) == "checked"


def test_cupy_sources_inline_kbench_headers():
    """CuPy compiles the text source_text() returns: every kbench header inlined, once, so its
    compile cache (keyed on that text) notices an edited header."""
    from kbench.loader import load_helper

    common = load_helper(BUILTIN_KERNELS / "_cupy_common.py")
    text = common.source_text(BUILTIN_KERNELS / "matmul" / "wmma_smem.cu")
    assert '#include "kbench_' not in text
    assert text.count("namespace kbench_ptx {") == 1 and "struct Element<true>" in text
    assert "#include <mma.h>" in text  # CUDA's own headers are left to NVRTC's include path


def test_crt_include_finds_the_folder_with_crt_mma_h(tmp_path, monkeypatch):
    """pip's CUDA 13 runtime wheel has mma.h without crt/mma.h: the WMMA kernels need a folder that has it."""
    from kbench.loader import load_helper

    common = load_helper(BUILTIN_KERNELS / "_cupy_common.py")
    empty, full = tmp_path / "empty", tmp_path / "full"
    (empty / "include").mkdir(parents=True)
    (full / "include" / "crt").mkdir(parents=True)
    (full / "include" / "crt" / "mma.h").write_text("// stand-in\n")
    monkeypatch.setattr(common, "crt_include_candidates", lambda: [empty / "include", full / "include"])
    assert common.crt_include() == full / "include"

    monkeypatch.setattr(common, "crt_include_candidates", lambda: [empty / "include"])
    with pytest.raises(RuntimeError, match="nvidia-cuda-crt"):
        common.crt_include()


def test_crt_include_candidates_honour_cuda_path(tmp_path, monkeypatch):
    from kbench.loader import load_helper

    common = load_helper(BUILTIN_KERNELS / "_cupy_common.py")
    monkeypatch.setenv("CUDA_PATH", str(tmp_path))
    assert common.crt_include_candidates()[0] == tmp_path / "include"


def test_max_active_clusters_asks_the_driver_for_one_cluster_of_the_launch(monkeypatch):
    import ctypes

    from kbench.loader import load_helper

    common = load_helper(BUILTIN_KERNELS / "_cupy_common.py")
    asked = {}

    def query(count, function, config):  # stands for cuOccupancyMaxActiveClusters
        launch = config._obj
        asked.update(function=function.value, grid=list(launch.grid), block=list(launch.block),
                     smem=launch.shared_mem_bytes, attrs=launch.num_attrs)
        count._obj.value = 62
        return 0

    class Driver:
        cuOccupancyMaxActiveClusters = query

    monkeypatch.setattr(ctypes, "CDLL", lambda name: Driver)
    from types import SimpleNamespace

    kernel = SimpleNamespace(kernel=SimpleNamespace(ptr=0x1234))  # a RawKernel: .kernel is its cupy Function
    assert common.max_active_clusters(kernel, 2, 384, 200_000) == 62
    assert asked == {"function": 0x1234, "grid": [2, 1, 1], "block": [384, 1, 1], "smem": 200_000, "attrs": 0}

    def refuse(count, function, config):
        return 1  # CUDA_ERROR_INVALID_VALUE

    Driver.cuOccupancyMaxActiveClusters = refuse
    with pytest.raises(RuntimeError, match="CUresult 1"):
        common.max_active_clusters(kernel, 2, 384)


def test_instance_names_spell_bools_as_cpp_does():
    import numpy as np

    from kbench.loader import load_helper

    common = load_helper(BUILTIN_KERNELS / "_cupy_common.py")
    assert common.instance_name("k", 128, True, np.False_, "long long", 0) == "k<128, true, false, long long, 0>"
    assert common.instance_name("combine", 64, False) == "combine<64, false>"


def test_a_template_instance_is_compiled_once_per_process(monkeypatch):
    """compiled_module builds one cupy.RawModule per (source, instance, arch) and hands it back after:
    NVRTC runs once per process, whatever the number of launches set up (a stand-in cupy counts)."""
    import sys
    from types import SimpleNamespace

    from kbench.loader import load_helper

    built = []
    monkeypatch.setitem(sys.modules, "cupy", SimpleNamespace(RawModule=lambda **kw: built.append(kw) or object()))
    common = load_helper(BUILTIN_KERNELS / "_cupy_common.py")
    source = str(BUILTIN_KERNELS / "matmul" / "wgmma.cu")
    first = common.compiled_module(source, "matmul_wgmma_ws<128, 256, 4, false>", "sm_90a")
    assert common.compiled_module(source, "matmul_wgmma_ws<128, 256, 4, false>", "sm_90a") is first
    common.compiled_module(source, "matmul_wgmma_ws<128, 256, 4, true>", "sm_90a")
    assert [kw["name_expressions"] for kw in built] == [("matmul_wgmma_ws<128, 256, 4, false>",),
                                                       ("matmul_wgmma_ws<128, 256, 4, true>",)]
