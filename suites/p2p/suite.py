"""Peer-to-peer copies between GPUs.

A copy of ``--bytes`` from GPU 0 to GPU 1 (torch's ``copy_``, peer access enabled by torch where the
devices allow it) is the checked and timed closure; after timing it measures the copy bandwidth between
every ordered pair of visible GPUs as a matrix (the record's figures, printed).
"""

from pathlib import Path

from kbench.loader import load_helper
from kbench.registry import suite
from kbench.suite import Axis, ByteSize, Suite

bandwidth = load_helper(Path(__file__).resolve().parent.parent / "_common" / "bandwidth.py")


@suite
class P2P(Suite):
    name = "p2p"
    description = "Copy between GPUs: GPU 0 to GPU 1 checked and timed, then the bandwidth matrix of every pair"
    axes = (
        Axis("bytes", ByteSize, (256 << 20,), "bytes copied (fp32 elements): 64MiB, 1GiB..."),
    )
    baseline = "copy"
    trials = 2
    tolerances = {"fp32": (0.0, 0.0)}  # a copy is exact

    def validate(self, case):
        bandwidth.check_message_bytes(case, 4)

    def make_inputs(self, case, seed, device):
        import torch

        gen = torch.Generator(device="cpu").manual_seed(seed)
        x = torch.randn(case.bytes // 4, generator=gen, dtype=torch.float32)
        return {"x": x.to(device)}

    def make_output(self, case, inputs):
        """On GPU 1 when there is one (else beside the input: the implementation then skips)."""
        import torch

        x = inputs["x"]
        device = x.device
        if device.type == "cuda" and torch.cuda.device_count() >= 2:
            device = torch.device("cuda", 1 if x.device.index != 1 else 0)
        return torch.empty(x.shape, dtype=x.dtype, device=device)

    def reference(self, case, inputs):
        import torch

        return inputs["x"].to(torch.float64)

    def flops(self, case):
        return 0.0

    def min_bytes(self, case):
        return float(case.bytes)
