"""triton-fa2 (through Triton's interpreter), naive and sdpa-math against the float64 reference,
through the real engine path: kbench.correctness.check with fresh seeds per case."""

from __future__ import annotations

import itertools
import zlib

import pytest
import torch

from kbench.correctness import check, recheck
from kbench.suite import Case

NS = (1, 17, 77, 130)
HEAD_DIMS = (64, 128)
DTYPES = ("fp16", "bf16", "fp32")


def seed_for(case: Case) -> int:
    """A different, reproducible seed for every case."""
    return zlib.crc32(case.key.encode()) % 100_000


def assert_within_bound_on_every_distribution(verdict, attention) -> None:
    """Every input distribution was tried, and on each the worst error is within what a correct kernel
    of the case's type makes (the precision-aware bound the engine judged by)."""
    assert list(verdict.distributions) == list(attention.distributions)
    assert len(verdict.distributions) == 5
    for name, entry in verdict.distributions.items():
        assert entry["max_abs_err"] is not None and entry["max_abs_err"] <= entry["allowed"], (name, entry)
    assert verdict.max_abs_err == max(entry["max_abs_err"] for entry in verdict.distributions.values())


def _triton_cases():
    for n, d, dtype, causal in itertools.product(NS, HEAD_DIMS, DTYPES, (False, True)):
        # batch x heads > 1 on half of the grid (odd and even N both), 1 x 1 on the rest
        batch, heads = (2, 3) if n in (17, 130) else (1, 1)
        yield Case({"n": n, "d": d, "batch": batch, "heads": heads, "dtype": dtype, "causal": causal})


@pytest.mark.parametrize("case", list(_triton_cases()), ids=lambda c: c.key)
def test_triton_fa2_matches_reference(registry, attention, case):
    impl = registry.implementations("attention")["triton-fa2"]
    verdict = check(attention, impl, case, "cpu", seed=seed_for(case), trials=2)
    assert verdict.ok, verdict.reason
    assert_within_bound_on_every_distribution(verdict, attention)
    assert recheck(verdict, "cpu") == ""  # a second call on the same buffers is right too
    fn = verdict.last[0]
    assert fn.config["BLOCK_M"] == 128  # the interpreter's tile config


@pytest.mark.parametrize("index", range(8))
@pytest.mark.parametrize("case", [
    Case({"n": 77, "d": 64, "batch": 1, "heads": 2, "dtype": "fp16", "causal": True}),
    Case({"n": 77, "d": 64, "batch": 1, "heads": 2, "dtype": "fp16", "causal": False}),
    Case({"n": 300, "d": 32, "batch": 1, "heads": 1, "dtype": "fp32", "causal": True}),
    Case({"n": 256, "d": 32, "batch": 1, "heads": 1, "dtype": "bf16", "causal": False}),
], ids=lambda c: c.key)
def test_every_config_the_autotuner_can_pick_is_correct(registry, attention, case, index):
    """Each tile shape in CONFIGS, pinned, through the interpreter: tails of N, the causal
    diagonal split into BLOCK_M / BLOCK_N masked tiles, and N a multiple of every tile."""
    import sys

    impl = registry.implementations("attention")["triton-fa2"]
    configs = sys.modules[impl.make.__module__].CONFIGS
    assert len(configs) == 8
    verdict = check(attention, impl, case, "cpu", seed=seed_for(case) + index, trials=1, params={"config": str(index)})
    assert verdict.ok, verdict.reason
    assert verdict.last[0].config["BLOCK_M"] == configs[index]["BLOCK_M"]


@pytest.mark.parametrize("form", [{"config": "4"}, {"config": "6", "tma": "1"}, {"config": "auto"}],
                         ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items()))
@pytest.mark.parametrize("rescale", [1, 8])
@pytest.mark.parametrize("case", [
    Case({"n": 300, "d": 64, "batch": 1, "heads": 2, "dtype": "fp16", "causal": True}),
    Case({"n": 300, "d": 64, "batch": 1, "heads": 1, "dtype": "bf16", "causal": False}),
], ids=lambda c: c.key)
def test_triton_fa2_moves_the_maxima_only_past_a_margin(registry, attention, case, rescale, form):
    """--param rescale: a tile rescales the accumulator only where some row's scores pass its maximum by more
    than the margin, else P is taken against the old maxima (up to 2^margin). Several K/V tiles a row, so that
    later tiles take both branches: on most distributions no row passes the margin after the first tile, on
    the outliers some do."""
    impl = registry.implementations("attention")["triton-fa2"]
    verdict = check(attention, impl, case, "cpu", seed=seed_for(case) + rescale, trials=2,
                    params={**form, "rescale": rescale})
    assert verdict.ok, verdict.reason
    assert_within_bound_on_every_distribution(verdict, attention)
    assert verdict.last[0].config["rescale"] == rescale


@pytest.mark.parametrize("config", ["auto", "1", "6"])
@pytest.mark.parametrize("case", [
    Case({"n": 77, "d": 64, "batch": 2, "heads": 3, "dtype": "fp16", "causal": True}),
    Case({"n": 130, "d": 128, "batch": 1, "heads": 2, "dtype": "bf16", "causal": False}),
    Case({"n": 128, "d": 64, "batch": 1, "heads": 1, "dtype": "fp16", "causal": False}),
    Case({"n": 1, "d": 64, "batch": 1, "heads": 1, "dtype": "fp16", "causal": True}),
], ids=lambda c: c.key)
def test_triton_fa2_tma_path(registry, attention, case, config):
    """The tensor-descriptor (TMA) path the H200 takes, through the interpreter: tiles past N read
    as zeros and are never written (the poisoned output catches a write past N of another head)."""
    impl = registry.implementations("attention")["triton-fa2"]
    verdict = check(attention, impl, case, "cpu", seed=seed_for(case) + 7, trials=2,
                    params={"tma": "1", "config": config})
    assert verdict.ok, verdict.reason
    assert verdict.last[0].config["tma"] is True


def test_triton_fa2_tma_refusals(registry, attention):
    from kbench.registry import Unsupported

    impl = registry.implementations("attention")["triton-fa2"]
    case = Case({"n": 16, "d": 64, "batch": 1, "heads": 1, "dtype": "fp32", "causal": False})
    inputs = attention.make_inputs(case, seed=1, device="cpu")
    with pytest.raises(Unsupported, match="fp32"):
        impl.make(case, inputs, attention.make_output(case, inputs), tma="1")
    with pytest.raises(Unsupported, match="tma="):
        impl.make(case, inputs, attention.make_output(case, inputs), tma="yes")
    assert impl.make(case, inputs, attention.make_output(case, inputs)).config["tma"] is False


def test_triton_fa2_batch_and_heads_are_independent(registry, attention):
    """Each (batch, head) slice equals the same computation done alone: no mixing across slices."""
    impl = registry.implementations("attention")["triton-fa2"]
    case = Case({"n": 33, "d": 64, "batch": 2, "heads": 2, "dtype": "fp32", "causal": True})
    inputs = attention.make_inputs(case, seed=9, device="cpu")
    out = attention.make_output(case, inputs)
    impl.make(case, inputs, out)()
    single = Case({**case.values, "batch": 1, "heads": 1})
    for b in range(2):
        for h in range(2):
            part = {name: t[b : b + 1, h : h + 1].contiguous() for name, t in inputs.items()}
            alone = attention.make_output(single, part)
            impl.make(single, part, alone)()
            torch.testing.assert_close(out[b : b + 1, h : h + 1], alone, rtol=1e-6, atol=1e-6)


def test_triton_fa2_rejects_non_contiguous_last_dim(registry, attention):
    from kbench.registry import Unsupported

    impl = registry.implementations("attention")["triton-fa2"]
    case = Case({"n": 16, "d": 16, "batch": 1, "heads": 1, "dtype": "fp32", "causal": False})
    inputs = attention.make_inputs(case, seed=0, device="cpu")
    inputs["q"] = inputs["q"].transpose(-1, -2).contiguous().transpose(-1, -2)
    with pytest.raises(Unsupported, match="contiguous last dimension"):
        impl.make(case, inputs, attention.make_output(case, inputs))


@pytest.mark.parametrize("name", ["naive", "sdpa-math"])
@pytest.mark.parametrize("case", [
    Case({"n": 17, "d": 64, "batch": 2, "heads": 2, "dtype": "fp16", "causal": True}),
    Case({"n": 77, "d": 128, "batch": 1, "heads": 3, "dtype": "bf16", "causal": False}),
    Case({"n": 33, "d": 32, "batch": 1, "heads": 1, "dtype": "fp32", "causal": True}),
    Case({"n": 1, "d": 64, "batch": 1, "heads": 1, "dtype": "fp32", "causal": False}),
], ids=lambda c: c.key)
def test_torch_implementations_match_reference(registry, attention, name, case):
    impl = registry.implementations("attention")[name]
    verdict = check(attention, impl, case, "cpu", seed=seed_for(case) + 1, trials=2)
    assert verdict.ok, verdict.reason
    assert_within_bound_on_every_distribution(verdict, attention)
    assert recheck(verdict, "cpu") == ""


SDP_FLAGS = ("flash", "cudnn", "mem_efficient", "math")


@pytest.fixture(autouse=True)
def restore_sdpa_flags():
    """sdpa-* pin one backend through torch's global flags: put them back after each test."""
    before = {name: getattr(torch.backends.cuda, f"{name}_sdp_enabled")() for name in SDP_FLAGS}
    yield
    for name, enabled in before.items():
        getattr(torch.backends.cuda, f"enable_{name}_sdp")(enabled)


def test_sdpa_math_pins_its_backend_and_records_it(registry, attention):
    impl = registry.implementations("attention")["sdpa-math"]
    case = Case({"n": 8, "d": 16, "batch": 1, "heads": 1, "dtype": "fp32", "causal": False})
    verdict = check(attention, impl, case, "cpu", seed=0, trials=1)
    assert verdict.ok, verdict.reason
    assert verdict.last[0].config["backend"] == "math"
    enabled = {name: getattr(torch.backends.cuda, f"{name}_sdp_enabled")() for name in SDP_FLAGS}
    assert enabled == {"flash": False, "cudnn": False, "mem_efficient": False, "math": True}


def test_sdpa_flash_runs_on_cpu(registry, attention):
    impl = registry.implementations("attention")["sdpa"]
    case = Case({"n": 19, "d": 32, "batch": 1, "heads": 2, "dtype": "fp16", "causal": True})
    verdict = check(attention, impl, case, "cpu", seed=3, trials=2)
    assert verdict.ok, verdict.reason
    assert verdict.last[0].config["backend"] == "flash"


def test_triton_fa2_records_the_autotuners_candidate_times(registry):
    """run.config's candidates_ms: the autotuner's median of each configuration, by index in CONFIGS
    (Triton keeps {Config: [median, p20, p80]}); configurations not in CONFIGS are left out."""
    import sys
    from types import SimpleNamespace

    import triton

    module = sys.modules[registry.implementations("attention")["triton-fa2"].make.__module__]

    def config(c):  # as the autotuner's candidates are built from CONFIGS
        return triton.Config({"BLOCK_M": c["BLOCK_M"], "BLOCK_N": c["BLOCK_N"]}, **module._launch_options(c))

    stranger = {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 1, "num_stages": 1}
    tuner = SimpleNamespace(configs_timings={config(module.CONFIGS[1]): [0.56691, 0.56, 0.57],
                                             config(module.CONFIGS[3]): 0.6046, config(stranger): [1.0, 1.0, 1.0]})
    assert module._candidate_medians(tuner) == {"1": 0.5669, "3": 0.6046}
    assert module._candidate_medians(SimpleNamespace()) == {}
