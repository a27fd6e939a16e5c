"""Triton kernels that read the SM's own timers. Imported only where a GPU measures (they import Triton).

- ``stamp_sm0``: one warp that stamps SM 0's cycle counter and the global nanosecond timer. Launched
  with one program per SM, so that one lands on SM 0 (nvbench reads the clock the same way): two
  stamps around a timed call give the SM clock it ran at, Δcycles / Δns.
- ``spin``: programs that fill the GPU and spin for a given time, holding every SM.
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


@triton.jit
def spin(duration_ns):
    """Every thread of the program spins on the global timer for ``duration_ns`` from its start. Two
    programs of 1,024 threads an SM take every SM's 2,048 thread slots, so no kernel of another stream
    can start anywhere until they end (kbench.timing.TorchCuda.hold_device checks it each time)."""
    start = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    now = start
    while now - start < duration_ns:
        now = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False,
                                        pack=1)
