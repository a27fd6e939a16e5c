"""A GPU worker gives its cached memory back after every job, before it answers: under --interleave the
other implementations' workers check, sample and re-check while it waits, on the same GPU."""

from __future__ import annotations

import os

from kbench import envinfo, worker


def test_a_gpu_worker_releases_its_cached_memory_after_each_job_before_answering(monkeypatch):
    events = []
    monkeypatch.setattr(worker, "pick_device", lambda requested: "cuda")
    monkeypatch.setattr(envinfo, "collect", lambda device: {"device": device, "gpu": None})
    monkeypatch.setattr(worker, "execute", lambda registry, job, device, env: {"status": "OK", "job": job["n"]})
    monkeypatch.setattr(worker, "release_cached_memory", lambda collect=False: events.append(("release", collect)))

    def send(message):
        events.append((message["type"], message.get("job")))

    worker.serve({"device": "cuda"}, send, [{"n": 1}, {"n": 2}], registry=object())
    assert events == [("hello", None), ("release", True), ("result", 1), ("release", True), ("result", 2)]


def test_a_cpu_worker_has_nothing_to_release(monkeypatch):
    released = []
    # serve sets TRITON_INTERPRET for a CPU worker: restored after this test
    monkeypatch.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "1"))
    monkeypatch.setattr(worker, "pick_device", lambda requested: "cpu")
    monkeypatch.setattr(envinfo, "collect", lambda device: {"device": device, "gpu": None})
    monkeypatch.setattr(worker, "execute", lambda registry, job, device, env: {"status": "OK"})
    monkeypatch.setattr(worker, "release_cached_memory", lambda collect=False: released.append(collect))
    worker.serve({"device": "cpu"}, lambda message: None, [{"n": 1}], registry=object())
    assert released == []


class _Sampler:
    """Records each burst's ``settle`` flag; sampling ends on the third burst."""

    def __init__(self):
        self.settles = []

    def burst(self, seconds=None, settle=False):
        self.settles.append(settle)
        return "enough samples" if len(self.settles) == 3 else None


def _measurement(device):
    measurement = worker.Measurement.__new__(worker.Measurement)  # only what burst() reads
    measurement.device, measurement.phases, measurement.released = device, {}, False
    measurement.sampler = _Sampler()
    return measurement


def test_each_interleaved_turn_gives_the_judged_calls_memory_back_and_the_next_turn_settles_first(monkeypatch):
    """Under --interleave every worker holds its case while the others sample: the float64 differences of
    the timed calls it judged must not stay cached (a large case's dozen workers would run out of
    memory), and the next turn's first timed call must not pay for allocations the release gave back."""
    released = []
    monkeypatch.setattr(worker, "release_cached_memory", lambda collect=False: released.append(collect))
    measurement = _measurement("cuda")
    assert [measurement.burst(0.05) for _ in range(3)] == [False, False, True]
    assert released == [False, False, False]  # after every turn, the last one too (the others go on)
    assert measurement.sampler.settles == [False, True, True]


def test_sampling_all_at_once_keeps_its_cache(monkeypatch):
    released = []
    monkeypatch.setattr(worker, "release_cached_memory", lambda collect=False: released.append(collect))
    measurement = _measurement("cuda")
    measurement.burst(None)
    assert released == [] and measurement.sampler.settles == [False]
