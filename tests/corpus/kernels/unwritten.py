"""Leaves its output unwritten: kbench poisons `out` with NaN before every call, so the NaN shows."""

from kbench.registry import implementation


@implementation("attention", "cheat-unwritten", backend="torch", description="never writes out")
def unwritten(case, inputs, out):
    def run():
        return None

    return run
