"""The decode suite's FlashInfer peer right on a GPU, through `kbench run` beside the torch baseline:
cache lengths of one token, of a prime number of tokens (pages of one token), a length that is not a
power of two, and 128k tokens, GQA 32/8 with one and four new queries (the decode and the causal
prefill wrapper), fp16 and bf16, against float64 through kbench's own check (every input
distribution, the timed calls checked too); then tensor cores on and off and pages of one token and
of 16. Skipped, with the reason, where flashinfer-python is not installed (or found through
$KBENCH_SITE_DIRS). The first run of each kernel variant compiles it (minutes, once per cache folder)."""

from __future__ import annotations

import pytest

from kbench import results
from kbench.registry import skip_reason
from kbench.suite import Case

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_cuda")]

SWEEPS = (
    ("--l", "1,17,1000,4099,131072", "--q", "1"),
    ("--l", "17,1000,4099,131072", "--q", "4"),  # four new queries need a cache of four tokens or more
)
PARAMS = ("--param", "tensor_cores=on,off", "--param", "page_size=1,16")


@pytest.fixture
def needs_flashinfer(needs_cuda, registry):
    import torch

    case = Case({"l": 4096, "q": 1, "batch": 2, "hq": 32, "hkv": 8, "d": 128, "kv_dtype": "fp16", "group": 32})
    reason = skip_reason(registry.implementations("decode")["flashinfer"], case, "cuda",
                         torch.cuda.get_device_capability())
    if reason:
        pytest.skip(f"flashinfer: {reason}")


def _flashinfer_rows(cli, out, *args):
    result = cli("run", "decode", *args, "--batch", "2", "--hq", "32", "--hkv", "8", "--d", "128",
                 "--kv-dtype", "fp16,bf16", "--device", "cuda", "--timeout", "600", "--max-time", "0.2",
                 "--out", out)
    rows = {(r.label, r.case_key): (r.status, r.reason) for r in results.read(out) if r.impl == "flashinfer"}
    return result, rows


@pytest.mark.usefixtures("needs_flashinfer")
@pytest.mark.parametrize("sweep", SWEEPS, ids=["decode", "speculative"])
def test_flashinfer_decode_is_right_through_kbench_run(cli, tmp_path, sweep):
    result, rows = _flashinfer_rows(cli, tmp_path / "decode.jsonl", *sweep, "--impl", "sdpa,flashinfer")
    lengths = sweep[1].split(",")
    wrong = {key: status for key, status in rows.items() if status[0] != "OK"}
    assert len(rows) == 2 * len(lengths) and not wrong, \
        f"kbench run decode {' '.join(sweep)}: {wrong}\n{result.output[-3000:]}"
    assert result.exit_code == 0, result.output


@pytest.mark.usefixtures("needs_flashinfer")
def test_flashinfer_params_are_right(cli, tmp_path):
    """Tensor cores on and off, pages of one token and of 16, at one new query; at four, tensor cores
    off is a SKIP (FlashInfer's CUDA-core decode takes one query a sequence) and the rest are right."""
    out = tmp_path / "decode.jsonl"
    result, rows = _flashinfer_rows(cli, out, "--l", "17,4096,131072", "--q", "1,4", "--impl", "flashinfer", *PARAMS)
    wrong = {key: status for key, status in rows.items()
             if status[0] != ("SKIP" if "tensor_cores=off" in key[0] and "q=4" in key[1] else "OK")}
    assert len(rows) == 3 * 2 * 2 * 4 and not wrong, f"{wrong}\n{result.output[-3000:]}"
    assert result.exit_code == 0, result.output
