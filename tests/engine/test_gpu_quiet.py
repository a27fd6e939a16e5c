"""kbench.gpu_quiet: one lock file a run's workers share, so one worker's driver start-up never runs
beside another's samples."""

from __future__ import annotations

import subprocess
import sys
import time

from kbench import gpu_quiet

HOLDER = """
import sys, time
from kbench.gpu_quiet import quiet_gpu
with quiet_gpu(shared=sys.argv[2:] == ["shared"]):
    print("held", flush=True)
    time.sleep(float(sys.argv[1]))
"""


def test_a_second_process_waits_while_one_holds_the_lock(tmp_path, monkeypatch):
    lock = tmp_path / "gpu.lock"
    lock.touch()
    monkeypatch.setenv(gpu_quiet.ENV, str(lock))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, "0.5"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    started = time.perf_counter()
    with gpu_quiet.quiet_gpu():
        waited = time.perf_counter() - started
    holder.wait(timeout=10)
    assert waited > 0.3  # it got the lock only once the holder let go


def test_without_a_shared_file_nothing_is_locked(monkeypatch):
    monkeypatch.delenv(gpu_quiet.ENV, raising=False)
    with gpu_quiet.quiet_gpu():
        with gpu_quiet.quiet_gpu():  # nothing held, so even nesting does not wait
            pass


def test_share_names_one_file_for_the_processes_started_after_it(monkeypatch):
    monkeypatch.delenv(gpu_quiet.ENV, raising=False)
    path = gpu_quiet.share()
    assert gpu_quiet.share() == path
    out = subprocess.run([sys.executable, "-c", f"import os; print(os.environ['{gpu_quiet.ENV}'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == path



def test_shared_holders_run_together_and_one_alone_waits_for_them(tmp_path, monkeypatch):
    """Checks hold the lock shared: two at once; a timing (held alone) waits until both let go."""
    lock = tmp_path / "gpu.lock"
    lock.touch()
    monkeypatch.setenv(gpu_quiet.ENV, str(lock))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, "0.6", "shared"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    started = time.perf_counter()
    with gpu_quiet.quiet_gpu(shared=True):  # beside the other shared holder: no wait
        beside = time.perf_counter() - started
    with gpu_quiet.quiet_gpu():
        alone = time.perf_counter() - started
    holder.wait(timeout=10)
    assert beside < 0.3 and alone > 0.3
