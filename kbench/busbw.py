"""nccl-tests' bandwidth figures of an all-reduce: algorithm bandwidth (bytes / time) and bus
bandwidth (algbw x 2(N-1)/N, comparable with a link's speed whatever the number of ranks)."""

from __future__ import annotations

def bus_factor(world_size: int) -> float:
    """nccl-tests' all-reduce bus factor 2(N-1)/N: the bytes each rank sends (and receives) in a ring
    all-reduce over the message size (reduce-scatter, then all-gather, N-1 steps of size/N each)."""
    if world_size < 1:
        raise ValueError(f"world size must be at least 1 (got {world_size})")
    return 2.0 * (world_size - 1) / world_size


def algbw_gbps(nbytes: float, ms: float) -> float:
    """Algorithm bandwidth: the message size over the time, in GB/s (10^9 bytes a second)."""
    return nbytes / (ms / 1e3) / 1e9


def busbw_gbps(nbytes: float, ms: float, world_size: int) -> float:
    """Bus bandwidth: algbw x 2(N-1)/N, comparable with the link speed whatever the number of ranks."""
    return algbw_gbps(nbytes, ms) * bus_factor(world_size)


def gbps_text(value: float) -> str:
    return f"{value:.1f} GB/s" if value >= 10 else f"{value:.3g} GB/s"
