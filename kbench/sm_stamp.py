"""A one-warp Triton kernel that stamps SM 0's cycle counter and the global nanosecond timer.

Launched with one program per SM, so that one lands on SM 0 (nvbench reads the clock the same way):
two stamps around a timed call give the SM clock it ran at, Δcycles / Δns. Imported only where a
GPU measures (it imports Triton).
"""

import triton
import triton.language as tl


@triton.jit
def stamp_sm0(out_ptr):
    smid = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)
    now = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    ticks = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    if smid == 0:
        tl.store(out_ptr, now)
        tl.store(out_ptr + 1, ticks)
