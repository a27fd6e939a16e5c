"""streams: the pipelined schedule. The buffer in ``--chunks`` pieces over ``--streams`` CUDA streams
(chunk i on stream i % streams, as the classic pipelinedProcessing), each chunk copied in
from pinned host memory, through the relax kernel and back with async copies on its stream, so chunk
i+1's copy-in overlaps chunk i's kernel and chunk i-1's copy-out.

Unlike the classic example's loop (``totalSize / chunkSize`` chunks), a size that the chunk count does not divide
loses nothing: the chunks differ by at most one element (the streams suite's pipeline.chunk_ranges).

The timed closure makes its streams wait for the current stream and the current stream wait for
them, so kbench's start and end events cover all of it. After timing, the worker calls
``run.figures(timing)`` once: each stage alone, both copies at once, the serial schedule, the ideal
time, the overlap efficiency, and a timeline picture from per-chunk events (see _streams.py).
"""

from pathlib import Path

from kbench.loader import load_helper
from kbench.registry import implementation

_streams = load_helper(Path(__file__).parent / "_streams.py")


def explain(case, params) -> dict:
    """`kbench explain streams --impl pipelined`: the chunks, the streams and each chunk's kernel."""
    pipeline = _streams.pipeline

    n = case.bytes // 4
    ranges = pipeline.chunk_ranges(n, case.chunks)
    sizes = sorted({stop - start for start, stop in ranges})
    streams = min(case.streams, case.chunks)
    longest = sizes[-1]
    blocks = _streams.launch_blocks(longest)
    return {
        "chunks": f"{case.chunks} of " + " or ".join(f"{s:,} elements ({4 * s:,} bytes)" for s in sizes),
        "streams": f"{streams} (chunk i on stream i % {streams}); each stream: copy in, kernel, copy out, chunk after "
                   f"chunk, so one chunk's copy-in overlaps another's kernel and a third's copy-out",
        "device memory": f"{2 * streams} buffers of {4 * longest:,} bytes (in and out per stream, reused)",
        "kernel per chunk": f"{_streams.KERNEL}: up to {blocks:,} blocks of {_streams.THREADS} threads, "
                            f"{case.work} FMAs an element ({2 * case.work * n:,} FLOP in all)",
        "copies": f"{case.chunks} H2D + {case.chunks} D2H from pinned memory, {case.bytes:,} bytes each way",
        "ideal time": "the slowest stage's total + one chunk of each other stage (fill and drain); "
                      "kbench run measures each stage alone to compute it",
    }


@implementation(
    "streams", "pipelined", backend="cupy", cuda=True, modules=("torch", "cupy"), unit="cuda-core", explain=explain,
    description="--chunks chunks over --streams streams: copy in, kernel, copy out of different chunks overlap",
)
def pipelined(case, inputs, out):
    x, y = _streams.host_buffers(inputs, out)
    pipe = _streams.Pipeline(case, x, y)

    def run():
        pipe.run()

    run.config = pipe.config()
    run.figures = pipe.figures
    return run
