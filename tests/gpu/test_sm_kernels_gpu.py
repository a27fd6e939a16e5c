"""The harness's own PTX kernels (kbench/sm_kernels.py) on a GPU: the device hold fills every SM and
lasts as long as asked, and the clock stamps give a plausible SM clock."""

from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_cuda")]


def test_the_hold_keeps_a_probe_off_every_sm_for_its_duration():
    import torch

    from kbench.timing import SPIN_MAX_REGISTERS, TorchCuda

    cuda = TorchCuda()
    torch.cuda.synchronize()
    started = time.perf_counter()
    still_held = cuda.hold_device(0.005)
    time.sleep(0.002)
    assert still_held(), "a kernel on another stream ran during the hold"
    torch.cuda.synchronize()
    assert time.perf_counter() - started >= 0.004
    assert not still_held()  # the probe ran once the hold ended
    assert cuda.hold_note == ""
    from kbench.sm_kernels import kernels

    assert kernels().registers(kernels().spin_fn) <= SPIN_MAX_REGISTERS


def test_stamps_around_a_sleep_give_the_sm_clock():
    import torch

    from kbench.clocks import SampleClocks

    clocks = SampleClocks.create(4)
    assert clocks is not None
    for slot in range(4):
        clocks.stamp(2 * slot)
        torch.cuda._sleep(200_000)
        clocks.stamp(2 * slot + 1)
    torch.cuda.synchronize()
    mhz = clocks.mhz(4)
    assert all(100 < m < 3000 for m in mhz), mhz
