"""The multi-GPU suites on two GPUs, through `kbench run` (each implementation in its own worker, the ranks
started by kbench): nccl, nccl-ring and ring give every rank the exact sum at odd sizes and in bf16,
and over a size sweep with their bus bandwidths recorded and plotted; ring at each pipelining depth;
the p2p copy and its bandwidth matrix. (Refusing --bytes that are not whole elements, and the ring over
gloo processes, are tested on the CPU: tests/suites/test_allreduce.py.)"""

from __future__ import annotations

import pytest

from kbench import results

# kbench run starts workers that compile the Triton kernels (compiled_triton: no interpreter for them).
pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_two_gpus", "compiled_triton")]

IMPLS = ("nccl", "nccl-ring", "ring")


def _run(cli, out, *args) -> tuple[object, list[dict]]:
    result = cli("run", *args, "--device", "cuda", "--timeout", "180", "--out", out)
    return result, [r.to_json() for r in results.read(out)] if out.exists() else []


def _not_ok(records: list[dict]) -> list[str]:
    return [f"{r.get('label', r['impl'])} {r['case_key']}: {r['status']} {r.get('reason', '')}"
            for r in records if r["status"] != "OK"]


def test_every_rank_gets_the_exact_sum_at_odd_sizes(cli, tmp_path):
    """12 bytes (3 fp32 elements: fewer than the ranks' chunks, not divisible by 2), 4100 bytes,
    1000004 bytes (250001 elements), and 6 bytes of bf16: kbench fails a row unless every rank's
    result is the exact sum."""
    out = tmp_path / "odd.jsonl"
    first, _ = _run(cli, out, "allreduce", "--gpus", "2", "--bytes", "12,4100,1000004", "--max-time", "0.3")
    second, records = _run(cli, out, "allreduce", "--gpus", "2", "--bytes", "6", "--dtype", "bf16",
                           "--max-time", "0.3")
    assert not _not_ok(records), "\n".join(_not_ok(records)) + f"\n{first.output}\n{second.output}"
    assert sorted((r["impl"], r["case"]["bytes"]) for r in records) == sorted(
        (impl, size) for impl in IMPLS for size in (12, 4100, 1000004, 6)), "a row is missing"
    assert all(r["correctness"]["max_abs_err"] == 0.0 for r in records)
    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output


def test_bus_bandwidth_over_a_size_sweep_is_recorded_and_plotted(cli, tmp_path):
    """nccl-tests' figures for each row: busbw = algbw x 2(N-1)/N, for the op alone (back to back) and
    for kbench's median of the closure; then `kbench plot --metric busbw`."""
    out = tmp_path / "sweep.jsonl"
    result, records = _run(cli, out, "allreduce", "--gpus", "2", "--bytes", "1MiB,64MiB", "--max-time", "0.5")
    assert result.exit_code == 0 and not _not_ok(records), "\n".join(_not_ok(records)) + "\n" + result.output
    assert len(records) == 2 * len(IMPLS)
    for r in records:
        f = r["figures"]
        world = f["world_size"]
        assert world == 2 and f["alone_algbw_gbps"] > 0 and f["algbw_gbps"] > 0, f
        assert f["alone_busbw_gbps"] == pytest.approx(f["alone_algbw_gbps"] * 2 * (world - 1) / world)
        assert f["busbw_gbps"] == pytest.approx(f["algbw_gbps"] * 2 * (world - 1) / world)
    plot = cli("plot", out, "--metric", "busbw", "--out", tmp_path / "busbw.png")
    assert plot.exit_code == 0, plot.output
    assert (tmp_path / "busbw.png").stat().st_size > 0


def test_ring_is_exact_at_every_pipelining_depth(cli, tmp_path):
    """ring with --param pieces=1,2,4,8: each chunk sent in pieces, the steps software-pipelined."""
    out = tmp_path / "pieces.jsonl"
    result, records = _run(cli, out, "allreduce", "--gpus", "2", "--bytes", "1000004,64MiB", "--impl", "ring",
                           "--baseline", "ring", "--param", "pieces=1,2,4,8", "--max-time", "0.3")
    assert result.exit_code == 0 and not _not_ok(records), "\n".join(_not_ok(records)) + "\n" + result.output
    assert len(records) == 2 * 4, [r.get("label") for r in records]


def test_p2p_copy_is_exact_and_measures_every_pair(cli, tmp_path):
    import torch

    out = tmp_path / "p2p.jsonl"
    result, records = _run(cli, out, "p2p", "--bytes", "64MiB", "--max-time", "0.3")
    assert result.exit_code == 0 and not _not_ok(records), "\n".join(_not_ok(records)) + "\n" + result.output
    (record,) = records
    gpus = torch.cuda.device_count()
    matrix = record["figures"]["matrix_gbps"]
    assert len(matrix) == gpus and all(len(row) == gpus for row in matrix), matrix
    assert all(gbps > 0 for row in matrix for gbps in row), matrix
    assert record["figures"]["summary"][1].split()[1:] == [f"GPU{j}" for j in range(gpus)]
