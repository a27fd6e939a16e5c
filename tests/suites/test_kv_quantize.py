"""The kv-quantize suite (suites/kv-quantize/): its reference is the decode suite's quantization, the
cache it writes is the one decode's kernels read, its check is exact on codes but for rounding ties,
and its implementations (the torch peer, and the Triton kernel through Triton's interpreter) pass it
on the CPU at odd lengths and group tails in both widths, while wrong kernels fail it."""

from __future__ import annotations

import sys

import pytest

from kbench.correctness import check
from kbench.errors import UserError
from kbench.registry import Implementation, Needs
from kbench.suite import Case


def case(l=37, batch=2, hkv=2, d=24, kv_dtype="int8", group=16) -> Case:
    return Case({"l": l, "batch": batch, "hkv": hkv, "d": d, "kv_dtype": kv_dtype, "group": group})


@pytest.fixture(scope="module")
def suite(registry):
    return registry.suite("kv-quantize")


@pytest.fixture(scope="module")
def kv(suite):
    """The quantized cache's format (suites/_common/kv_quantization.py), as the suite loaded it."""
    return sys.modules[type(suite).__module__].kv


def impl(make) -> Implementation:
    return Implementation(suite="kv-quantize", name="wrong", backend="torch", make=make, needs=Needs(),
                          description="", source="test")


# Odd lengths and group tails along both dimensions: K's last group of tokens short (37 = 2 x 16 + 5),
# V's last group of channels short (24 = 16 + 8), groups that split int4's and int2's bytes (7, 3), a group
# longer than the Triton kernel's chunk of tokens (200), one token, MQA, batch > 1.
CASES = [
    case(),
    case(l=5, batch=1, hkv=1, d=16, group=7),
    case(l=100, batch=1, hkv=2, d=64, group=32),
    case(l=33, batch=1, hkv=1, d=40, group=3),
    case(l=300, batch=1, hkv=1, d=256, group=200),
    case(l=1, batch=1, hkv=1, d=8, group=32),
]
CASES = [c for base in CASES for c in (base, *(Case({**base.values, "kv_dtype": t}) for t in ("int4", "int2")))]


@pytest.mark.parametrize("name", ["torch", "triton"])
@pytest.mark.parametrize("c", CASES, ids=lambda c: c.key)
def test_implementations_pass_the_check_on_the_cpu(registry, suite, name, c):
    verdict = check(suite, registry.implementations("kv-quantize")[name], c, "cpu", seed=3,
                    trials=len(suite.distributions))
    assert verdict.ok, verdict.reason
    assert set(verdict.as_record()["distributions"]) == set(suite.distributions)


def test_the_reference_is_the_decode_suites_quantization(registry, suite, kv):
    """The reference cache holds exactly what decode's quantize() makes of the same (fp16) values, in the
    tensors, shapes and types decode's kernels take (decode's make_inputs of the same case), and decodes
    to within half a step of them."""
    import torch

    decode = registry.suite("decode")
    for kv_dtype in ("int8", "int4", "int2"):
        c = case(kv_dtype=kv_dtype)
        inputs = suite.make_inputs(c, seed=1, device="cpu", distribution="outliers")
        cache = kv.views(suite.reference(c, inputs), suite.layout(c))
        bits = kv.QUANTIZED[kv_dtype]
        decode_case = Case({**c.values, "q": 1, "hq": 2 * c.hkv})
        decode_inputs = decode.make_inputs(decode_case, seed=1, device="cpu")
        for name in ("k", "v"):
            stored = kv.quantize(inputs[name].double(), c.group, kv.ALONG[name], bits, name)
            for part, tensor in stored.items():
                assert torch.equal(cache[part], tensor), part
                assert cache[part].shape == decode_inputs[part].shape and cache[part].dtype == decode_inputs[part].dtype
            back = kv.dequantize(cache, name, c.group, kv.ALONG[name], torch.float64, bits)
            step = kv.spread(cache[f"{name}_scale"].double(), c.group, kv.ALONG[name], inputs[name].shape[kv.ALONG[name]])
            assert ((back - inputs[name].double()).abs() <= step / 2 * (1 + 2**-9)).all()
        # Read the fp16 values and write the cache, once each: decode's cache bytes plus 2 bytes a value.
        assert suite.min_bytes(c) == decode.cache_bytes(decode_case) + 2 * 2 * c.batch * c.hkv * c.l * c.d
        assert suite.flops(c) == 0


def _ties(kv_dtype: str):
    """K = V = a 16 x 16 matrix whose every row and column holds 0 and 15/16 (so every scale is 1/16 for
    int4, exactly) and, where (t + c) % 16 is 4, the value 4.5/16: an exact rounding tie, which the
    definition (half to even) rounds down to 4. Returns (case, inputs)."""
    import torch

    c = case(l=16, batch=1, hkv=1, d=16, kv_dtype=kv_dtype, group=16)
    index = torch.arange(16)
    steps = ((index[:, None] + index[None, :]) % 16).double()
    values = torch.where(steps == 4, 4.5, steps) / 16 * (15 if kv_dtype == "int4" else 255) / 15
    x = values.half().reshape(1, 1, 16, 16)
    return c, {"k": x.clone(), "v": x.clone()}


def _with_codes(suite, kv, c, buffer, change):
    """A copy of ``buffer`` whose K codes are ``change(codes, quotient)`` (codes unpacked, int64)."""
    out = buffer.clone()
    cache = kv.views(out, suite.layout(c))
    bits = kv.QUANTIZED[c.kv_dtype]
    codes = kv.unpacked(cache["k_codes"], bits).long()
    codes = change(codes).clamp(0, 2**bits - 1).to(codes.dtype).byte()
    if bits == 4:
        codes = codes[..., 0::2] | (codes[..., 1::2] << 4)
    cache["k_codes"].copy_(codes)
    return out


@pytest.mark.parametrize("kv_dtype", ["int8", "int4"])
def test_a_tie_may_round_either_way_and_nothing_else_may(registry, suite, kv, kv_dtype):
    import torch

    c, inputs = _ties(kv_dtype)
    ref = suite.reference(c, inputs)
    cache = kv.views(ref, suite.layout(c))
    assert float(cache["k_scale"].max()) == float(cache["k_scale"].min())  # one scale: the ties are exact
    at_ties = (inputs["k"].double() / cache["k_scale"].double()[0, 0, 0] % 1 == 0.5)
    assert at_ties.sum() == 16
    up = _with_codes(suite, kv, c, ref, lambda codes: codes + at_ties.long())
    assert suite.judge(c, up, ref, inputs) == ("", pytest.approx(float(cache["k_scale"].max())), pytest.approx(
        float(cache["k_scale"].max()) / float(inputs["k"].abs().max())))
    down = _with_codes(suite, kv, c, ref, lambda codes: codes - at_ties.long())
    reason, _, _ = suite.judge(c, down, ref, inputs)
    assert "16 of 256 k codes are not the nearest code" in reason
    off_tie = torch.zeros_like(at_ties)
    off_tie[..., 3, 0] = True  # the value 3/16: code 3 exactly
    reason, _, _ = suite.judge(c, _with_codes(suite, kv, c, ref, lambda codes: codes + off_tie.long()), ref, inputs)
    assert "1 of 256 k codes" in reason
    # The Triton kernel rounds ties up, the reference to even: its cache differs there, and passes.
    out = suite.make_output(c, inputs)
    registry.implementations("kv-quantize")["triton"].make(c, inputs, out)()
    assert not torch.equal(out, ref)
    assert suite.judge(c, out, ref, inputs)[0] == ""


# --- wrong kernels: the torch peer's cache, then one mistake ---------------------------------------------

def _wrong(registry, kv, mistake):
    right = registry.implementations("kv-quantize")["torch"].make

    def make(c, inputs, out):
        run = right(c, inputs, out)
        cache = kv.views(out, kv.cache_layout(c.batch, c.hkv, c.l, c.d, c.group, kv.QUANTIZED[c.kv_dtype]))

        def wrong():
            run()
            mistake(c, inputs, cache)

        return wrong

    return impl(make)


def _floor_codes(kv):
    """Codes rounded down (truncated) against the right scales and minimums."""
    def mistake(c, inputs, cache):
        bits = kv.QUANTIZED[c.kv_dtype]
        for name in ("k", "v"):
            along, size = kv.ALONG[name], c.l if name == "k" else c.d
            scale, minimum = (kv.spread(cache[f"{name}_{p}"].float(), c.group, along, size) for p in ("scale", "min"))
            codes = ((inputs[name].float() - minimum) / scale).floor().clamp(0, 2**bits - 1).byte()
            cache[f"{name}_codes"].copy_(codes[..., 0::2] | (codes[..., 1::2] << 4) if bits == 4 else codes)
    return mistake


def _last_group_dropped(kv):
    """K's last group of tokens never written (a grid of L // group groups): left as the poison (zeros)."""
    def mistake(c, inputs, cache):
        cache["k_scale"][:, :, -1].zero_()
        cache["k_min"][:, :, -1].zero_()
        cache["k_codes"][:, :, (c.l - 1) // c.group * c.group:].zero_()
    return mistake


def _nibbles_swapped(kv):
    """int4 codes packed with channel 2j in the high nibble."""
    def mistake(c, inputs, cache):
        codes = cache["k_codes"]
        codes.copy_((codes >> 4) | (codes << 4))
    return mistake


def _scales_unrounded(kv):
    """V's scale stored as fp16 but the codes chosen against the fp32 scale before rounding."""
    import torch

    def mistake(c, inputs, cache):
        bits = kv.QUANTIZED[c.kv_dtype]
        low, high = kv.group_range(inputs["v"].float(), c.group, -1)
        scale = kv.spread(((high - low) / (2**bits - 1)).clamp_min(1e-8), c.group, -1, c.d)
        minimum = kv.spread(cache["v_min"].float(), c.group, -1, c.d)
        codes = ((inputs["v"].float() - minimum) / scale).round().clamp(0, 2**bits - 1).to(torch.uint8)
        cache["v_codes"].copy_(codes[..., 0::2] | (codes[..., 1::2] << 4) if bits == 4 else codes)
    return mistake


@pytest.mark.parametrize("mistake, kv_dtypes, message", [
    (_floor_codes, ("int8", "int4"), "codes are not the nearest code"),
    (_last_group_dropped, ("int8", "int4"), "k minimums are not the smallest value"),
    (_nibbles_swapped, ("int4",), "k codes are not the nearest code"),
    (_scales_unrounded, ("int8",), "v codes are not the nearest code"),
], ids=["floor", "last-group-dropped", "nibbles-swapped", "codes-against-the-unrounded-scale"])
def test_wrong_kernels_fail_the_check(registry, suite, kv, mistake, kv_dtypes, message):
    for kv_dtype in kv_dtypes:
        c = case(l=300, batch=1, hkv=2, d=64, kv_dtype=kv_dtype, group=32) if mistake is _scales_unrounded \
            else case(kv_dtype=kv_dtype)
        verdict = check(suite, _wrong(registry, kv, mistake(kv)), c, "cpu", seed=0, trials=2)
        assert not verdict.ok and message in verdict.reason, (kv_dtype, verdict.reason)


@pytest.mark.parametrize("values, message", [
    ({"d": 12}, "--d 12 is not supported"),
    ({"l": 0}, "--l must be positive"),
    ({"group": 0}, "--group must be positive"),
])
def test_cases_no_kernel_could_run_are_refused(suite, values, message):
    with pytest.raises(UserError, match=message):
        suite.validate(case(**values))


def test_kbench_run_kv_quantize_on_the_cpu(cli, tmp_path):
    from kbench import results

    out = tmp_path / "kv-quantize.jsonl"
    result = cli("run", "kv-quantize", "--l", "37", "--hkv", "2", "--d", "24", "--group", "16",
                 "--kv-dtype", "int8,int4", "--max-time", "0.05", "--out", out)
    assert result.exit_code == 0, result.output
    assert {(r.impl, r.case["kv_dtype"], r.status) for r in results.read(out)} == {
        (impl, kv_dtype, "OK") for impl in ("torch", "triton") for kv_dtype in ("int8", "int4")}
    explained = cli("explain", "kv-quantize", "--l", "37", "--d", "24", "--group", "16")
    assert explained.exit_code == 0, explained.output
    assert "cache written" in explained.output


def test_the_suite_is_a_folder_with_its_kernels_beside_it():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    assert (root / "suites" / "kv-quantize" / "suite.py").is_file()
    assert {p.name for p in (root / "kernels" / "kv-quantize").glob("*.py")} == {"torch_ops.py", "triton_quantize.py"}
