"""Which elements of A, B and D each lane of a warp holds for mma.sync.m16n8k16 (16-bit A/B, fp32 D).

From the PTX ISA's fragment layouts, as the FlashAttention walkthrough lays them out:
groupID = lane / 4, threadInGroup = lane % 4; D rows groupID and groupID + 8,
columns 2·threadInGroup and +1 (lane 0: (0,0) (0,1) (8,0) (8,1)).
"""

from __future__ import annotations


def a_elements(lane: int) -> list[tuple[int, int]]:
    """A (16 x 16, row-major): 8 values in 4 registers of 2, each pair along a row."""
    g, t = divmod(lane, 4)
    return [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1),
            (g, 2 * t + 8), (g, 2 * t + 9), (g + 8, 2 * t + 8), (g + 8, 2 * t + 9)]


def b_elements(lane: int) -> list[tuple[int, int]]:
    """B (16 x 8, "col"): 4 values in 2 registers of 2, each pair down a column."""
    g, t = divmod(lane, 4)
    return [(2 * t, g), (2 * t + 1, g), (2 * t + 8, g), (2 * t + 9, g)]


def d_elements(lane: int) -> list[tuple[int, int]]:
    """D (16 x 8, fp32): 4 values, rows groupID and groupID + 8."""
    g, t = divmod(lane, 4)
    return [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)]
