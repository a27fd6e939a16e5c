"""kbench run draws a small case's trials (inputs, float64 references, bounds: the harness's part of a
check) side by side in every implementation's worker, then calls each implementation in its turn,
one at a time; a large case's trials are drawn in each implementation's turn."""

from __future__ import annotations

import json
import textwrap

# A suite whose reference meets the other worker's: only references worked out at the same time meet
# (one done before the other began waits in vain and raises). Each implementation's make() holds a
# marker while it runs: one that finds another's there ran beside it, and raises.
SUITE = '''
import os
import time

from kbench.registry import suite
from kbench.suite import Axis, Suite

MARKERS = os.environ["KBENCH_TEST_MARKERS"]
_met = []


def _meet():
    open(os.path.join(MARKERS, f"reference-{os.getpid()}"), "w").close()
    deadline = time.monotonic() + 20
    while len([m for m in os.listdir(MARKERS) if m.startswith("reference-")]) < 2:
        if time.monotonic() > deadline:
            raise RuntimeError("no other worker worked out its references beside this one")
        time.sleep(0.01)
    _met.append(True)


@suite
class Meet(Suite):
    name = "meet"
    description = "y = 2x, with references that must be worked out side by side"
    axes = (Axis("n", int, (64,), "elements"),)
    baseline = "one"
    tolerances = {"fp32": (0.0, 1e-6)}

    def make_inputs(self, case, seed, device):
        import torch

        return {"x": torch.rand(case.n, generator=torch.Generator().manual_seed(seed)).to(device)}

    def make_output(self, case, inputs):
        import torch

        return torch.empty_like(inputs["x"])

    def reference(self, case, inputs):
        import torch

        if case.n < 1 << 20 and not _met:  # a small case: drawn ahead, beside the other worker's
            _meet()
        return 2 * inputs["x"].to(torch.float64)

    def flops(self, case):
        return float(case.n)

    def min_bytes(self, case):
        return 8.0 * case.n
'''

KERNELS = '''
import os
import time

from kbench.registry import implementation

MARKERS = os.environ["KBENCH_TEST_MARKERS"]


def _alone():
    calling = os.path.join(MARKERS, "calling")
    try:
        os.close(os.open(calling, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        raise RuntimeError("called while another implementation was being called") from None
    time.sleep(0.2)
    os.unlink(calling)


def _double(inputs, out):
    _alone()

    def run():
        out.copy_(inputs["x"] * 2)

    return run


@implementation("meet", "one", backend="torch")
def one(case, inputs, out):
    return _double(inputs, out)


@implementation("meet", "two", backend="torch")
def two(case, inputs, out):
    return _double(inputs, out)
'''


def _run(kbench_proc, proc_env, tmp_path, n: int):
    (tmp_path / "suites" / "meet").mkdir(parents=True)
    (tmp_path / "suites" / "meet" / "suite.py").write_text(textwrap.dedent(SUITE))
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "meet.py").write_text(textwrap.dedent(KERNELS))
    markers = tmp_path / "markers"
    markers.mkdir()
    out = tmp_path / "meet.jsonl"
    env = proc_env(KBENCH_SUITES=str(tmp_path / "suites"), KBENCH_KERNELS=str(tmp_path / "kernels"),
                   KBENCH_TEST_MARKERS=str(markers))
    done = kbench_proc("run", "meet", "--n", n, "--max-time", "0.1", "--device", "cpu", "--out", out, env=env)
    return done, [json.loads(line) for line in out.read_text().splitlines()]


def test_a_small_cases_trials_are_drawn_side_by_side_and_its_kernels_called_one_at_a_time(
        kbench_proc, proc_env, tmp_path):
    done, records = _run(kbench_proc, proc_env, tmp_path, 64)
    assert done.returncode == 0, done.stderr
    assert [(r["impl"], r["status"]) for r in records] == [("one", "OK"), ("two", "OK")], records
    assert all(r["harness"]["trials_s"] > 0 for r in records)  # the time it took, kept apart from the check


def test_a_large_cases_trials_are_drawn_in_each_implementations_turn(kbench_proc, proc_env, tmp_path):
    done, records = _run(kbench_proc, proc_env, tmp_path, 1 << 22)  # 32 MiB: over SIDE_BY_SIDE_BYTES
    assert done.returncode == 0, done.stderr
    assert [(r["impl"], r["status"]) for r in records] == [("one", "OK"), ("two", "OK")], records
    assert all("trials_s" not in r["harness"] for r in records)
