"""p2p: torch's copy_ between GPUs (the classic cudaMemcpyPeer), and the matrix of every pair.

The checked and timed closure copies the input on GPU 0 into the output on GPU 1. torch runs a copy
between devices on the *source* device's current stream (the destination's stream waits for it), and
enables peer access itself where ``cudaDeviceCanAccessPeer`` allows it; without it the driver stages
the copy through host memory. kbench's events are on GPU 0's current stream, so they cover the copy.

After timing (the record's figures), every ordered pair (i, j) of visible GPUs is measured the same
way: a buffer of ``--bytes`` on GPU i copied into one on GPU j, events on GPU i's current stream, the
mean of back-to-back copies after a warm-up; i == j is a copy within one GPU's memory, for scale.
GB/s counts the bytes copied once (10^9 bytes a second).
"""

from kbench.loader import BUILTIN_SUITES, load_helper
from kbench.registry import Unsupported, implementation

algbw_gbps = load_helper(BUILTIN_SUITES / "_common" / "bandwidth.py").algbw_gbps

SECONDS = 0.1  # of back-to-back copies per pair
MIN_COPIES, MAX_COPIES = 3, 50


def peer_matrix():
    """can_device_access_peer for every ordered pair (True on the diagonal)."""
    import torch

    n = torch.cuda.device_count()
    return [[i == j or bool(torch.cuda.can_device_access_peer(i, j)) for j in range(n)] for i in range(n)]


def time_copy(src, dst) -> float:
    """Milliseconds one src -> dst copy takes, on src's device's current stream."""
    import torch

    with torch.cuda.device(src.device):
        for _ in range(2):
            dst.copy_(src)
        torch.cuda.synchronize(src.device)
        torch.cuda.synchronize(dst.device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        once = start.elapsed_time(end)
        copies = int(min(MAX_COPIES, max(MIN_COPIES, SECONDS * 1e3 / max(once, 1e-3))))
        start.record()
        for _ in range(copies):
            dst.copy_(src)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / copies


def bandwidth_matrix(nbytes: int) -> list[list[float]]:
    """GB/s of a copy of ``nbytes`` from GPU i (row) to GPU j (column)."""
    import torch

    n = torch.cuda.device_count()
    count = nbytes // 4
    table = []
    for i in range(n):
        src = torch.ones(count, dtype=torch.float32, device=f"cuda:{i}")
        row = []
        for j in range(n):
            dst = torch.empty(count, dtype=torch.float32, device=f"cuda:{j}")
            row.append(algbw_gbps(nbytes, time_copy(src, dst)))
            del dst
        table.append(row)
        del src
    torch.cuda.empty_cache()
    return table


def matrix_lines(gbps: list[list[float]], peer: list[list[bool]]) -> list[str]:
    """The matrix as text: rows the source GPU, columns the destination; '*' marks a pair without peer access."""
    n = len(gbps)
    width = max(8, *(len(f"{v:.1f}") + 2 for row in gbps for v in row))
    lines = ["copy GB/s, row = source GPU, column = destination GPU (* no peer access: staged through the host; "
             "the diagonal: a copy within one GPU)",
             "src\\dst".ljust(8) + "".join(f"GPU{j}".rjust(width) for j in range(n))]
    for i, row in enumerate(gbps):
        cells = [f"{value:.1f}" + ("" if peer[i][j] else "*") for j, value in enumerate(row)]
        lines.append(f"GPU{i}".ljust(8) + "".join(cell.rjust(width) for cell in cells))
    return lines


@implementation("p2p", "copy", backend="torch", cuda=True, unit="memory",
                description="torch copy_ from GPU 0 to GPU 1 (peer access where allowed); then every pair's GB/s")
def copy(case, inputs, out):
    import torch

    found = torch.cuda.device_count()
    if found < 2:
        raise Unsupported(f"needs 2 GPUs, found {found}")
    x = inputs["x"]
    if x.device == out.device:
        raise Unsupported("the output is on the input's GPU: nothing crosses between GPUs")

    def run():
        out.copy_(x)

    def figures(timing: dict) -> dict:
        gbps = bandwidth_matrix(case.bytes)
        peer = peer_matrix()
        return {"matrix_gbps": gbps, "peer_access": peer, "bytes": case.bytes,
                "summary": matrix_lines(gbps, peer)}

    run.config = {"source": str(x.device), "destination": str(out.device),
                  "peer_access": bool(torch.cuda.can_device_access_peer(x.device.index, out.device.index))}
    run.figures = figures
    return run
