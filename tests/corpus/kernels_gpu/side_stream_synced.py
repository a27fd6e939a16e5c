"""Does its work on a side stream and waits for it before returning: the events, recorded on the current
stream, see nothing; a synchronised call is long, but the work has ended by the time the call returns,
as a host-bound library's would have. Only the call's waiting on the GPU gives it away."""

from kbench.registry import implementation


@implementation("attention", "cheat-side-stream-synced", backend="torch", cuda=True,
                description="works off the timed stream, synchronising that stream before it returns")
def side_stream_synced(case, inputs, out):
    import torch
    import torch.nn.functional as F

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    side = torch.cuda.Stream()

    def run():
        side.wait_stream(torch.cuda.current_stream())  # after kbench's poisoning of out: a right answer
        with torch.cuda.stream(side):
            for _ in range(4):  # enough work to stand out from the launch overhead
                out.copy_(F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=case.causal))
        side.synchronize()  # the host waits for the side stream alone: the current stream stays free

    return run
