"""The decode suite's optional FlashInfer peer (kernels/decode/flashinfer.py) on the CPU.

FlashInfer runs only on a GPU, so here it is replaced by a stand-in with its wrappers' calling
convention (plan with a page table, run with a query, HND pages and an output buffer) that does what
FlashInfer does with them: it gathers each sequence's pages through the page table from the page
tensors as they are given (their strides included), and attends in fp32 with torch. The peer's real
set-up and closures then go through the engine's correctness check, which catches a page table or a
view of the cache that reads the wrong tokens, heads or sequences. The stand-in also insists on views
of the suite's own tensors: the cache is read in place, never copied.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

from kbench.correctness import check, recheck
from kbench.registry import Unsupported, skip_reason
from kbench.suite import Case


def case(l=17, q=1, batch=2, hq=8, hkv=2, d=64, kv_dtype="fp16", group=32) -> Case:
    return Case({"l": l, "q": q, "batch": batch, "hq": hq, "hkv": hkv, "d": d, "kv_dtype": kv_dtype,
                 "group": group})


CASES = [
    case(),  # L prime: pages of one token
    case(l=40, hq=8, hkv=2, kv_dtype="bf16"),  # pages of 10 tokens
    case(l=48, q=3, hq=8, hkv=2),  # speculative: the prefill wrapper, causal; pages of 16
    case(l=33, q=4, hq=4, hkv=1, batch=3, kv_dtype="bf16"),  # MQA, several queries, pages of 11
    case(l=1, batch=1, hq=4, hkv=4),  # one cached token
]


@pytest.fixture(scope="module")
def impl(registry):
    return registry.implementations("decode")["flashinfer"]


@pytest.fixture(scope="module")
def module(impl):
    return sys.modules[impl.make.__module__]


@pytest.fixture(scope="module")
def decode(registry):
    return registry.suite("decode")


def _shares_storage(view, base) -> bool:
    return view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()


def _sequence(pages, indptr, indices, last, b: int):
    """Sequence b's cache, [Hkv, kv_len, d], gathered from HND pages as FlashInfer addresses them."""
    chosen = indices[indptr[b]:indptr[b + 1]].long()
    full = torch.cat([pages[i] for i in chosen], dim=1)  # pages[i]: [Hkv, page, d]
    page = pages.shape[2]
    return full[:, : (len(chosen) - 1) * page + int(last[b])]


def _attend(q, k, v, causal: bool):
    """q [n, Hq, d] against k, v [Hkv, L, d] in fp32; FlashInfer's causal mask is aligned bottom right."""
    hq, hkv = q.shape[1], k.shape[0]
    k, v = (t.float().repeat_interleave(hq // hkv, dim=0) for t in (k, v))
    s = torch.einsum("nhd,hld->hnl", q.float(), k) / q.shape[-1] ** 0.5
    if causal:
        n, length = q.shape[0], k.shape[1]
        visible = torch.arange(length).unsqueeze(0) <= torch.arange(length - n, length).unsqueeze(1)
        s = s.masked_fill(~visible, float("-inf"))
    return torch.einsum("hnl,hld->nhd", s.softmax(-1), v).to(q.dtype)


def _fake_flashinfer(calls: list, honour_causal: bool = True):
    class Wrapper:
        def __init__(self, workspace, kv_layout="NHD", use_tensor_cores=False, backend="auto"):
            assert kv_layout == "HND"
            self.use_tensor_cores, self.backend = use_tensor_cores, backend

        def run(self, q, paged_kv_cache, out=None):
            k_pages, v_pages = paged_kv_cache
            assert k_pages.shape[2] == self.page_size and out is not None
            calls.append({"kind": self.kind, "q": q, "k": k_pages, "v": v_pages, "out": out,
                          "use_tensor_cores": self.use_tensor_cores, "backend": self.backend})
            for b in range(len(self.last)):
                k, v = (_sequence(p, self.indptr, self.indices, self.last, b) for p in (k_pages, v_pages))
                rows = slice(int(self.qo_indptr[b]), int(self.qo_indptr[b + 1]))
                out[rows] = _attend(q[rows], k, v, self.causal and honour_causal)
            return out

    class Decode(Wrapper):
        kind = "decode"

        def plan(self, indptr, indices, last, hq, hkv, d, page_size, q_data_type=None, kv_data_type=None):
            self.indptr, self.indices, self.last, self.page_size = indptr, indices, last, page_size
            self.qo_indptr, self.causal = torch.arange(len(last) + 1), False

    class Prefill(Wrapper):
        kind = "prefill"

        def plan(self, qo_indptr, indptr, indices, last, hq, hkv, d, page_size, causal=False,
                 q_data_type=None, kv_data_type=None):
            self.indptr, self.indices, self.last, self.page_size = indptr, indices, last, page_size
            self.qo_indptr, self.causal = qo_indptr, causal

    fake = types.ModuleType("flashinfer")
    fake.BatchDecodeWithPagedKVCacheWrapper = Decode
    fake.BatchPrefillWithPagedKVCacheWrapper = Prefill
    fake.__version__ = "0+stand-in"
    return fake


@pytest.fixture
def fake_flashinfer(monkeypatch, module):
    calls = []
    monkeypatch.setitem(sys.modules, "flashinfer", _fake_flashinfer(calls))
    monkeypatch.setattr(module, "WORKSPACE_BYTES", 1024)  # the stand-in keeps nothing there
    return calls


def test_it_is_registered_as_an_optional_cuda_peer(impl):
    assert impl.backend == "flashinfer" and impl.needs.cuda and "flashinfer" in impl.needs.modules
    assert impl.params == {"tensor_cores": "auto", "page_size": 16}


@pytest.mark.parametrize("c", CASES, ids=lambda c: c.key)
def test_glue_is_checked_like_every_kernel(decode, impl, module, fake_flashinfer, c):
    verdict = check(decode, impl, c, "cpu", seed=7, trials=4)
    assert verdict.ok, verdict.reason
    assert recheck(verdict, "cpu") == ""  # the closure reads the inputs refilled in place
    inputs, out = verdict.last[1], verdict.last[2]
    call = fake_flashinfer[-1]
    page = module.page_size_for(c.l, 16)
    assert call["k"].shape[1:] == (c.hkv, page, c.d)
    # the cache is read in place: the pages are views of the suite's K and V
    assert _shares_storage(call["k"], inputs["k"]) and _shares_storage(call["v"], inputs["v"])
    if c.q == 1:
        assert call["kind"] == "decode"
        assert _shares_storage(call["q"], inputs["q"]) and _shares_storage(call["out"], out)
        assert call["use_tensor_cores"] == (c.hq // c.hkv >= 4)
    else:
        assert call["kind"] == "prefill" and call["backend"] == "fa2"
        assert call["q"].shape == (c.batch * c.q, c.hq, c.d)
    fn = verdict.last[0]
    assert fn.config == {"flashinfer": "0+stand-in", "kernel": module.kernel_name(c, "auto"), "page_size": page}


@pytest.mark.parametrize("tensor_cores, expected", [("on", True), ("off", False)])
def test_tensor_cores_param(decode, impl, fake_flashinfer, tensor_cores, expected):
    c = case(hq=8, hkv=1)
    verdict = check(decode, impl, c, "cpu", seed=1, trials=1, params={"tensor_cores": tensor_cores, "page_size": 16})
    assert verdict.ok, verdict.reason
    assert fake_flashinfer[-1]["use_tensor_cores"] is expected


def test_page_size_param_is_any_divisor(decode, impl, fake_flashinfer):
    c = case(l=96)
    for page_size, page in ((1, 1), (7, 6), (96, 96), (1000, 96)):
        verdict = check(decode, impl, c, "cpu", seed=2, trials=1, params={"tensor_cores": "auto", "page_size": page_size})
        assert verdict.ok, verdict.reason
        assert fake_flashinfer[-1]["k"].shape[2] == page


def test_several_queries_on_cuda_cores_is_a_skip(decode, impl, fake_flashinfer):
    c = case(l=48, q=2)
    inputs = decode.make_inputs(c, seed=0, device="cpu")
    with pytest.raises(Unsupported, match="one query a sequence"):
        impl.make(c, inputs, decode.make_output(c, inputs), tensor_cores="off", page_size=16)


def test_a_wrong_mask_fails_the_check(decode, impl, module, monkeypatch):
    """The check the stand-in relies on is real: several new queries attending the whole cache (the
    causal mask dropped) is a FAIL."""
    monkeypatch.setitem(sys.modules, "flashinfer", _fake_flashinfer([], honour_causal=False))
    monkeypatch.setattr(module, "WORKSPACE_BYTES", 1024)
    assert not check(decode, impl, case(l=48, q=3), "cpu", seed=1, trials=1).ok


def test_pages_are_views_inside_the_cache(module):
    for batch, hkv, length, d, largest in ((1, 1, 1, 8, 16), (2, 3, 17, 8, 16), (3, 2, 4096, 8, 16), (2, 2, 1000, 8, 16)):
        c = case(l=length, batch=batch, hkv=hkv, hq=hkv, d=d)
        cache = torch.randn(batch, hkv, length, d)
        page = module.page_size_for(length, largest)
        assert length % page == 0 and page <= largest
        pages = module.as_pages(cache, page)  # as_strided refuses a view past the memory's end
        indptr, indices, last = module.page_table(c, page, "cpu")
        assert indices.dtype == indptr.dtype == last.dtype == torch.int32
        for b in range(batch):
            assert torch.equal(_sequence(pages, indptr, indices, last, b), cache[b])
    assert module.page_size_for(131072, 16) == 16 and module.page_size_for(4099, 16) == 1


def test_absent_package_is_a_skip_naming_it(impl, monkeypatch):
    monkeypatch.setattr("importlib.util.find_spec", lambda mod: None if mod == "flashinfer" else object())
    assert skip_reason(impl, case(), "cuda", (9, 0)) == "needs flashinfer (not installed)"
    assert skip_reason(impl, case(), "cpu", None) == "needs a CUDA device"


@pytest.mark.parametrize("c, words", [
    (case(kv_dtype="int8"), "int8 cache: FlashInfer's quantized KV caches are fp8"),
    (case(kv_dtype="int4"), "int4 cache: FlashInfer's quantized KV caches are fp8"),
    (case(kv_dtype="int2"), "int2 cache: FlashInfer's quantized KV caches are fp8"),
    (case(l="17+40", batch=2), "a ragged batch (one length a sequence): this wrapper pages one length"),
    (case(d=96), "d=96: FlashInfer's attention kernels are built for head dims 64, 128, 256"),
    (case(l=2**21, batch=128, hkv=8, hq=8), "the cache is too large for FlashInfer's page table"),
])
def test_unsupported_cases_are_skips_with_the_reason(impl, monkeypatch, c, words):
    monkeypatch.setattr("importlib.util.find_spec", lambda mod: object())
    reason = skip_reason(impl, c, "cuda", (9, 0))
    assert reason and reason.startswith(words) and "\n" not in reason
    assert skip_reason(impl, case(d=128), "cuda", (9, 0)) is None


def test_explain_says_the_call_and_the_pages(module, impl):
    figures = impl.explain(case(l=4096, hq=32, hkv=8, d=128), dict(impl.params))
    assert figures["FlashInfer call"] == "BatchDecodeWithPagedKVCacheWrapper (tensor cores)"
    assert figures["page size"].startswith("16 tokens") and figures["pages a sequence"].startswith("256,")
    assert "not runnable" in impl.explain(case(kv_dtype="int4"), dict(impl.params))["configuration"]
