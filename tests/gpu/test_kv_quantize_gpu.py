"""The kv-quantize implementations right on a GPU, through `kbench run` (its workers compile the Triton
kernel instead of interpreting it): one token, a partial group of tokens (4099 in groups of 32, 1000 in
groups of 48), 128k tokens, d 64 and 128, V groups that end inside an int4 or int2 byte (--group 7), int8,
int4 and int2, against the float64 definition through the suite's own check (every input distribution, the
timed calls checked too). The decode suite's int8/int4/int2 rows carry the quantization's own error."""

from __future__ import annotations

import pytest

from kbench import results

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_cuda")]

SWEEPS = (
    ("--l", "1,4099,131072", "--hkv", "8", "--d", "128,64", "--group", "32"),
    ("--l", "1000", "--hkv", "2", "--d", "128", "--group", "48,7"),
)


@pytest.mark.parametrize("sweep", SWEEPS, ids=["lengths", "groups"])
def test_kv_quantize_is_right_through_kbench_run(cli, tmp_path, compiled_triton, sweep):
    out = tmp_path / "kv-quantize.jsonl"
    result = cli("run", "kv-quantize", *sweep, "--batch", "2", "--kv-dtype", "int8,int4,int2", "--device", "cuda",
                 "--timeout", "300", "--max-time", "0.2", "--out", out)
    statuses = {(r.impl, r.case_key): (r.status, r.reason) for r in results.read(out)}
    wrong = {key: status for key, status in statuses.items() if status[0] != "OK"}
    assert statuses and not wrong, f"kbench run kv-quantize {' '.join(sweep)}: {wrong}\n{result.output[-3000:]}"
    assert result.exit_code == 0, result.output


def test_decode_records_the_quantization_error_on_a_gpu(cli, tmp_path, compiled_triton):
    out = tmp_path / "decode.jsonl"
    result = cli("run", "decode", "--l", "4099", "--hq", "32", "--hkv", "8", "--d", "128", "--kv-dtype",
                 "fp16,int8,int4,int2", "--device", "cuda", "--impl", "sdpa", "--max-time", "0.2", "--out", out)
    assert result.exit_code == 0, result.output
    errors = {r.case["kv_dtype"]: r.correctness.input_error.get("quantization") for r in results.read(out)}
    assert errors["fp16"] is None
    assert 0 < errors["int8"]["max_abs_err"] < errors["int4"]["max_abs_err"] < errors["int2"]["max_abs_err"]
