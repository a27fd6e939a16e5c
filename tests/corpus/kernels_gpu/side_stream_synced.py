"""Does its work on a side stream and waits for it before returning. The side stream waits for nothing,
so if kbench held the timed stream before the start event while the host queued the call, the work
would run beside the hold and be over before the events start: they would see nothing. A synchronised
call is long, but the GPU is done when the call returns, as a host-bound library's would be. Its waiting
on the GPU gives it away (with every SM held, it cannot return early), and a call that waits is timed
from an idle GPU, without the hold: its events span the side stream's work, and its time is its own.

Its output is right: kbench poisons it on the timed stream before the call, and the side stream's first
kernels (the attention) run long before its last one (the copy into the output) writes it."""

from kbench.registry import implementation


@implementation("attention", "cheat-side-stream-synced", backend="torch", cuda=True,
                description="works off the timed stream, during the hold before the start event, and waits for it")
def side_stream_synced(case, inputs, out):
    import torch
    import torch.nn.functional as F

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    side = torch.cuda.Stream()

    def run():
        with torch.cuda.stream(side):
            for _ in range(4):  # enough work to stand out from the launch overhead
                result = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=case.causal)
            out.copy_(result)
        side.synchronize()  # the host waits for the side stream alone: the timed stream stays free

    return run
