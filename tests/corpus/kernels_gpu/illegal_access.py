"""Crashes with an illegal memory access: a Triton kernel stores 1 TiB past the output buffer."""

import triton
import triton.language as tl

from kbench.registry import implementation


@triton.jit
def _scribble(out_ptr):
    tl.store(out_ptr + (1 << 40), 1.0)


@implementation("attention", "cheat-illegal-access", backend="triton", cuda=True, modules=("torch", "triton"),
                description="writes far outside its buffer")
def illegal_access(case, inputs, out):
    def run():
        _scribble[(1,)](out)

    return run
