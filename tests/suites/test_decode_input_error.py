"""What quantizing the decode suite's cache costs, kept apart from the kernels' errors
(Decode.input_error): measured against the values before quantization, per input distribution,
recorded in correctness.input_error, shown under the case's table and in to_pandas()."""

from __future__ import annotations

import math

import pytest

from kbench.correctness import check
from kbench.record import Record
from kbench.suite import Case


def case(kv_dtype, l=70, hq=8, hkv=2, d=32, group=16, q=1) -> Case:
    return Case({"l": l, "q": q, "batch": 1, "hq": hq, "hkv": hkv, "d": d, "kv_dtype": kv_dtype, "group": group})


@pytest.fixture(scope="module")
def decode(registry):
    return registry.suite("decode")


@pytest.fixture(scope="module")
def sdpa(registry):
    return registry.implementations("decode")["sdpa"]


def _textbook(q, k, v):
    """softmax(Q Kᵀ/√d) V in float64, K/V heads repeated for their query heads, one new query."""
    import torch

    group = q.shape[1] // k.shape[1]
    k, v = (t.double().repeat_interleave(group, dim=1) for t in (k, v))
    s = q.double() @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return torch.softmax(s, dim=-1) @ v


@pytest.mark.parametrize("kv_dtype", ["int8", "int4"])
def test_it_is_exact_attention_over_the_dequantized_cache_against_over_the_unquantized_one(decode, kv_dtype):
    """Computed from the values that were quantized: an error of the dequantized cache against itself
    would be 0, and one against anything else would not match this."""
    c = case(kv_dtype)
    for distribution in decode.distributions:
        q, k, v = decode._values(c, 5, distribution, "cpu")
        inputs = decode.make_inputs(c, seed=5, device="cpu", distribution=distribution)
        queries = inputs["q"]  # the fp16 queries the kernels get, in both
        exact = _textbook(queries, k, v)
        err = float((decode.reference(c, inputs) - exact).abs().max())
        figures = decode.input_error(c, 5, "cpu", distribution)["quantization"]
        assert err > 0
        assert figures["max_abs_err"] == pytest.approx(err, rel=1e-9)
        assert figures["max_rel_err"] == pytest.approx(err / float(exact.abs().max()), rel=1e-9)


def test_int4_costs_more_than_int8_on_the_same_values(decode):
    for distribution in decode.distributions:
        int8, int4 = (decode.input_error(case(kv), 3, "cpu", distribution)["quantization"] for kv in ("int8", "int4"))
        assert int4["max_abs_err"] > int8["max_abs_err"] > 0, distribution


@pytest.mark.parametrize("kv_dtype", ["fp16", "bf16"])
def test_an_unquantized_cache_has_none(decode, sdpa, kv_dtype):
    """The fp16 or bf16 cache is the input itself: the record has no input_error at all (not a 0)."""
    assert decode.input_error(case(kv_dtype), 0, "cpu", "normal") == {}
    verdict = check(decode, sdpa, case(kv_dtype), "cpu", seed=0, trials=len(decode.distributions))
    assert verdict.ok, verdict.reason
    assert "input_error" not in verdict.as_record()


@pytest.mark.parametrize("kv_dtype", ["int8", "int4"])
def test_the_check_records_it_per_distribution_beside_the_kernels_error(registry, decode, sdpa, kv_dtype):
    """Once per distribution, of the inputs that distribution's first trial gets; the worst of them on
    top; the same for every implementation (it is the cache's, not a kernel's)."""
    c = case(kv_dtype)
    trials = len(decode.distributions)
    record = check(decode, sdpa, c, "cpu", seed=11, trials=trials).as_record()
    quantization = record["input_error"]["quantization"]
    assert set(quantization["distributions"]) == set(decode.distributions)
    for index, distribution in enumerate(decode.distributions):
        expected = decode.input_error(c, 11 + index, "cpu", distribution)["quantization"]
        assert quantization["distributions"][distribution] == expected
    worst = quantization["distributions"].values()
    assert quantization["max_abs_err"] == max(d["max_abs_err"] for d in worst)
    assert quantization["max_rel_err"] == max(d["max_rel_err"] for d in worst)
    triton = check(decode, registry.implementations("decode")["triton-splitkv"], c, "cpu", seed=11, trials=trials)
    assert triton.ok, triton.reason
    assert triton.as_record()["input_error"] == record["input_error"]


def _record(kv_dtype: str, input_error: dict | None) -> Record:
    c = case(kv_dtype)
    correctness = {"ok": True, "reason": "", "trials": 4, "max_abs_err": 1e-3, "max_rel_err": 1e-3}
    if input_error is not None:
        correctness["input_error"] = input_error
    return Record.from_json({
        "schema": 1, "suite": "decode", "impl": "sdpa", "label": "sdpa", "case": c.values, "case_key": c.key,
        "status": "OK", "correctness": correctness,
        "timing": {"method": "cpu-wall-clock", "samples": [1.0], "stats": {"median": 1.0, "n": 1}, "warnings": []}})


QUANTIZATION = {"quantization": {"max_abs_err": 0.0123, "max_rel_err": 0.0045,
                                 "distributions": {"normal": {"max_abs_err": 0.0123, "max_rel_err": 0.0045}}}}


def test_records_keep_it_and_the_table_and_to_pandas_show_it(decode):
    from kbench.api import ResultSet

    quantized = _record("int8", QUANTIZATION)
    again = Record.from_json(quantized.to_json())
    assert again.correctness.input_error == QUANTIZATION
    plain = _record("fp16", None)
    assert "input_error" not in plain.to_json()["correctness"] and plain.correctness.input_error == {}
    line, note = decode.summary_lines([quantized])
    assert "quantization error" in line and "1.23e-02 max abs" in line and "0.45 %" in line and "normal" in line
    assert "against the dequantized cache" in note
    assert decode.summary_lines([plain]) == []
    frame = ResultSet([quantized, plain]).to_pandas()
    assert frame["quantization_max_abs_err"].tolist()[0] == 0.0123
    assert frame["quantization_max_rel_err"].tolist()[0] == 0.0045
    assert math.isnan(frame["quantization_max_abs_err"].tolist()[1])


def test_kbench_run_shows_it_under_a_quantized_case(cli, tmp_path, flat_text):
    from kbench import results

    out = tmp_path / "decode.jsonl"
    result = cli("run", "decode", "--l", "40", "--hq", "4", "--hkv", "2", "--d", "16", "--kv-dtype", "int8,fp16",
                 "--impl", "sdpa", "--max-time", "0.05", "--out", out)
    assert result.exit_code == 0, result.output
    records = {r.case["kv_dtype"]: r for r in results.read(out)}
    assert records["int8"].correctness.input_error["quantization"]["max_abs_err"] > 0
    assert records["fp16"].correctness.input_error == {}
    assert flat_text(result.output).count("quantization error") == 1
