"""Launch-bound cases timed as graph replays by default, through kbench run on a GPU: at N=256 each
attention kernel takes about 10 us and the events time mostly the launch path, so every row gets a
graph-replay median with its eager time beside it; a large case stays eager; --no-auto-graph keeps
the eager time with the launch-bound warning. cupy-fa2 is among them because a CuPy kernel is captured
only if it is launched on torch's current stream: one launched elsewhere would break the capture (a
graph_error) or leave the replay empty (its checked timed calls would find the output poisoned)."""

from __future__ import annotations

import pytest

from kbench.timing import LAUNCH_BOUND_MS

# kbench run starts workers that compile the Triton kernels (compiled_triton: no interpreter for them).
pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_cuda", "compiled_triton")]

IMPLS = ("sdpa", "triton-fa2", "cupy-fa2")


def _run(cli, jsonl, out, *case):
    result = cli("run", "attention", *case, "--impl", ",".join(IMPLS), "--baseline", "sdpa", "--device", "cuda",
                 "--max-time", "1", "--out", out)
    records = {r["impl"]: r for r in jsonl(out)}
    assert result.exit_code == 0 and set(records) == set(IMPLS), result.output
    assert all(r["status"] == "OK" for r in records.values()), result.output
    return result, records


def test_launch_bound_rows_have_a_graph_replay_median_with_the_eager_time_beside(cli, jsonl, tmp_path,
                                                                                 wide_console, flat_text):
    result, records = _run(cli, jsonl, tmp_path / "small.jsonl", "--n", "256", "--d", "128")
    for impl, record in records.items():
        timing = record["timing"]
        assert timing["method"].startswith("cuda-graph-replay"), (impl, timing["method"], timing["warnings"])
        eager = timing["eager"]
        assert eager["method"].startswith("cuda-events"), (impl, eager["method"])
        assert 0 < eager["stats"]["median"] < LAUNCH_BOUND_MS, (impl, eager["stats"])
        assert timing["stats"]["median"] > 0 and timing["checked_calls"]["checked"] > 0, (impl, timing)
        assert "graph_error" not in timing
    assert all("speedup_basis" not in records[impl] for impl in IMPLS[1:])  # graph replay against graph replay
    text = flat_text(result.output)
    assert f"median: graph replay for {', '.join(IMPLS)} (launch-bound under 20 us eager)" in text, text


def test_a_large_case_stays_eager(cli, jsonl, tmp_path):
    _, records = _run(cli, jsonl, tmp_path / "large.jsonl", "--n", "4096", "--d", "128", "--batch", "2", "--heads", "16")
    for impl, record in records.items():
        timing = record["timing"]
        assert timing["method"].startswith("cuda-events") and "eager" not in timing, (impl, timing["method"])
        assert timing["stats"]["median"] >= LAUNCH_BOUND_MS, (impl, timing["stats"])


def test_no_auto_graph_keeps_the_eager_time(cli, jsonl, tmp_path):
    out = tmp_path / "off.jsonl"
    result = cli("run", "attention", "--n", "256", "--d", "128", "--impl", "sdpa", "--baseline", "sdpa",
                 "--device", "cuda", "--max-time", "1", "--no-auto-graph", "--out", out)
    assert result.exit_code == 0, result.output
    (record,) = jsonl(out)
    assert record["timing"]["method"].startswith("cuda-events") and "eager" not in record["timing"]
    assert any(w.startswith("launch-bound") for w in record["timing"]["warnings"]), record["timing"]["warnings"]
