"""kbench.sass: the loops of a disassembly, found from its backward branches, and the main loop's
summary that `kbench explain` shows (on text shaped as cuobjdump -sass prints it; the real tool where
it is installed)."""

import shutil
from collections import Counter
from pathlib import Path

import pytest

from kbench import sass

# An outer loop (0x0010 .. 0x00f0) holding a spin on an mbarrier (0x0030 .. 0x0040, two instructions)
# and an inner loop (0x0060 .. 0x00c0), then a loop after it (0x0110 .. 0x0130). Addresses are 16 apart.
LISTING = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;                        /* 0x00000a0000017a02 */
        /*0010*/                   S2R R0, SR_TID.X ;                             /* 0x0000000000007919 */
        /*0020*/                   LDG.E.128 R4, desc[UR4][R2.64] ;               /* 0x0000000402047981 */
        /*0030*/                   SYNCS.PHASECHK.TRANS64 P0, [UR4], R3 ;         /* 0x00000003ff0075a7 */
        /*0040*/              @!P0 BRA 0x30 ;                                     /* 0xfffffffc00e08947 */
        /*0050*/                   HMMA.16816.F32 R8, R4, R6, R8 ;                /* 0x0000000604087237 */
        /*0060*/                   HFMA2 R10, R11, R12, R13 ;                    /* 0x0000000c0b0a7231 */
        /*0070*/                   HFMA2 R14, R11, R12, R13 ;                    /* 0x0000000c0b0e7231 */
        /*0080*/                   LOP3.LUT R15, R4, 0xf000f, R5, 0xea, !PT ;     /* 0x000f000f040f7812 */
        /*0090*/                   HMMA.16816.F32 R8, R4, R6, R8 ;                /* 0x0000000604087237 */
        /*00a0*/                   ISETP.GE.AND P1, PT, R0, 0x4, PT ;             /* 0x000000040000780c */
        /*00b0*/               @P1 HADD2 R16, R14, R15 ;                          /* 0x0000000f0e107230 */
        /*00c0*/               @P1 BRA 0x60 ;                                     /* 0xfffffff800e41947 */
        /*00d0*/                   FMUL R17, R8, 0.5 ;                            /* 0x3f00000008117820 */
        /*00e0*/                   ISETP.NE.AND P2, PT, R0, RZ, PT ;              /* 0x000000ff0000720c */
        /*00f0*/              @!P2 BRA 0x10 ;                                     /* 0xfffffff400c0a947 */
        /*0100*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;                 /* 0x0000000000007b1d */
        /*0110*/                   FADD R18, R17, R17 ;                           /* 0x0000001111127221 */
        /*0120*/                   FADD R19, R18, R17 ;                           /* 0x0000001112137221 */
        /*0130*/               @P2 BRA !P1, 0x110 ;                               /* 0xfffffffc0020a947 */
        /*0140*/                   EXIT ;                                         /* 0x000000000000794d */
        /*0150*/                   BRA 0x150;                                     /* 0xfffffffc00fc7947 */
"""


def test_every_backward_branch_is_a_loop_with_its_instructions():
    found = sass.loops(LISTING)
    assert [(loop.start, loop.end, loop.instructions) for loop in found] == \
        [(0x10, 0xf0, 15), (0x60, 0xc0, 7), (0x110, 0x130, 3), (0x30, 0x40, 2)]
    inner = found[1]
    assert inner.opcodes == Counter({"HFMA2": 2, "HMMA": 1, "LOP3": 1, "ISETP": 1, "HADD2": 1, "BRA": 1})
    assert inner.summary(most=2) == "7 instructions a pass (static count): HFMA2 2, LOP3 1"  # ties: first seen


def test_innermost_loops_hold_no_other_loop_of_the_given_size():
    found = sass.loops(LISTING)
    spans = {(loop.start, loop.end): loop for loop in found}
    outer, inner, after, spin = spans[(0x10, 0xf0)], spans[(0x60, 0xc0)], spans[(0x110, 0x130)], spans[(0x30, 0x40)]
    # the outer loop holds the inner one (7 instructions): not innermost at a floor of 4
    assert sass.innermost(found, at_least=4) == [inner, after, spin]
    # at a floor of 8 neither the inner loop nor the spin counts, and the outer loop is innermost
    assert sass.innermost(found, at_least=8) == [outer, inner, after, spin]


# Two loops one after the other, of 4 and 3 instructions: one loop's two versions, as a kernel with an
# edge-free copy of its loop has.
TWO_VERSIONS = """
        /*0000*/                   HFMA2 R1, R2, R3, R4 ;
        /*0010*/                   HFMA2 R5, R2, R3, R4 ;
        /*0020*/                   HMMA.16816.F32 R8, R4, R6, R8 ;
        /*0030*/               @P0 BRA 0x0 ;
        /*0040*/                   HFMA2 R1, R2, R3, R4 ;
        /*0050*/                   HMMA.16816.F32 R8, R4, R6, R8 ;
        /*0060*/               @P1 BRA 0x40 ;
        /*0070*/                   EXIT ;
"""


def test_main_loop_names_the_next_loop_only_when_it_is_half_as_large(monkeypatch, tmp_path):
    # innermost with the default 32-instruction floor: no loop here is that large, so none is held
    monkeypatch.setattr(sass, "disassemble", lambda cubin: LISTING)
    assert sass.main_loop(tmp_path / "k.cubin") == sass.loops(LISTING)[0].summary()  # 7 is less than half of 15
    monkeypatch.setattr(sass, "disassemble", lambda cubin: TWO_VERSIONS)
    assert sass.main_loop(tmp_path / "k.cubin") == (
        "4 instructions a pass (static count): HFMA2 2, HMMA 1, BRA 1; "
        "another loop: 3 instructions a pass (static count): HFMA2 1, HMMA 1, BRA 1")
    monkeypatch.setattr(sass, "disassemble", lambda cubin: None)
    assert sass.main_loop(tmp_path / "k.cubin") is None


def test_without_cuobjdump_there_is_no_disassembly(monkeypatch, tmp_path):
    monkeypatch.setattr(sass, "cuda_tool", lambda name: None)
    assert sass.disassemble(tmp_path / "k.cubin") is None


def test_cuda_tools_are_found_on_path_or_in_the_nvidia_wheels(monkeypatch, tmp_path):
    """PATH first (a CUDA toolkit), else nvidia/cu13/bin or cu12/bin of pip's NVIDIA wheels; a file that
    is not executable is not a tool."""
    import types

    wheels = tmp_path / "nvidia"
    (wheels / "cu13" / "bin").mkdir(parents=True)
    tool = wheels / "cu13" / "bin" / "cuobjdump"
    tool.write_text("#!/bin/sh\n")
    (wheels / "cu13" / "bin" / "nvdisasm").write_text("not executable")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(sass.importlib.util, "find_spec",
                        lambda name: types.SimpleNamespace(submodule_search_locations=[str(wheels)]))
    assert sass.cuda_tool("cuobjdump") is None  # not executable yet
    tool.chmod(0o755)
    assert sass.cuda_tool("cuobjdump") == str(tool) and sass.cuda_tool("nvdisasm") is None
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/local/cuda/bin/{name}")
    assert sass.cuda_tool("cuobjdump") == "/usr/local/cuda/bin/cuobjdump"


@pytest.mark.skipif(sass.cuda_tool("cuobjdump") is None or shutil.which("nvcc") is None,
                    reason="needs nvcc and cuobjdump (the CUDA toolkit, or the nvidia-cuda-cuobjdump wheel)")
def test_a_built_kernels_main_loop_is_found():
    from kbench.kernel_resources import from_nvcc
    from kbench.loader import BUILTIN_KERNELS

    source = Path(BUILTIN_KERNELS) / "decode" / "cupy_bitdecode.cu"
    res = from_nvcc(source, "bitdecode_partial<4, false, 128, 32, 4, 1, true, 0>")
    # the tile loop: 16 HMMA for S and 16 for P V per n8/k16 tile pair, 64 in all, and its dequantization
    assert "HMMA 64" in res["main_loop"] and "HFMA2" in res["main_loop"]
