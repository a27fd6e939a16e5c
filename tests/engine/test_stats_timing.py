"""Statistics, the stop rule and CPU timing driven by a fake clock (no sleeps, deterministic)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kbench.timing
from kbench.stats import (IQR_TO_SIGMA, MEDIAN_SE_FACTOR, binomial_half_ppf, median_interval, median_noise, ratio_interval,
                          speedup_interval, summarize)
from kbench.stopping import CPU_DEFAULTS, StopRule, rule_for
from kbench.timing import CpuSampler, Settings, _batch_size, measure_cpu

# --- stats -----------------------------------------------------------------

def test_summarize_known_data():
    s = summarize([5, 1, 4, 2, 3])
    assert s["n"] == 5
    assert s["median"] == 3.0
    assert s["q25"] == 2.0 and s["q75"] == 4.0
    assert s["p20"] == pytest.approx(1.8) and s["p80"] == pytest.approx(4.2)
    assert s["min"] == 1.0 and s["max"] == 5.0
    assert s["mean"] == 3.0
    assert s["std"] == pytest.approx(math.sqrt(2.5))
    assert s["median_noise"] == pytest.approx(MEDIAN_SE_FACTOR * (2 / IQR_TO_SIGMA) / math.sqrt(5) / 3)


def test_summarize_single_and_empty():
    s = summarize([7.5])
    assert s["n"] == 1 and s["median"] == s["min"] == s["max"] == 7.5
    assert s["std"] == 0.0
    assert s["median_noise"] is None  # unknown from one sample (and JSON has no Infinity)
    with pytest.raises(ValueError, match="no samples"):
        summarize([])


def test_median_noise_known_values():
    assert median_noise([]) == math.inf
    assert median_noise([1.0]) == math.inf
    assert median_noise([2.0] * 10) == 0.0
    assert median_noise([0.0, 0.0, 0.0]) == math.inf  # a zero median has no relative noise
    # IQR of 1..100 is 49.5, median 50.5
    x = np.arange(1, 101, dtype=float)
    expected = math.sqrt(math.pi / 2) * (49.5 / 1.349) / math.sqrt(100) / 50.5
    assert median_noise(x) == pytest.approx(expected)
    # four times the samples of the same distribution halve the noise
    assert median_noise(np.tile([1.0, 2.0, 3.0, 4.0], 40)) == pytest.approx(
        median_noise(np.tile([1.0, 2.0, 3.0, 4.0], 10)) / 2, rel=0.05)


def test_median_noise_ignores_one_outlier():
    base = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.01, 0.99, 1.0]
    assert median_noise(base + [1000.0]) < 0.01


def test_speedup_interval_brackets_the_ratio_of_medians():
    rng = np.random.default_rng(0)
    base = 2.0 * (1 + 0.02 * rng.standard_normal(400))
    fast = 1.0 * (1 + 0.02 * rng.standard_normal(400))
    ratio = float(np.median(base) / np.median(fast))
    low, high = speedup_interval(base, fast)
    assert low < ratio < high and high - low < 0.02 * ratio
    # the interval of median(baseline) / median(row) is ratio_interval's, the other way round
    assert (low, high) == ratio_interval(fast, base, 0.05)
    few_low, few_high = speedup_interval(base[:30], fast[:30])
    assert few_high - few_low > high - low  # fewer samples: known less well
    surer_low, surer_high = speedup_interval(base, fast, confidence=0.99)
    assert surer_low <= low and surer_high >= high
    assert speedup_interval([1.0, 1.1], [0.5, 0.6]) == (0.0, math.inf)  # too few samples to say anything


def test_speedup_interval_covers_the_true_ratio_at_least_95_percent_of_the_time():
    """Distribution-free: skewed (lognormal) timings, 25 samples a side; the true ratio of medians is 3."""
    rng = np.random.default_rng(7)
    covered = 0
    for _ in range(400):
        base = 3.0 * rng.lognormal(0.0, 0.3, 25)
        row = rng.lognormal(0.0, 0.3, 25)
        low, high = speedup_interval(base, row)
        covered += low <= 3.0 <= high
    assert covered >= 0.95 * 400


# Not a dyadic q such as 0.5, which some P(Binomial(n, 1/2) <= k) equals exactly: there the two round
# apart (the intervals' quantiles, alpha/2 and alpha/4, are never dyadic).
@pytest.mark.parametrize("q", [0.00125, 0.005, 0.0125, 0.025, 0.05, 0.3])
def test_binomial_half_ppf_is_scipys_binom_ppf(q):
    from scipy.stats import binom

    for n in [*range(1, 120), 1000, 11076]:
        assert binomial_half_ppf(q, n) == int(binom.ppf(q, n, 0.5)), (q, n)


def test_compare_reexports_the_intervals():
    from kbench import compare

    assert compare.median_interval is median_interval and compare.ratio_interval is ratio_interval


# --- stop rule ---------------------------------------------------------------

QUIET = [1.0] * 50  # no noise at all
NOISY = [1.0, 3.0] * 25  # median known to ~20 %


def test_stop_rule_defaults():
    rule = StopRule()
    assert (rule.target_noise, rule.min_samples, rule.min_time, rule.max_time) == (0.005, 10, 0.2, 5.0)


def test_converges_once_minimums_are_met():
    rule = StopRule(target_noise=0.01, min_samples=10, min_time=0.2, max_time=5.0)
    assert rule.reason_to_stop(QUIET[:10], elapsed=0.2) == "converged"
    assert rule.reason_to_stop(QUIET[:30], elapsed=1.0) == "converged"


def test_keeps_going_before_min_samples():
    rule = StopRule(target_noise=0.01, min_samples=10, min_time=0.2, max_time=5.0)
    assert rule.reason_to_stop(QUIET[:9], elapsed=1.0) is None


def test_keeps_going_before_min_time():
    rule = StopRule(target_noise=0.01, min_samples=10, min_time=0.2, max_time=5.0)
    assert rule.reason_to_stop(QUIET[:40], elapsed=0.199) is None


def test_keeps_going_while_noisy():
    rule = StopRule(target_noise=0.01, min_samples=10, min_time=0.2, max_time=5.0)
    assert median_noise(NOISY) > 0.01
    assert rule.reason_to_stop(NOISY, elapsed=4.99) is None


def test_stops_at_time_limit():
    rule = StopRule(target_noise=0.01, min_samples=10, min_time=0.2, max_time=5.0)
    assert rule.reason_to_stop(NOISY, elapsed=5.0) == "time limit"
    assert rule.reason_to_stop([1.0], elapsed=7.0) == "time limit"  # even under min_samples
    assert rule.reason_to_stop([], elapsed=7.0) is None  # but never without a sample


def test_stops_at_sample_limit():
    rule = StopRule(target_noise=0.0001, min_samples=10, min_time=0.2, max_time=5.0, max_samples=20)
    assert rule.reason_to_stop(NOISY[:19], elapsed=0.5) is None
    assert rule.reason_to_stop(NOISY[:20], elapsed=0.5) == "sample limit"
    assert rule.reason_to_stop(NOISY[:20], elapsed=9.0) == "sample limit"  # checked first


def test_rule_for_device():
    assert rule_for("cuda", {}) == StopRule()
    cpu = rule_for("cpu", {})
    assert cpu.min_samples == CPU_DEFAULTS["min_samples"]
    assert cpu.max_time == CPU_DEFAULTS["max_time"]
    assert cpu.target_noise == CPU_DEFAULTS["target_noise"]
    override = rule_for("cpu", {"max_time": 0.3, "min_time": 0.0})
    assert override.max_time == 0.3 and override.min_time == 0.0
    assert override.min_samples == CPU_DEFAULTS["min_samples"]


# --- timing with a fake clock ----------------------------------------------------

STEP = 1 / 64  # exact in binary: elapsed times compare without rounding surprises


class FakeClock:
    """perf_counter replacement: each reading returns the current time, then advances it by STEP."""

    def __init__(self):
        self.now = 1000.0
        self.readings = 0

    def __call__(self) -> float:
        value = self.now
        self.now += STEP
        self.readings += 1
        return value


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(kbench.timing.time, "perf_counter", fake)
    return fake


def counting_fn():
    calls = []

    def fn():
        calls.append(1)

    return fn, calls


def test_measure_cpu_converges_deterministically(clock):
    # Warm-up: 3 calls, then calls until 0.05 s have passed: readings at 1, 2, 3, 4 STEPs -> 6 calls.
    # Sampling: three readings per sample, so after i samples elapsed = 3 i STEP; every sample is
    # exactly STEP (no noise). min_time 0.25 needs 3 i / 64 >= 0.25 -> i = 6 (>= min_samples 5).
    fn, calls = counting_fn()
    rule = StopRule(target_noise=0.01, min_samples=5, min_time=0.25, max_time=10.0)
    result = measure_cpu(fn, Settings(stop=rule, warmup_time=0.05, warmup_calls=3))
    assert result["stop_reason"] == "converged"
    assert result["stats"]["n"] == 6
    assert result["samples"] == [STEP * 1e3] * 6
    assert result["stats"]["median"] == STEP * 1e3
    assert result["stats"]["median_noise"] == 0.0
    assert result["method"] == "cpu-wall-clock" and result["unit"] == "ms"
    assert result["warnings"] == []
    assert len(calls) == 6 + 6


def test_measure_cpu_min_samples_dominates(clock):
    # min_time is reached after 6 samples, but min_samples asks for 9.
    fn, calls = counting_fn()
    rule = StopRule(target_noise=0.01, min_samples=9, min_time=0.25, max_time=10.0)
    result = measure_cpu(fn, Settings(stop=rule, warmup_time=0.05, warmup_calls=3))
    assert result["stop_reason"] == "converged"
    assert result["stats"]["n"] == 9


def test_measure_cpu_time_limit(clock):
    # Never converges (min_samples out of reach): stops when 3 i / 64 >= 1.0 -> i = 22.
    fn, _ = counting_fn()
    rule = StopRule(target_noise=0.01, min_samples=1000, min_time=0.0, max_time=1.0)
    result = measure_cpu(fn, Settings(stop=rule, warmup_time=0.0, warmup_calls=1))
    assert result["stop_reason"] == "time limit"
    assert result["stats"]["n"] == 22
    assert result["warnings"] == ["only 22 samples (time limit)"]


def test_measure_cpu_sample_limit(clock):
    fn, _ = counting_fn()
    rule = StopRule(target_noise=0.01, min_samples=10, min_time=0.0, max_time=100.0, max_samples=4)
    result = measure_cpu(fn, Settings(stop=rule, warmup_time=0.0, warmup_calls=1))
    assert result["stop_reason"] == "sample limit"
    assert result["stats"]["n"] == 4
    assert result["warnings"] == ["only 4 samples (sample limit)"]


def test_measure_cpu_noisy_runs_to_time_limit_and_warns(clock):
    # The closure itself takes 0 or 2 extra STEPs, alternately: samples STEP and 3 STEP.
    flip = []

    def fn():
        flip.append(1)
        if len(flip) % 2:
            clock.now += 2 * STEP

    rule = StopRule(target_noise=0.01, min_samples=5, min_time=0.0, max_time=2.0)
    result = measure_cpu(fn, Settings(stop=rule, warmup_time=0.0, warmup_calls=1))
    assert result["stop_reason"] == "time limit"
    assert sorted(set(result["samples"])) == [STEP * 1e3, 3 * STEP * 1e3]
    assert any(w.startswith("noisy: median known to ±") for w in result["warnings"])


def test_warm_up_is_not_sampled(clock):
    """Warm-up calls must not appear among the samples: the first samples are as fast as the rest."""
    calls = []

    def fn():
        calls.append(1)
        if len(calls) <= 3:  # a slow first call (JIT, autotune) during warm-up
            clock.now += 100.0

    rule = StopRule(target_noise=0.01, min_samples=5, min_time=0.0, max_time=10.0)
    result = measure_cpu(fn, Settings(stop=rule, warmup_time=0.0, warmup_calls=3))
    assert max(result["samples"]) == STEP * 1e3
    assert result["stop_reason"] == "converged"


def test_cpu_sampler_in_bursts_takes_the_samples_of_one_go(clock, monkeypatch):
    """kbench run --interleave samples a burst at a time: the stop rule's clock is the sampling time of
    every burst together, so the samples are those one measure_cpu call takes."""
    rule = StopRule(target_noise=0.01, min_samples=1000, min_time=0.0, max_time=1.0)
    settings = Settings(stop=rule, warmup_time=0.0, warmup_calls=1)
    whole = measure_cpu(counting_fn()[0], settings)

    fake = FakeClock()
    monkeypatch.setattr(kbench.timing.time, "perf_counter", fake)
    fn, calls = counting_fn()
    sampler = CpuSampler(fn, settings)
    per_burst = []
    for _ in range(100):  # a bounded number of turns: sampling must end
        before = len(sampler.samples)
        reason = sampler.burst(0.1)
        per_burst.append(len(sampler.samples) - before)
        if reason is not None:
            break
    assert reason == "time limit" and len(per_burst) > 3
    assert all(n * 3 * STEP >= 0.1 for n in per_burst[:-1])  # each burst runs its seconds of sampling
    result = sampler.result()
    assert result["samples"] == whole["samples"] and result["stop_reason"] == whole["stop_reason"]
    assert sampler.burst(0.1) == "time limit" and len(sampler.samples) == len(result["samples"])  # over


def test_batch_size():
    assert _batch_size(1e-3) == 20
    assert _batch_size(1.0) == 1
    assert _batch_size(0.0) == 200
    assert _batch_size(1e-9) == 200
