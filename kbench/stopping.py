"""When to stop sampling: the adaptive stop rule, kept apart so it can be tested with a fake clock.

Sampling stops once the median is known well enough (its relative standard
error under ``target_noise``) after at least ``min_samples`` and ``min_time``
seconds, or when ``max_time`` / ``max_samples`` is reached, whichever comes first.
"""

from __future__ import annotations

from dataclasses import dataclass

from kbench.stats import median_noise


@dataclass(frozen=True)
class StopRule:
    target_noise: float = 0.005  # relative standard error of the median
    min_samples: int = 10
    min_time: float = 0.2  # seconds of sampling before the noise target may stop it
    max_time: float = 5.0  # seconds: give up on the target and report the noise
    max_samples: int = 100_000

    def reason_to_stop(self, samples, elapsed: float) -> str | None:
        """``None`` to keep sampling, else why sampling stopped."""
        n = len(samples)
        if n >= self.max_samples:
            return "sample limit"
        if elapsed >= self.max_time and n >= 1:
            return "time limit"
        if n >= self.min_samples and elapsed >= self.min_time and median_noise(samples) <= self.target_noise:
            return "converged"
        return None


# CPU wall-clock timing only shows that a kernel runs (it is not GPU performance),
# and interpreted Triton kernels take ~0.5 s a call: sample less there.
CPU_DEFAULTS = {"min_samples": 5, "max_time": 2.0, "target_noise": 0.02}


def rule_for(device: str, overrides: dict) -> StopRule:
    base = CPU_DEFAULTS if device == "cpu" else {}
    return StopRule(**{**base, **overrides})
