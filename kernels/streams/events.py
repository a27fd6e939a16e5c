"""streams: two streams ordered by an event (the classic cudaStreamWaitEvent example).

Stream 1 copies the buffer in and runs the first half of the work (``work // 2`` steps of the relax
kernel) into an intermediate buffer, then records an event; stream 2 waits for that event, runs the
other ``work - work // 2`` steps and copies the result out. The two halves compose to exactly the
suite's answer, so the check fails if stream 2 ever reads the intermediate buffer early.

The event is recorded *after* kernel 1. The classic example records its event before kernel1 (it also times from
it) and says stream 2 then waits for kernel1 to finish; it does not: a wait on an event recorded before
the kernel orders nothing after that kernel, and kernel2 may read data kernel1 has not written yet.
tests/gpu/test_streams_gpu.py runs that ordering to show it.
"""

from pathlib import Path

from kbench.loader import load_helper
from kbench.registry import implementation

_streams = load_helper(Path(__file__).parent / "_streams.py")


@implementation(
    "streams", "events", backend="cupy", cuda=True, modules=("torch", "cupy"), unit="cuda-core",
    description="stream 1: copy in + half the work, event; stream 2 waits on it: the other half + copy out",
)
def events(case, inputs, out):
    import torch

    x, y = _streams.host_buffers(inputs, out)
    n = x.numel()
    relax = _streams.Relax(case.work)
    d_in, d_mid, d_out = (_streams.device_buffer(n) for _ in range(3))
    first, second = torch.cuda.Stream(), torch.cuda.Stream()
    kernel1_done = torch.cuda.Event()
    work1 = case.work // 2
    work2 = case.work - work1

    def run():
        current = torch.cuda.current_stream()
        first.wait_stream(current)  # after kbench's start event
        second.wait_stream(current)
        with torch.cuda.stream(first):
            d_in.copy_(x, non_blocking=True)
            relax.launch(first, d_in, d_mid, n, work=work1)
            kernel1_done.record(first)  # after kernel 1: what stream 2 must wait for
        second.wait_event(kernel1_done)  # cudaStreamWaitEvent
        with torch.cuda.stream(second):
            relax.launch(second, d_mid, d_out, n, work=work2)
            y.copy_(d_out, non_blocking=True)
        current.wait_stream(second)  # kbench's end event covers both streams
        current.wait_stream(first)

    run.config = {"streams": 2, "work_stream1": work1, "work_stream2": work2, "host_memory": "pinned",
                  **relax.config(n)}
    return run
