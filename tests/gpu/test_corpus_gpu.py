"""The corpus on a GPU (skipped without CUDA): the kernels of tests/corpus/kernels_gpu/ that only a GPU can
show (a side stream the events miss, an illegal memory access, an answer copied while the inputs' version
counters hold), and the CPU corpus again on CUDA tensors; TF32 caught in an fp32 product; an interleaved
run's clocks. The roofline's verdict on a time no GPU can reach is tested with synthetic timings in
tests/corpus/test_corpus.py: the calls on new inputs after timing catch the copy first."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbench import results

# kbench run starts workers that compile the Triton kernels (compiled_triton: no interpreter for them).
pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_cuda", "compiled_triton")]

TESTS = Path(__file__).resolve().parent.parent
CORPUS, CORPUS_GPU = TESTS / "corpus" / "kernels", TESTS / "corpus" / "kernels_gpu"

# The CPU corpus on CUDA tensors: the same reasons (one trial per input distribution, the suite's default).
BOUND = "is over what a correct fp16 kernel makes"
TIMED = "differs from the checked calls"
CPU_CHEATS = {
    "cheat-unwritten": ("FAIL", "outputs are NaN/Inf (unwritten"),
    "cheat-nan": ("FAIL", "outputs are NaN/Inf"),
    "cheat-wrong-shape": ("FAIL", "wrong shape"),
    "cheat-wrong-dtype": ("FAIL", "wrong dtype torch.float32, expected torch.float16"),
    "cheat-mutates-inputs": ("FAIL", "modified its input(s) q, k, v"),
    "cheat-cached-result": ("FAIL", BOUND),
    "cheat-replays-first-call": ("FAIL", TIMED),
    "cheat-returns-reference": ("FAIL", "a tensor of the harness, not its own result"),
    "cheat-segfault": ("CRASH", "SIGSEGV"),
    "cheat-skips-timed-calls": ("FAIL", TIMED),
    "cheat-half-work-timed": ("FAIL", TIMED),
    "cheat-unstable-softmax": ("FAIL", "large-scores inputs"),
    "cheat-bf16-for-fp16": ("FAIL", BOUND),
}
GPU_CHEATS = {
    "cheat-side-stream": ("FAIL", "work outside the timed stream"),
    "cheat-illegal-access": ("CRASH", "illegal memory access"),
    # Its timed calls copy a kept answer, under the roofline's floor too; the timed calls on new inputs after
    # timing, which do the work, catch it first (on an H100: 0.602 ms against a median of 0.0219).
    "cheat-faster-than-light": ("FAIL", "its fastest call on new inputs took"),
    # The same with a fingerprint of nine elements instead of the version counters (it waits on the GPU).
    "cheat-keeps-answer": ("FAIL", "its fastest call on new inputs took"),
}


def _run(cli, tmp_path, name, impls, *case):
    out = tmp_path / f"{name}.jsonl"
    result = cli("run", "attention", *case, "--device", "cuda", "--kernels", CORPUS, "--kernels", CORPUS_GPU,
                 "--impl", ",".join(impls), "--baseline", "sdpa", "--timeout", "120", "--max-time", "1",
                 "--out", out)
    records = {r.impl: r for r in results.read(out)}
    for record in records.values():
        if record.log:
            Path(record.log).unlink(missing_ok=True)
    return result, records


def _assert_caught(records, expected):
    for name, (status, fragment) in expected.items():
        record = records[name]
        assert record.status == status, (name, record.status, record.reason)
        assert fragment in record.reason, (name, record.reason)
        assert record.speedup is None


def test_cpu_corpus_on_cuda(cli, tmp_path):
    result, records = _run(cli, tmp_path, "cpu-corpus", CPU_CHEATS, "--n", "256", "--d", "64", "--heads", "2")
    assert result.exit_code == 1, result.output
    _assert_caught(records, CPU_CHEATS)
    assert records["sdpa"].status == "OK"


def test_a_graph_that_replays_a_copy_is_caught(cli, tmp_path):
    """Timed as CUDA-graph replays, a closure that records a copy of its kept answer while captured passes
    every timed call (each replay reads the inputs it was captured with): the graph replayed on new inputs
    after timing gives the old answer."""
    out = tmp_path / "graph.jsonl"
    result = cli("run", "attention", "--n", "256", "--d", "64", "--heads", "2", "--device", "cuda", "--cuda-graph",
                 "--kernels", CORPUS_GPU, "--impl", "sdpa,cheat-graph-replays-a-copy", "--baseline", "sdpa",
                 "--timeout", "120", "--max-time", "0.5", "--out", out)
    records = {r.impl: r for r in results.read(out)}
    assert result.exit_code == 1, result.output
    assert records["sdpa"].status == "OK", records["sdpa"].reason
    cheat = records["cheat-graph-replays-a-copy"]
    assert cheat.status == "FAIL" and "the CUDA graph it was timed as, replayed: " in cheat.reason, cheat.reason
    assert cheat.speedup is None


def test_gpu_corpus(cli, tmp_path):
    """A case big enough that the side stream's work and the work of an answer kept between calls stand out."""
    result, records = _run(cli, tmp_path, "gpu-corpus", [*GPU_CHEATS, "cheat-side-stream-synced"], "--n", "4096",
                           "--d", "128", "--batch", "4", "--heads", "8")
    assert result.exit_code == 1, result.output
    assert records["sdpa"].status == "OK", records["sdpa"].reason
    _assert_caught(records, GPU_CHEATS)
    timing = records["sdpa"].timing
    assert timing.uncovered is None and timing.synced_wall_ms > 0  # a right kernel is not flagged
    assert timing.host_synchronous is None  # nor timed as one that waits on the GPU
    # Side-stream work the call waits for: seen to wait, timed from an idle GPU, so its time holds that
    # work (four fp32 attentions, each slower than one fp16 SDPA call).
    synced = records["cheat-side-stream-synced"]
    assert synced.status == "OK", synced.reason
    assert "with every SM held" in synced.timing.host_synchronous
    assert synced.timing.stats.median > 4 * timing.stats.median, (synced.timing.stats.median, timing.stats.median)


def test_fp32_matmul_on_tf32_fails_on_the_gpu(cli, tmp_path):
    """cuBLAS with TF32 allowed for an fp32 case that did not ask for it: caught by the precision-aware
    bound; the peer (TF32 off unless --tf32) stays OK."""
    out = tmp_path / "tf32.jsonl"
    result = cli("run", "matmul", "--m", "2048", "--n", "2048", "--k", "2048", "--dtype", "fp32", "--device", "cuda",
                 "--kernels", CORPUS, "--impl", "cublas,cheat-tf32", "--timeout", "120", "--max-time", "1",
                 "--out", out)
    records = {r.impl: r for r in results.read(out)}
    assert result.exit_code == 1, result.output
    assert records["cublas"].status == "OK", records["cublas"].reason
    assert records["cheat-tf32"].status == "FAIL"
    assert "is over what a correct fp32 kernel makes" in records["cheat-tf32"].reason


def test_interleaved_run_records_clocks_and_intervals(cli, tmp_path):
    """--interleave on a GPU: every row OK, sampled with per-sample SM clocks, speedups with intervals."""
    out = tmp_path / "interleaved.jsonl"
    result = cli("run", "attention", "--n", "2048", "--d", "128", "--batch", "2", "--heads", "8", "--device", "cuda",
                 "--impl", "naive,sdpa,triton-fa2", "--interleave", "--max-time", "1", "--out", out)
    assert result.exit_code == 0, result.output
    for record in results.read(out):
        assert record.status == "OK", record.reason
        assert record.timing.clock.sm_mhz_median > 0
        low, high = record.speedup_interval
        assert low <= record.speedup <= high
