"""Hangs: never returns from the call."""

import time

from kbench.registry import implementation


@implementation("attention", "cheat-hangs", backend="torch", description="never returns")
def hangs(case, inputs, out):
    def run():
        while True:
            time.sleep(60)

    return run
