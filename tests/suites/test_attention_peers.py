"""The optional attention peers, `fa4` (FlashAttention-4) and `flashinfer` (FlashInfer).

Neither package runs without a GPU, so here each is replaced by a stand-in with the package's calling
convention (FlashAttention's B x N x H x d tensors; FlashInfer's [tokens, heads, d] ones) that computes attention in fp32 with torch. The implementations' real set-up and closures
then go through the engine's correctness check, which catches a wrong layout (a transposed head,
batch entries mixed up) as an error far past the bound. The stand-ins also insist on getting views
of the suite's tensors: the peers are timed without a copy that the user's kernels would not pay.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

from kbench import loader
from kbench.correctness import check, recheck
from kbench.errors import UserError
from kbench.registry import skip_reason
from kbench.suite import Case

CASES = [
    Case({"n": 33, "d": 64, "batch": 2, "heads": 3, "dtype": "fp16", "causal": False}),
    Case({"n": 70, "d": 128, "batch": 3, "heads": 2, "dtype": "bf16", "causal": True}),
]


def _attention_bhnd(q, k, v, causal: bool):
    """fp32 attention of B x H x N x d tensors, in their dtype."""
    scores = (q.float() @ k.float().transpose(-1, -2)) / q.shape[-1] ** 0.5
    if causal:
        n = q.shape[-2]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return (scores.softmax(-1) @ v.float()).to(q.dtype)


def _shares_storage(view, base) -> bool:
    return view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()


@pytest.fixture
def fake_flash_attn(monkeypatch):
    calls = []

    def flash_attn_func(q, k, v, causal=False):
        calls.append((tuple(q.shape), q.is_contiguous()))
        out = _attention_bhnd(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal)
        return out.transpose(1, 2).contiguous(), None  # (out, lse), B x N x H x d as FlashAttention's

    package = types.ModuleType("flash_attn")
    package.__path__ = []
    cute = types.ModuleType("flash_attn.cute")
    cute.flash_attn_func = flash_attn_func
    monkeypatch.setitem(sys.modules, "flash_attn", package)
    monkeypatch.setitem(sys.modules, "flash_attn.cute", cute)
    monkeypatch.setattr("importlib.metadata.version", lambda name: "0+stand-in")
    return calls


@pytest.fixture
def fake_flashinfer(monkeypatch):
    calls = []

    def single_prefill_with_kv_cache(q, k, v, causal=False, kv_layout="NHD"):
        assert kv_layout == "NHD"
        calls.append((q, k, v))
        # q, k, v: [tokens, heads, d]
        return _attention_bhnd(*(t.transpose(0, 1) for t in (q, k, v)), causal).transpose(0, 1).contiguous()

    module = types.ModuleType("flashinfer")
    module.single_prefill_with_kv_cache = single_prefill_with_kv_cache
    module.__version__ = "0+stand-in"
    monkeypatch.setitem(sys.modules, "flashinfer", module)
    return calls


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.key)
def test_fa4_glue_is_checked_like_every_kernel(registry, attention, fake_flash_attn, case):
    impl = registry.implementations("attention")["fa4"]
    verdict = check(attention, impl, case, "cpu", seed=3, trials=2)
    assert verdict.ok, verdict.reason
    assert recheck(verdict, "cpu") == ""
    shape = (case.batch, case.n, case.heads, case.d)
    assert fake_flash_attn and all(call == (shape, False) for call in fake_flash_attn)  # views, B x N x H x d


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.key)
def test_flashinfer_glue_is_checked_like_every_kernel(registry, attention, fake_flashinfer, case):
    impl = registry.implementations("attention")["flashinfer"]
    verdict = check(attention, impl, case, "cpu", seed=5, trials=2)
    assert verdict.ok, verdict.reason
    assert recheck(verdict, "cpu") == ""
    inputs = verdict.last[1]  # the last trial's inputs, the ones the closure is timed on
    q, k, v = fake_flashinfer[-1]
    assert q.shape == k.shape == v.shape == (case.n, case.batch * case.heads, case.d)
    # views of the suite's own tensors, not copies
    assert all(_shares_storage(t, inputs[name]) for t, name in ((q, "q"), (k, "k"), (v, "v")))


def test_a_wrong_layout_fails_the_check(registry, attention, monkeypatch):
    """The check the stand-ins rely on is real: heads and tokens swapped in FlashInfer's output (the
    mistake a wrong view makes) is a FAIL."""
    def swapped(q, k, v, causal=False, kv_layout="NHD"):
        out = _attention_bhnd(*(t.transpose(0, 1) for t in (q, k, v)), causal)  # [heads, tokens, d]
        return out.reshape(q.shape[0], q.shape[1], q.shape[2])

    module = types.ModuleType("flashinfer")
    module.single_prefill_with_kv_cache = swapped
    module.__version__ = "0+stand-in"
    monkeypatch.setitem(sys.modules, "flashinfer", module)
    verdict = check(attention, registry.implementations("attention")["flashinfer"], CASES[0], "cpu",
                    seed=1, trials=1)
    assert not verdict.ok


@pytest.mark.parametrize("name, module", [("fa4", "flash_attn.cute"), ("flashinfer", "flashinfer")])
def test_absent_package_is_a_skip_naming_it(registry, name, module, monkeypatch):
    impl = registry.implementations("attention")[name]
    monkeypatch.setattr("importlib.util.find_spec", lambda mod: None if mod == module else object())
    reason = skip_reason(impl, CASES[0], "cuda", (9, 0))
    assert reason == f"needs {module} (not installed)"
    assert skip_reason(impl, CASES[0], "cpu", None) == "needs a CUDA device"


def test_site_dirs_run_their_pth_files(tmp_path, monkeypatch):
    """$KBENCH_SITE_DIRS's folders are added as site-packages is, .pth files included: the way
    nvidia-cutlass-dsl puts its `cutlass` package on the path for FlashAttention-4."""
    target = tmp_path / "site"
    inner = target / "vendor" / "packages"
    inner.mkdir(parents=True)
    (inner / "kbench_pth_probe.py").write_text("VALUE = 42\n")
    (target / "probe.pth").write_text(f"import sys; sys.path.insert(0, {str(inner)!r})\n")
    monkeypatch.setenv("KBENCH_SITE_DIRS", str(target))
    monkeypatch.setattr(sys, "path", list(sys.path))
    loader.load(with_kernels=True)
    import importlib

    assert importlib.import_module("kbench_pth_probe").VALUE == 42
    sys.modules.pop("kbench_pth_probe", None)


def test_missing_site_dir_is_one_user_error(tmp_path, monkeypatch):
    monkeypatch.setenv("KBENCH_SITE_DIRS", str(tmp_path / "absent"))
    with pytest.raises(UserError, match="KBENCH_SITE_DIRS: .*absent.* is not a folder"):
        loader.load()
