"""Statistics of timing samples: robust centre, spread and the noise of the median."""

from __future__ import annotations

import math

# IQR / 1.349 estimates the standard deviation of a normal distribution, without
# being dragged by the long right tail that timing samples have.
IQR_TO_SIGMA = 1.349
# The standard error of a sample median is sqrt(pi/2)·sigma/sqrt(n) for normal data.
MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)


def median_noise(samples) -> float:
    """Relative standard error of the median (0.01 = the median is known to about 1 %)."""
    import numpy as np  # here, not at the top: `kbench --help` imports this module through the CLI

    x = np.asarray(samples, dtype=float)
    if x.size < 2:
        return math.inf
    q25, q50, q75 = np.percentile(x, [25, 50, 75])
    if q50 <= 0:
        return math.inf
    sigma = (q75 - q25) / IQR_TO_SIGMA
    return MEDIAN_SE_FACTOR * sigma / math.sqrt(x.size) / q50


def summarize(samples) -> dict:
    """Median, p20/p80, quartiles, extremes and the noise of the median, in the samples' unit."""
    import numpy as np

    x = np.asarray(samples, dtype=float)
    if x.size == 0:
        raise ValueError("no samples")
    p20, q25, median, q75, p80 = np.percentile(x, [20, 25, 50, 75, 80])
    return {
        "n": int(x.size),
        "median": float(median),
        "p20": float(p20),
        "p80": float(p80),
        "q25": float(q25),
        "q75": float(q75),
        "min": float(x.min()),
        "max": float(x.max()),
        "mean": float(x.mean()),
        "std": float(x.std(ddof=1)) if x.size > 1 else 0.0,
        "median_noise": median_noise(x) if x.size > 1 else None,  # unknown from one sample
    }


def median_interval(samples, alpha: float) -> tuple[float, float]:
    """Distribution-free interval for the median at confidence >= 1 - alpha, from order statistics:
    [x(j), x(n-j+1)] where P(Binomial(n, 1/2) < j) <= alpha/2. (0, inf) when n is too small."""
    import numpy as np

    x = np.sort(np.asarray(samples, dtype=float))
    n = x.size
    if n == 0:
        return 0.0, math.inf
    j = binomial_half_ppf(alpha / 2, n)  # cdf(j - 1) < alpha/2
    if j < 1:
        return 0.0, math.inf
    return float(x[j - 1]), float(x[n - j])


def binomial_half_ppf(q: float, n: int) -> int:
    """The smallest k with P(Binomial(n, 1/2) <= k) >= q: scipy.stats.binom.ppf(q, n, 0.5), found by
    bisection on scipy.special.bdtr, whose import takes a fraction of scipy.stats' (about 1 s on a
    small machine, paid by every kbench run that writes a speedup interval)."""
    from scipy.special import bdtr

    low, high = 0, n
    while low < high:
        mid = (low + high) // 2
        if bdtr(mid, n, 0.5) >= q:
            high = mid
        else:
            low = mid + 1
    return low


def ratio_interval(base, current, alpha: float) -> tuple[float, float]:
    """Interval for median(current) / median(base) at confidence >= 1 - alpha (each median at 1 - alpha/2)."""
    base_lo, base_hi = median_interval(base, alpha / 2)
    cur_lo, cur_hi = median_interval(current, alpha / 2)
    low = cur_lo / base_hi if base_hi > 0 and math.isfinite(base_hi) else 0.0
    high = cur_hi / base_lo if base_lo > 0 else math.inf
    return low, high


SPEEDUP_CONFIDENCE = 0.95


def speedup_interval(baseline_samples, samples, confidence: float = SPEEDUP_CONFIDENCE) -> tuple[float, float]:
    """Distribution-free interval of median(baseline) / median(samples) at ``confidence`` or more."""
    low, high = ratio_interval(samples, baseline_samples, 1 - confidence)
    return low, high
