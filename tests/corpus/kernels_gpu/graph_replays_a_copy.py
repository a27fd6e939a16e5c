"""Right whenever it is called, cheap in the CUDA graph it is timed as: called, it computes attention and
keeps the answer; while a graph is being captured, it records only a copy of the kept answer into its
output. Every timed replay reads the inputs of the calls before the capture, so each is right, at the
cost of one copy; replayed on new inputs, the graph gives the old answer."""

from kbench.registry import implementation


@implementation("attention", "cheat-graph-replays-a-copy", backend="torch", cuda=True,
                description="a copy in the timed graph")
def graph_replays_a_copy(case, inputs, out):
    import torch
    import torch.nn.functional as F

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    kept = {}

    def run():
        if not torch.cuda.is_current_stream_capturing():
            kept["answer"] = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                           is_causal=case.causal).to(out.dtype)
        out.copy_(kept["answer"])

    return run
