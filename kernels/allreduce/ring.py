"""allreduce: the textbook NCCL-style ring all-reduce, written from point-to-point sends and receives.

N ranks in a ring (rank r sends to r+1 and receives from r-1). The buffer is cut into N chunks (sizes
differ by at most one element: any element count works). Reduce-scatter, N-1 steps: at step s rank r
sends chunk r-s (its input at step 0, after that the partial sum it made the step before) and receives
chunk r-s-1, which it adds to its own input's chunk into ``out``; after N-1 steps rank r holds the whole
sum of chunk r+1. All-gather, N-1 steps: rank r sends chunk r+1-s and receives chunk r-s straight into
``out``. Each step moves size/N bytes each way, 2(N-1)/N x size in all: the ring all-reduce's well-known figure.

Each step is one ``torch.distributed.batch_isend_irecv`` (a send and a receive together: NCCL groups
them, so two ranks that send to each other at once cannot deadlock). With ``pieces`` > 1 each chunk goes
in pieces and the steps are software-pipelined: a piece's receive is waited for (and its addition
queued) only after the next piece's transfer was posted, so on a GPU the addition of one piece overlaps
the transfer of the next (NCCL's stream runs the transfers, the current stream the additions; torch
orders the two). A piece is at least ``min_piece`` bytes (small messages stay in one piece: fewer,
larger transfers).

Default: one piece. On two H200s (NVLink) pieces cost more than they overlap: busbw at 1 GiB was
316.8 GB/s with 1 piece, 275.9 with 2, 263.7 with 4, 246.1 with 8 (docs/performance.md); with more
ranks (more steps to pipeline) ``--param pieces=`` is the knob to sweep.

The input is only read (``out`` is written), so the closure is out of place: no copy, unlike torch's
in-place all_reduce. On a CPU it runs over gloo (a correctness check of the algorithm, not a speed).
"""

from collections import deque

from kbench.loader import BUILTIN_SUITES, load_helper
from kbench.registry import Unsupported, implementation

distributed = load_helper(BUILTIN_SUITES / "allreduce" / "rank_group.py")


def bounds(count: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` consecutive ranges covering 0..count, sizes differing by at most one."""
    return [(i * count // parts, (i + 1) * count // parts) for i in range(parts)]


def piece_count(count: int, world: int, element: int, pieces: int, min_piece: int) -> int:
    """Pieces a chunk is sent in: ``pieces``, fewer when a piece would be under ``min_piece`` bytes."""
    chunk_bytes = (count // world) * element
    return max(1, min(pieces, chunk_bytes // max(1, min_piece)))


def schedule(rank: int, world: int) -> list[tuple[str, int, int]]:
    """The ring's steps for ``rank``: (phase, chunk sent, chunk received), reduce-scatter then all-gather."""
    steps = [("reduce-scatter", (rank - s) % world, (rank - s - 1) % world) for s in range(world - 1)]
    steps += [("all-gather", (rank + 1 - s) % world, (rank - s) % world) for s in range(world - 1)]
    return steps


def build(x, out, pieces=1, min_piece=1 << 20):
    """Every rank: out <- the sum over the ranks of x, by the ring (x is only read)."""
    import torch
    import torch.distributed as dist

    if pieces < 1 or min_piece < 1:
        raise Unsupported(f"pieces and min_piece must be at least 1 (got {pieces} and {min_piece})")
    rank, world = dist.get_rank(), dist.get_world_size()
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    flat_x, flat_out = x.reshape(-1), out.reshape(-1)
    count = flat_x.numel()
    chunks = bounds(count, world)
    p = piece_count(count, world, x.element_size(), pieces, min_piece)
    longest = max(b - a for a, b in chunks)
    tmp = torch.empty((p, -(-longest // p) if longest else 0), dtype=x.dtype, device=x.device)

    def pieces_of(chunk: int) -> list[tuple[int, int]]:
        a, b = chunks[chunk]
        return [(a + lo, a + hi) for lo, hi in bounds(b - a, p)]

    # Every transfer of the ring, in order: (what is sent, where it is received, the addition after it).
    transfers = []
    for step, (phase, sent, received) in enumerate(schedule(rank, world)):
        source = flat_x if step == 0 else flat_out
        for j, ((sa, sb), (ra, rb)) in enumerate(zip(pieces_of(sent), pieces_of(received))):
            if phase == "reduce-scatter":
                landing = tmp[j, :rb - ra]
                add = (flat_x[ra:rb], landing, flat_out[ra:rb])
            else:
                landing, add = flat_out[ra:rb], None
            ops = []
            if sb > sa:  # an empty piece (fewer elements than ranks x pieces) is skipped on both sides
                ops.append(dist.P2POp(dist.isend, source[sa:sb], nxt))
            if rb > ra:
                ops.append(dist.P2POp(dist.irecv, landing, prv))
            transfers.append((ops, add))
    lag = min(1, p - 1)  # transfers posted ahead of the additions (a piece's next step needs its addition)

    def finish(works, add):
        for work in works:
            work.wait()
        if add is not None and add[0].numel():
            torch.add(add[0], add[1], out=add[2])

    def op():
        pending = deque()
        for ops, add in transfers:
            pending.append((dist.batch_isend_irecv(ops) if ops else [], add))
            while len(pending) > lag:
                finish(*pending.popleft())
        while pending:
            finish(*pending.popleft())

    op.description = "ring from batch_isend_irecv, out of place"
    op.alone_description = "the ring itself"
    op.config = {"pieces": p, "steps": 2 * (world - 1), "transfers": len(transfers),
                 "api": "torch.distributed.batch_isend_irecv"}
    return op


def explain(case, params) -> dict:
    """`kbench explain allreduce --impl ring`: the ring's steps and traffic for this case, per rank."""
    from kbench.dtypes import ELEMENT_BYTES

    world, element = case.gpus, ELEMENT_BYTES[case.dtype]
    count = case.bytes // element
    chunks = bounds(count, world)
    sizes = sorted({(stop - start) * element for start, stop in chunks})
    pieces = piece_count(count, world, element, int(params["pieces"]), int(params["min_piece"]))
    start, stop = chunks[0]  # the suite validates world >= 2, so chunk 0 exists
    sent = (stop - start) * element * 2 * (world - 1)
    return {
        "ring": f"{world} ranks: rank r sends to r+1 and receives from r-1; {world} chunks of "
                + " or ".join(f"{s:,}" for s in sizes) + " bytes",
        "steps": f"{world - 1} reduce-scatter + {world - 1} all-gather, each one batch_isend_irecv of a chunk in "
                 f"{pieces} piece{'s' if pieces > 1 else ''} (--param pieces={params['pieces']}, "
                 f"min_piece={params['min_piece']:,} bytes)",
        "bytes sent per rank": f"about {sent:,} = 2(N-1)/N x {case.bytes:,} "
                               f"(the ring all-reduce's figure; busbw counts it)",
        "additions": f"{world - 1} chunk additions per rank (reduce-scatter), on the current stream",
    }


@implementation("allreduce", "ring", backend="torch.distributed", unit="memory", explain=explain,
                params={"pieces": 1, "min_piece": 1 << 20},
                description="ring all-reduce from batch_isend_irecv: N-1 reduce-scatter + N-1 all-gather steps")
def ring(case, inputs, out, pieces=1, min_piece=1 << 20):
    return distributed.collective(case, inputs, out, build, params={"pieces": pieces, "min_piece": min_piece})
