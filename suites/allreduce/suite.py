"""An all-reduce over N GPUs, one process each (the classic NCCL ring all-reduce).

Every rank holds ``--bytes`` of ``--dtype``; the answer on every rank is the element-wise sum over the
ranks. kbench starts the ranks itself (``rank_group.py`` beside this file): kbench's worker is rank 0,
ranks 1..N-1 are its child processes. Rank r's input is a deterministic function of (seed, r), small
integers whose sums are exact, so the float64 reference is exact and so is the check (tolerance 0), on
every rank. The fewest bytes are the message size, so the GB/s column is nccl-tests' algorithm bandwidth
(algbw); the bus bandwidth busbw = algbw x 2(N-1)/N is in each record's figures and printed under the
table. FLOPs are the additions one rank's share of the work makes, (N-1)/N per element.
"""

from pathlib import Path

from kbench.dtypes import ELEMENT_BYTES
from kbench.errors import UserError
from kbench.loader import load_helper
from kbench.registry import suite
from kbench.suite import Axis, ByteSize, Suite

COMMON = Path(__file__).resolve().parent.parent / "_common"
bandwidth = load_helper(COMMON / "bandwidth.py")
exact_sums = load_helper(COMMON / "exact_sums.py")

MAX_RANKS = 64  # one process each: kbench starts them all on this host
ALLREDUCE_DTYPES = ("fp32", "fp16", "bf16")


@suite
class Allreduce(Suite):
    name = "allreduce"
    description = "Sum a buffer over N GPUs, one process each: NCCL's all-reduce vs a ring of sends and receives"
    axes = (
        Axis("bytes", ByteSize, (64 << 20,), "message size on each rank: 1000, 1MiB, 64MiB, 1GiB, 4GiB..."),
        Axis("gpus", int, (2,), "ranks, one process and one GPU each (on a CPU: processes summing with gloo)"),
        Axis("dtype", str, ("fp32",), "element type", choices=ALLREDUCE_DTYPES),
    )
    baseline = "nccl"
    trials = 2
    tolerances = {name: (0.0, 0.0) for name in ALLREDUCE_DTYPES}  # integer-valued inputs: exact sums

    def validate(self, case):
        if case.gpus < 2:
            raise UserError(f"--gpus must be at least 2: an all-reduce needs peers (got {case.gpus})")
        if case.gpus > MAX_RANKS:
            raise UserError(f"--gpus must be at most {MAX_RANKS} (got {case.gpus})")
        bandwidth.check_message_bytes(case, ELEMENT_BYTES[case.dtype])

    def elements(self, case) -> int:
        return case.bytes // ELEMENT_BYTES[case.dtype]

    def make_inputs(self, case, seed, device):
        """Rank 0's input and the seed every rank's input derives from (a CPU tensor: read on every call
        without a device synchronise; kbench's refill after timing changes it, and the closure follows)."""
        import torch

        x = exact_sums.rank_values(self.elements(case), seed, 0, case.gpus, case.dtype, device)
        return {"x": x, "seed": torch.tensor([seed], dtype=torch.int64)}

    def make_output(self, case, inputs):
        import torch

        return torch.empty_like(inputs["x"])

    def reference(self, case, inputs):
        x = inputs["x"]
        return exact_sums.exact_sum(x.numel(), int(inputs["seed"]), case.gpus, case.dtype, x.device, rank0=x)

    def flops(self, case):
        return (case.gpus - 1) / case.gpus * self.elements(case)

    def min_bytes(self, case):
        return float(case.bytes)

    def explain(self, case):
        figures = super().explain(case)
        n = case.gpus
        figures["bus factor 2(N-1)/N"] = f"{bandwidth.bus_factor(n):.3f}"
        figures["bytes each rank sends (and receives) in a ring"] = f"{bandwidth.bus_factor(n) * case.bytes:,.0f}"
        figures["ring steps"] = f"{n - 1} reduce-scatter + {n - 1} all-gather, chunks of about {case.bytes / n:,.0f} bytes"
        return figures

    plot_metrics = ("busbw", "algbw")

    def plot(self, records, path, metric):
        """nccl-tests' bus or algorithm bandwidth against the message size."""
        return load_helper(Path(__file__).resolve().parent / "plots.py").bandwidth_plot(records, path, metric)
