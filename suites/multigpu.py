"""Multi-GPU suites: an all-reduce over N GPUs (one process each), and peer-to-peer copies between GPUs.

``allreduce`` (the classic NCCL ring all-reduce): every rank holds ``--bytes`` of
``--dtype``; the answer on every rank is the element-wise sum over the ranks. kbench starts the ranks
itself (:mod:`kbench.distributed`): kbench's worker is rank 0, ranks 1..N-1 are its child processes.
Rank r's input is a deterministic function of (seed, r), small integers whose sums are exact, so the
float64 reference is exact and so is the check (tolerance 0), on every rank. The fewest bytes are the
message size, so the GB/s column is nccl-tests' algorithm bandwidth (algbw); the bus bandwidth
busbw = algbw x 2(N-1)/N is in each record's figures and printed under the table. FLOPs are the
additions one rank's share of the work makes, (N-1)/N per element.

``p2p``: a copy of ``--bytes`` from GPU 0 to GPU 1 (torch's ``copy_``, peer access enabled by torch
where the devices allow it) is the checked and timed closure; after timing it measures the copy
bandwidth between every ordered pair of visible GPUs as a matrix (the record's figures, printed).

(The file is named so that it loads after ``matmul``: the built-in suites are listed in file order.)
"""

from kbench import busbw, exact_sums
from kbench.dtypes import ELEMENT_BYTES
from kbench.errors import UserError
from kbench.registry import suite
from kbench.suite import Axis, ByteSize, Suite, format_size

MAX_BYTES = 1 << 40
MAX_RANKS = 64  # one process each: kbench starts them all on this host
ALLREDUCE_DTYPES = ("fp32", "fp16", "bf16")


def _check_bytes(case, element: int) -> None:
    if case.bytes <= 0:
        raise UserError(f"--bytes must be positive (got {case.bytes})")
    if case.bytes > MAX_BYTES:
        raise UserError(f"--bytes must be at most 1TiB (got {format_size(case.bytes)})")
    if case.bytes % element:
        raise UserError(f"--bytes {format_size(case.bytes)} is not a whole number of {element}-byte elements")


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
        _check_bytes(case, ELEMENT_BYTES[case.dtype])

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
        figures["bus factor 2(N-1)/N"] = f"{busbw.bus_factor(n):.3f}"
        figures["bytes each rank sends (and receives) in a ring"] = f"{busbw.bus_factor(n) * case.bytes:,.0f}"
        figures["ring steps"] = f"{n - 1} reduce-scatter + {n - 1} all-gather, chunks of about {case.bytes / n:,.0f} bytes"
        return figures


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
        _check_bytes(case, 4)

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
