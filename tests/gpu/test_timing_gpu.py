"""CUDA-event timing on a GPU: the stream hold before each start event makes the events time the GPU's
work even where the host is slower to queue a call than the GPU is to run it."""

from __future__ import annotations

import time

import pytest

from kbench.stopping import StopRule
from kbench.timing import Settings, TorchCuda, measure_cuda

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_cuda")]

HOST_S = 0.002  # the host side of each call: longer than the L2 flush, far longer than the copy


class Unheld(TorchCuda):
    hold = None  # the seam without a hold: the events see the host's pace


def _slow_host_copy():
    import torch

    x = torch.randn(1 << 20, device="cuda")
    y = torch.empty_like(x)

    def call():
        time.sleep(HOST_S)  # what a heavy Python launch path costs
        y.copy_(x)

    return call


def _measure(cuda) -> dict:
    rule = StopRule(target_noise=0.5, min_samples=20, min_time=0.0, max_time=5.0, max_samples=20)
    return measure_cuda(_slow_host_copy(), Settings(stop=rule, warmup_calls=3, warmup_time=0.0), cuda=cuda)


def test_held_events_time_the_gpu_not_the_host():
    held, unheld = _measure(TorchCuda()), _measure(Unheld())
    assert held["host_enqueue_ms"] >= HOST_S * 1e3
    assert any(w.startswith("host-bound") for w in held["warnings"])
    # a 4 MiB copy takes a few microseconds; the host's 2 ms must not be in it
    assert held["stats"]["median"] < 0.1 * HOST_S * 1e3, held["stats"]
    # without the hold the GPU waits for the host inside the timed region (the flush ran out long before)
    assert unheld["stats"]["median"] > 0.5 * HOST_S * 1e3, unheld["stats"]


class ZeroingFlush(TorchCuda):
    """The seam with the flush most harnesses use: the buffer zeroed before each sample."""

    def l2_flush(self):
        buffer = self.torch.empty(2 * self.l2_bytes() // 4, dtype=self.torch.int32, device="cuda")
        return buffer.zero_


def _read_of(mib: int):
    """A call that reads ``mib`` MiB once and writes one number."""
    import torch

    x = torch.randn(mib << 19, device="cuda", dtype=torch.float16)
    total = torch.empty((), device="cuda", dtype=torch.float32)
    return lambda: torch.sum(x, dim=0, dtype=torch.float32, out=total)


def _median_of(call, cuda=None, flush_l2: bool = True) -> float:
    rule = StopRule(target_noise=0.01, min_samples=50, min_time=0.0, max_time=2.0, max_samples=200)
    settings = Settings(stop=rule, warmup_calls=5, warmup_time=0.0, flush_l2=flush_l2)
    return measure_cuda(call, settings, cuda=cuda)["stats"]["median"]


def test_the_flush_evicts_an_input_the_l2_would_hold():
    half_l2_mib = TorchCuda().l2_bytes() >> 21
    read = _read_of(half_l2_mib)
    # Unflushed, the input comes from the L2 the last call left it in; flushed, from device memory. The
    # sum is slow enough even from the L2 that the gap is well under the bandwidths' (on an H200, 30 MiB:
    # 16.7 us flushed, 13.8 us not), and with no eviction there is none.
    assert _median_of(read) > 1.1 * _median_of(read, flush_l2=False)


def test_the_flush_leaves_no_write_back_inside_the_timed_call():
    read = _read_of(128)
    # after a zeroing flush the L2 is full of dirty lines, written back while the call reads
    assert _median_of(read) < 0.9 * _median_of(read, cuda=ZeroingFlush())
