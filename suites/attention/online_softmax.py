"""The online softmax, step by step: the FlashAttention walkthrough's worked example, for any scores and values.

Blocks of (score, value) pairs are folded into a running max m, a running sum
l and an unnormalised output O; a new max rescales the old l and O by
alpha = exp(m_old - m_new), and O / l is taken once at the end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    block: int
    scores: tuple[float, ...]
    values: tuple[float, ...]
    m: float
    p: tuple[float, ...]  # exp(score - m) for this block
    alpha: float  # exp(m_old - m): how much the earlier blocks shrink
    l: float
    o: float  # unnormalised


def steps(scores: list[float], values: list[float], block: int) -> list[Step]:
    if len(scores) != len(values) or not scores:
        raise ValueError("scores and values must be non-empty and of the same length")
    if block < 1:
        raise ValueError("block size must be positive")
    m, l, o = -math.inf, 0.0, 0.0
    out = []
    for start in range(0, len(scores), block):
        s = scores[start:start + block]
        v = values[start:start + block]
        m_new = max(m, max(s))
        p = [math.exp(x - m_new) for x in s]
        alpha = math.exp(m - m_new) if m != -math.inf else 0.0
        l = alpha * l + sum(p)
        o = alpha * o + sum(pi * vi for pi, vi in zip(p, v))
        m = m_new
        out.append(Step(start // block + 1, tuple(s), tuple(v), m, tuple(p), alpha, l, o))
    return out


def softmax_weighted_sum(scores: list[float], values: list[float]) -> float:
    """The standard (two-pass) answer the online version must equal."""
    top = max(scores)
    weights = [math.exp(s - top) for s in scores]
    return sum(w * v for w, v in zip(weights, values)) / sum(weights)
