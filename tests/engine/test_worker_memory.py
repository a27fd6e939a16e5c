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
