"""streams: the serial schedule, the baseline. One stream: the whole buffer from pinned host memory to
the device, the relax kernel over all of it, the whole buffer back; nothing overlaps.

Set-up (device buffers of the whole size, the compiled kernel) happens here, never in the timed
closure. Everything runs on torch's current stream, so kbench's events cover it.
"""

from pathlib import Path

from kbench.loader import load_helper
from kbench.registry import implementation

_streams = load_helper(Path(__file__).parent / "_streams.py")


@implementation(
    "streams", "serial", backend="cupy", cuda=True, modules=("torch", "cupy"), unit="cuda-core",
    description="one stream: all of the buffer in (pinned H2D), the relax kernel, all of it out (D2H)",
)
def serial(case, inputs, out):
    import torch

    x, y = _streams.host_buffers(inputs, out)
    relax = _streams.Relax(case.work)
    d_in, d_out = _streams.device_buffer(x.numel()), _streams.device_buffer(x.numel())

    def run():
        _streams.serial_schedule(torch.cuda.current_stream(), x, d_in, d_out, y, relax)

    run.config = {"chunks": 1, "streams": 1, "host_memory": "pinned", **relax.config(x.numel())}
    return run
