"""Message sizes and nccl-tests' bandwidth figures of the multi-GPU suites: algorithm bandwidth
(bytes / time) and an all-reduce's bus bandwidth (algbw x 2(N-1)/N, comparable with a link's speed
whatever the number of ranks)."""

from __future__ import annotations

from kbench.errors import UserError
from kbench.suite import format_size

MAX_BYTES = 1 << 40


def check_message_bytes(case, element: int) -> None:
    if case.bytes <= 0:
        raise UserError(f"--bytes must be positive (got {case.bytes})")
    if case.bytes > MAX_BYTES:
        raise UserError(f"--bytes must be at most 1TiB (got {format_size(case.bytes)})")
    if case.bytes % element:
        raise UserError(f"--bytes {format_size(case.bytes)} is not a whole number of {element}-byte elements")


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
