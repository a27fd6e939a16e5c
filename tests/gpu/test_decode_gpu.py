"""The decode implementations right on a GPU, through `kbench run` (its workers compile the Triton kernel
instead of interpreting it): cache lengths of one token, a partial tile, several pieces and 128k tokens,
GQA 32/8 with one and four new queries, MQA, fp16, bf16, int8 and int4 caches, against float64 through kbench's own check
(every input distribution, the timed calls checked too)."""

from __future__ import annotations

import pytest

from kbench import results

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_cuda")]

SWEEPS = (
    ("--l", "1,17,1000,4099,131072", "--hq", "32", "--hkv", "8", "--q", "1"),
    ("--l", "17,4099,131072", "--hq", "32", "--hkv", "8", "--q", "4"),
    ("--l", "17,4099,131072", "--hq", "16", "--hkv", "1", "--q", "1"),
)


@pytest.mark.parametrize("sweep", SWEEPS, ids=["gqa", "gqa-speculative", "mqa"])
def test_decode_is_right_through_kbench_run(cli, tmp_path, compiled_triton, sweep):
    out = tmp_path / "decode.jsonl"
    result = cli("run", "decode", *sweep, "--batch", "2", "--d", "128", "--kv-dtype", "fp16,bf16,int8,int4",
                 "--device", "cuda", "--impl", "sdpa,triton-splitkv", "--timeout", "300", "--max-time", "0.2",
                 "--out", out)
    statuses = {(r.impl, r.case_key): (r.status, r.reason) for r in results.read(out)}
    wrong = {key: status for key, status in statuses.items() if status[0] != "OK"}
    assert statuses and not wrong, f"kbench run decode {' '.join(sweep)}: {wrong}\n{result.output[-3000:]}"
    assert result.exit_code == 0, result.output
