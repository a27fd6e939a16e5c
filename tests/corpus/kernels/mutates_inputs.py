"""Mutates its inputs so the reference agrees: zeroes Q, K and V, then writes the attention of
zeros (all zeros). A reference computed from the inputs after the call would agree; kbench's
is computed from clones taken before it, and the inputs are compared with those clones."""

from kbench.registry import implementation


@implementation("attention", "cheat-mutates-inputs", backend="torch", description="zeroes its inputs")
def mutates_inputs(case, inputs, out):
    q, k, v = inputs["q"], inputs["k"], inputs["v"]

    def run():
        q.zero_()
        k.zero_()
        v.zero_()
        out.zero_()  # softmax(0) @ 0 = 0: right for the inputs as they are now

    return run
