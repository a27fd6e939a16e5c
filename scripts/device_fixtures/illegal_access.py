"""A deliberately broken kernel for the device check: a Triton store far out of bounds.

kbench must report it as CRASH (illegal memory access) and keep every other row.
Loaded only with --kernels scripts/device_fixtures.
"""

import triton
import triton.language as tl

from kbench.registry import implementation


@triton.jit
def _scribble(out, far):
    offs = tl.arange(0, 128)
    tl.store(out + far + offs, tl.zeros([128], dtype=tl.float16))


@implementation("attention", "broken-illegal-access", backend="triton", cuda=True, modules=("torch", "triton"))
def broken(case, inputs, out):
    def run():
        _scribble[(1,)](out, 1 << 40)

    return run
