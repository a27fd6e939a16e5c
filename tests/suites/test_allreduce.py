"""The multi-GPU suites on the CPU: the ring all-reduce through its implementation with 2 and 3 gloo
processes (exact sums, every rank checked), nccl-tests' bandwidth formulas, starting the ranks, a rank
that dies or fails (a clear error naming it, nothing left running, nothing hangs), the p2p suite's
SKIP, bad --gpus / --bytes, and the busbw plot."""

from __future__ import annotations

import faulthandler
import gc
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from kbench.correctness import check, recheck
from kbench.loader import BUILTIN_SUITES, load_helper
from kbench.registry import Implementation, Needs, Unsupported
from kbench.suite import Case

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILDERS = Path(__file__).resolve().parents[1] / "fixtures" / "allreduce" / "builders.py"
busbw = load_helper(BUILTIN_SUITES / "_common" / "bandwidth.py")
distributed = load_helper(BUILTIN_SUITES / "allreduce" / "rank_group.py")
exact_sums = load_helper(BUILTIN_SUITES / "_common" / "exact_sums.py")


@pytest.fixture(autouse=True)
def no_hang(monkeypatch, tmp_path):
    """Short distributed timeouts, and a last resort: a test stuck past 150 s ends the test run with the
    stacks printed rather than hanging CI. (The ranks' logs, kept after a failure, go to tmp_path.)"""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv(distributed.TIMEOUT_ENV, "30")
    monkeypatch.setattr(distributed, "REPLY_TIMEOUT", 60.0)
    faulthandler.dump_traceback_later(150, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module", autouse=True)
def close_ranks_at_the_end():
    yield
    distributed.close_rank_group()


@pytest.fixture(scope="module")
def allreduce(registry):
    return registry.suite("allreduce")


def case(nbytes, gpus, dtype="fp32"):
    return Case({"bytes": nbytes, "gpus": gpus, "dtype": dtype})


def builders():
    return load_helper(BUILDERS)


def fake(make, name="fake"):
    return Implementation("allreduce", name, "torch.distributed", make, Needs(), "", str(BUILDERS))


def using(build, **params):
    def make(case, inputs, out):
        return distributed.collective(case, inputs, out, build, params=params)

    return make


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def gone_within(pids, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


# --- nccl-tests' figures ------------------------------------------------------------------------

def test_bus_bandwidth_is_algbw_times_2_n_minus_1_over_n():
    assert busbw.bus_factor(2) == 1.0
    assert busbw.bus_factor(4) == 1.5
    assert busbw.bus_factor(8) == 1.75
    gib = 2**30
    assert busbw.algbw_gbps(gib, 10.0) == pytest.approx(107.374182, rel=1e-6)  # 2^30 B in 10 ms
    assert busbw.busbw_gbps(gib, 10.0, 4) == pytest.approx(107.374182 * 1.5, rel=1e-6)
    assert busbw.busbw_gbps(gib, 10.0, 2) == busbw.algbw_gbps(gib, 10.0)
    with pytest.raises(ValueError):
        busbw.bus_factor(0)


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_inputs_are_exactly_summable_in_any_order(dtype):
    import torch

    from kbench.dtypes import torch_dtype

    for world in (2, 3, 8, 64):
        a = exact_sums.amplitude(dtype, world)
        assert a * world <= 2 ** exact_sums.SIGNIFICAND_BITS[dtype]  # every partial sum is exact
        xs = [exact_sums.rank_values(5000, 7, r, world, dtype) for r in range(world)]
        assert all(int(x.abs().max()) <= a for x in xs)
        forward, backward = torch.zeros(5000, dtype=torch_dtype(dtype)), torch.zeros(5000, dtype=torch_dtype(dtype))
        for x in xs:
            forward += x
        for x in reversed(xs):
            backward += x
        exact = exact_sums.exact_sum(5000, 7, world, dtype)
        assert torch.equal(forward.double(), exact) and torch.equal(backward.double(), exact)
    x0 = exact_sums.rank_values(5000, 7, 0, 2, dtype)
    assert not torch.equal(x0, exact_sums.rank_values(5000, 7, 1, 2, dtype))  # ranks differ
    assert not torch.equal(x0, exact_sums.rank_values(5000, 8, 0, 2, dtype))  # seeds differ
    assert x0.float().std() > 5


def test_inputs_do_not_depend_on_the_block_size(monkeypatch):
    import torch

    whole = exact_sums.rank_values(1000, 3, 1, 3, "fp32")
    monkeypatch.setattr(exact_sums, "BLOCK", 64)
    assert torch.equal(exact_sums.rank_values(1000, 3, 1, 3, "fp32"), whole)
    out = exact_sums.exact_sum(1000, 3, 3, "fp32")
    assert exact_sums.mismatch(out.float(), 3, 3, "fp32") == ""
    out[777] += 1
    assert exact_sums.mismatch(out.float(), 3, 3, "fp32").startswith("1 of 1000 elements differ")


def test_ring_schedule_sums_every_chunk_once(registry):
    """The ring's steps, simulated: after reduce-scatter and all-gather every rank holds every chunk's sum."""
    ring = sys.modules[registry.implementations("allreduce")["ring"].make.__module__]
    for world in range(2, 7):
        held = [[{r} for _ in range(world)] for r in range(world)]  # held[r][c]: whose inputs rank r summed
        for step in range(2 * (world - 1)):
            sent = {r: ring.schedule(r, world)[step] for r in range(world)}
            for r in range(world):
                phase, _, received = sent[r]
                prev = (r - 1) % world
                assert sent[prev][1] == received  # what rank r-1 sends is what rank r expects
                if phase == "reduce-scatter":
                    held[r][received] = held[r][received] | held[prev][received]
                else:
                    held[r][received] = set(held[prev][received])
        assert all(held[r][c] == set(range(world)) for r in range(world) for c in range(world)), world
    assert ring.bounds(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert ring.piece_count(2**28, 2, 4, pieces=4, min_piece=2**20) == 4
    assert ring.piece_count(1000, 2, 4, pieces=4, min_piece=2**20) == 1


# --- the ring over gloo, through its implementation -----------------------------------------------

RING_CASES = [
    # (element count, ranks, dtype, params): divisible and not, fewer elements than ranks, pieces
    (1024, 2, "fp32", {}),
    (1001, 2, "fp32", {"pieces": 3, "min_piece": 4}),
    (1001, 3, "fp32", {}),
    (2, 3, "fp32", {}),
    (999, 3, "bf16", {"pieces": 4, "min_piece": 2}),
]


@pytest.mark.parametrize("count,world,dtype,params", RING_CASES)
def test_ring_gives_the_exact_sum_on_every_rank(registry, allreduce, count, world, dtype, params):
    impl = registry.implementations("allreduce")["ring"]
    element = 2 if dtype == "bf16" else 4
    verdict = check(allreduce, impl, case(count * element, world, dtype), "cpu", seed=11, trials=2, params=params)
    assert verdict.ok, verdict.reason
    assert verdict.max_abs_err == 0.0
    fn = verdict.last[0]
    assert fn.config["world_size"] == world and fn.config["backend"] == "gloo"
    assert fn.config["NCCL_NVLS_ENABLE"] == "0"
    for _ in range(3):
        fn()  # the timed path: no reply awaited
    assert recheck(verdict, "cpu") == ""  # new seed: the followers refill their inputs and are checked again
    figures = fn.figures({"stats": {"median": 2.0}})
    nbytes = count * element
    assert figures["busbw_gbps"] == pytest.approx(nbytes / 2e-3 / 1e9 * 2 * (world - 1) / world)
    assert figures["alone_ms"] > 0 and figures["alone_calls"] >= 5
    assert len(figures["summary"]) == 2 and "busbw" in figures["summary"][0]


def test_a_wrong_result_on_another_rank_is_caught(allreduce):
    with pytest.raises(distributed.RankFailure, match=r"wrong result on rank 1: 1 of 1000 elements differ"):
        check(allreduce, fake(using(builders().wrong_on_rank1)), case(4000, 2), "cpu", seed=1, trials=1)


def test_a_wrong_result_on_rank_0_fails(allreduce):
    verdict = check(allreduce, fake(using(builders().wrong_on_rank0)), case(4000, 2), "cpu", seed=1, trials=1)
    assert not verdict.ok and "outside atol=0" in verdict.reason


def test_more_gpus_than_present_is_a_skip(allreduce, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    inputs = {"x": SimpleNamespace(device=SimpleNamespace(type="cuda")), "seed": None}
    with pytest.raises(Unsupported, match="needs 2 GPUs, found 1"):
        distributed.collective(case(4000, 2), inputs, None, builders().right)


# --- start-up, failure and shutdown -----------------------------------------------------------------

def test_a_killed_rank_is_named_and_the_rest_end(allreduce):
    inputs = allreduce.make_inputs(case(4000, 3), 0, "cpu")
    out = allreduce.make_output(case(4000, 3), inputs)
    fn = distributed.collective(case(4000, 3), inputs, out, builders().right)
    fn()
    ranks = distributed._current
    pids, port = [f.pid for f in ranks.followers], ranks.port
    os.kill(pids[1], signal.SIGKILL)
    started = time.monotonic()
    with pytest.raises(distributed.RankFailure) as failure:
        for _ in range(50):
            fn()
    assert time.monotonic() - started < 15
    message = str(failure.value)
    assert f"rank 2 (pid {pids[1]}) exited with code -9 (SIGKILL)" in message
    assert gone_within(pids, 10)
    assert ranks.closed
    del failure  # (as kbench's worker does: the traceback's frames hold the failed collective's work)
    gc.collect()
    with pytest.raises(OSError):  # the rendezvous port is closed
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    fn = distributed.collective(case(4000, 3), inputs, out, builders().right)  # a new rank group works
    fn()
    assert distributed._current is not ranks


def test_a_rank_that_raises_is_named_with_its_error(allreduce):
    inputs = allreduce.make_inputs(case(4000, 3), 0, "cpu")
    out = allreduce.make_output(case(4000, 3), inputs)
    fn = distributed.collective(case(4000, 3), inputs, out, builders().raises_on_rank1, params={"when": 3})
    pids = [f.pid for f in distributed._current.followers]
    with pytest.raises(distributed.RankFailure, match=r"rank 1 \(pid \d+\) exited with code 1: .*"
                                                      r"ValueError: rank 1 breaks on purpose"):
        for _ in range(10):
            fn()
    assert gone_within(pids, 10)


def test_a_rank_that_cannot_set_up_is_named(allreduce):
    inputs = allreduce.make_inputs(case(4000, 2), 0, "cpu")
    out = allreduce.make_output(case(4000, 2), inputs)
    with pytest.raises(distributed.RankFailure, match=r"rank 1 .*RuntimeError: rank 1 cannot set up.*while setting up"):
        distributed.collective(case(4000, 2), inputs, out, builders().setup_fails_on_rank1)


def test_closing_leaves_no_process_and_no_port():
    ranks = distributed.rank_group(2, "gloo")
    pids, port = [f.pid for f in ranks.followers], ranks.port
    assert all(alive(p) for p in pids)
    distributed.close_rank_group()
    assert not any(alive(p) for p in pids)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    assert "NCCL_NVLS_ENABLE" not in os.environ  # rank 0's environment is restored


RANK0_DIES = """
import os, signal
from kbench.loader import BUILTIN_SUITES, load_helper
distributed = load_helper(BUILTIN_SUITES / "allreduce" / "rank_group.py")
ranks = distributed.rank_group(3, "gloo")
print(" ".join(str(f.pid) for f in ranks.followers), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_followers_end_when_rank_0_dies(proc_env, tmp_path):
    proc = subprocess.run([sys.executable, "-c", RANK0_DIES], cwd=REPO_ROOT, env=proc_env(TMPDIR=str(tmp_path)),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    pids = [int(p) for p in proc.stdout.split()]
    assert len(pids) == 2
    assert gone_within(pids, 10)


# --- the command line -------------------------------------------------------------------------------

BAD = [
    (["--gpus", "1"], "--gpus must be at least 2: an all-reduce needs peers (got 1)"),
    (["--gpus", "0,2"], "--gpus must be at least 2"),
    (["--gpus", "65"], "--gpus must be at most 64"),
    (["--gpus", "two"], "--gpus: 'two' is not an integer"),
    (["--bytes", "1001"], "--bytes 1001 is not a whole number of 4-byte elements"),
    (["--bytes", "3", "--dtype", "bf16"], "--bytes 3 is not a whole number of 2-byte elements"),
    (["--bytes", "0"], "--bytes must be positive"),
    (["--bytes", "1GB/s"], "--bytes: '1GB/s' is not a size"),
    (["--dtype", "fp64"], "--dtype: unknown value 'fp64'"),
]


@pytest.mark.parametrize("args,fragment", BAD)
def test_bad_allreduce_input_is_one_line_and_exit_2(cli, flat_text, tmp_path, args, fragment):
    out = tmp_path / "never.jsonl"
    result = cli("run", "allreduce", "--impl", "ring", "--out", out, *args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.output.count("kbench: error:") == 1, result.output
    assert fragment in flat_text(result.stderr), result.stderr
    assert not out.exists()


def marked(marker: str) -> list[int]:
    """Processes whose environment holds ``marker`` (a run's ranks inherit it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "environ").read_bytes() and alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def test_run_and_plot_on_the_cpu(kbench_proc, proc_env, jsonl, tmp_path, flat_text):
    """kbench run allreduce: ring OK over 2 gloo processes with its bandwidths printed and recorded, nccl
    and nccl-ring SKIP; then kbench plot --metric busbw. And p2p SKIPs with its reason."""
    out = tmp_path / "ar.jsonl"
    marker = f"KBENCH_TEST_RUN={os.getpid()}-{time.time_ns()}"
    env = proc_env(KBENCH_TEST_RUN=marker.split("=", 1)[1], TMPDIR=str(tmp_path))
    proc = kbench_proc("run", "allreduce", "--bytes", "4KiB,8KiB", "--gpus", "2", "--out", out, "--max-time", "0.3",
                       env=env, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = {(r["impl"], r["case"]["bytes"]): r for r in jsonl(out)}
    assert {r["status"] for (impl, _), r in records.items() if impl == "ring"} == {"OK"}
    for impl in ("nccl", "nccl-ring"):
        assert records[(impl, 4096)]["status"] == "SKIP" and records[(impl, 4096)]["reason"] == "needs a CUDA device"
    ring = records[("ring", 8192)]
    assert ring["figures"]["world_size"] == 2 and ring["figures"]["busbw_gbps"] > 0
    assert ring["figures"]["busbw_gbps"] == pytest.approx(ring["metrics"]["gbps"])  # N = 2: busbw = algbw
    assert ring["correctness"]["max_abs_err"] == 0.0 and ring["min_bytes"] == 8192
    text = flat_text(proc.stdout)
    assert "ring: busbw" in text and "nccl-tests' method" in text
    assert marked(marker) == []  # no rank outlived the run

    plot = kbench_proc("plot", out, "--metric", "busbw", "--out", tmp_path / "busbw.png", timeout=120)
    assert plot.returncode == 0, plot.stderr
    assert (tmp_path / "busbw.png").stat().st_size > 0 and (tmp_path / "busbw.svg").exists()

    p2p = tmp_path / "p2p.jsonl"
    proc = kbench_proc("run", "p2p", "--bytes", "1MiB", "--out", p2p, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (record,) = jsonl(p2p)
    assert record["status"] == "SKIP" and record["reason"] == "needs a CUDA device"


def test_p2p_needs_two_gpus_and_prints_a_matrix(registry, monkeypatch):
    import torch

    copy = sys.modules[registry.implementations("p2p")["copy"].make.__module__]
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(Unsupported, match="needs 2 GPUs, found 1"):
        copy.copy(Case({"bytes": 1024}), {"x": None}, None)
    lines = copy.matrix_lines([[2000.0, 390.5], [388.25, 2001.0]], [[True, True], [False, True]])
    assert lines[1].split() == ["src\\dst", "GPU0", "GPU1"]
    assert lines[2].split() == ["GPU0", "2000.0", "390.5"]
    assert lines[3].split() == ["GPU1", "388.2*", "2001.0"]
