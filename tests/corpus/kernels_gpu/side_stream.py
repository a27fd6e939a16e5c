"""Does its work on a side stream the timing events do not cover: the events, recorded on the
current stream, see only the launches; a synchronised call shows the real time."""

from kbench.registry import implementation


@implementation("attention", "cheat-side-stream", backend="torch", cuda=True, description="works off the timed stream")
def side_stream(case, inputs, out):
    import torch
    import torch.nn.functional as F

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    side = torch.cuda.Stream()

    def run():
        side.wait_stream(torch.cuda.current_stream())  # after kbench's poisoning of out: a right answer
        with torch.cuda.stream(side):
            for _ in range(4):  # enough work to stand out from the launch overhead
                out.copy_(F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=case.causal))
        # No current_stream().wait_stream(side): the end event does not wait for the work.

    return run
