"""Crashes the process with a memory fault (the CPU's illegal memory access): reads address 0."""

from kbench.registry import implementation


@implementation("attention", "cheat-segfault", backend="torch", description="reads address 0")
def segfault(case, inputs, out):
    import ctypes

    def run():
        ctypes.string_at(0)

    return run
