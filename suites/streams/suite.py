"""Streams: copy a buffer from pinned host memory to the GPU, through a kernel, and back; overlapped
over chunks and streams (the classic CUDA multi-stream pipeline), measured against the ideal.

The input is ``--bytes`` of fp32 in pinned host memory, the output the same size in pinned host
memory: an implementation's closure does the copy in, the kernel and the copy out, so kbench's
time is the whole round trip. The kernel is ``y <- a*y + b`` repeated ``--work`` times per element
(one fp32 FMA each, see pipeline.py beside this file), so ``--work`` sets the arithmetic per byte copied
and balances compute against the copies. FLOPs are 2·work per element; the fewest bytes are the
buffer in and the buffer out (the GB/s column is the host traffic, both directions).
"""

from pathlib import Path

from kbench.errors import UserError
from kbench.loader import load_helper
from kbench.registry import suite
from kbench.suite import Axis, ByteSize, Suite

pipeline = load_helper(Path(__file__).resolve().parent / "pipeline.py")

ELEMENT = 4  # fp32
MAX_BYTES = 1 << 40


@suite
class Streams(Suite):
    name = "streams"
    description = "Copy in, compute, copy out: serial, pipelined over chunks and streams, and event-ordered streams"
    axes = (
        Axis("bytes", ByteSize, (1 << 30,), "size of the fp32 input (and of the output) in pinned host memory: "
             "1000, 256MiB, 1GiB..."),
        Axis("chunks", int, (16,), "pieces the buffer is cut into (pipelined); they need not divide it"),
        Axis("streams", int, (4,), "CUDA streams the chunks go round (pipelined; more than --chunks: one per chunk)"),
        Axis("work", int, (2048,), "FMAs per element (2 FLOP each): compute per byte copied"),
    )
    baseline = "serial"
    trials = 3

    def validate(self, case):
        if case.bytes <= 0 or case.bytes % ELEMENT:
            raise UserError(f"--bytes must be a positive multiple of {ELEMENT} (fp32 elements; got {case.bytes})")
        if case.bytes > MAX_BYTES:
            raise UserError(f"--bytes must be at most 1TiB (got {case.bytes})")
        if case.chunks < 1 or case.streams < 1:
            raise UserError(f"--chunks and --streams must be at least 1 (got {case.chunks} and {case.streams})")
        if case.chunks > case.bytes // ELEMENT:
            raise UserError(f"--chunks {case.chunks} is more than the {case.bytes // ELEMENT} elements of --bytes "
                            f"{case.bytes}: a chunk would be empty")
        if not 0 <= case.work <= pipeline.MAX_WORK:
            raise UserError(f"--work must be in 0..{pipeline.MAX_WORK} (got {case.work})")

    def elements(self, case) -> int:
        return case.bytes // ELEMENT

    def tolerance(self, case):
        return pipeline.relax_tolerance(case.work)

    def make_inputs(self, case, seed, device):
        """x uniform in [-1, 1) (the tolerance assumes |x| <= 1), in pinned host memory on a CUDA
        machine (an implementation refuses pageable memory), plain host memory otherwise."""
        import torch

        gen = torch.Generator(device="cpu").manual_seed(seed)
        x = torch.empty(self.elements(case), dtype=torch.float32, pin_memory=device == "cuda")
        x.uniform_(-1.0, 1.0, generator=gen)
        return {"x": x}

    def make_output(self, case, inputs):
        import torch

        x = inputs["x"]
        return torch.empty(x.shape, dtype=torch.float32, pin_memory=x.is_pinned())

    def reference(self, case, inputs):
        """1 + (x - 1)·a^work in float64, the exact value of the kernel's iteration. On the GPU when
        there is one (the harness compares there too): checking a 1 GiB output on the host's cores
        would take longer than the run."""
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
        ref = inputs["x"].to(device=device, dtype=torch.float64)
        return ref.sub_(1.0).mul_(pipeline.relax_reference_coefficient(case.work)).add_(1.0)

    def flops(self, case):
        return 2.0 * case.work * self.elements(case)

    def min_bytes(self, case):
        return 2.0 * case.bytes

    def explain(self, case):
        figures = super().explain(case)
        ranges = pipeline.chunk_ranges(self.elements(case), case.chunks)
        sizes = sorted({(stop - start) * ELEMENT for start, stop in ranges})
        figures["chunk bytes"] = " or ".join(f"{size:,}" for size in sizes)
        figures["streams used"] = str(min(case.streams, case.chunks))
        return figures
