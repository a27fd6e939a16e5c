"""A serving library's peer: FlashInfer's batch decode attention (package ``flashinfer-python``).

It is FlashInfer's call for a decode step of a batch: ``BatchDecodeWithPagedKVCacheWrapper``, planned
once in set-up for the batch's page table and lengths (``plan``), then ``run`` for the step, the only
call that is timed. FlashInfer splits a long cache across thread blocks (split-KV, its partial results
merged by log-sum-exp in the 128 MB workspace it is given) in whole pages: a cache of one page a
sequence would not be split at all, and leave most SMs idle at batch 1. So the cache is paged as a
serving stack pages it, in pages of ``--param page_size`` tokens (16 by default, the size of
FlashInfer's own examples and benchmark).

The cache is read where it is, without a copy: K and V are handed over as FlashInfer's ``HND`` pages,
[pages, Hkv, page, d], which it addresses through the tensors' strides. The suite's B x Hkv x L x d
memory is viewed as pages starting at every token (page stride d, head stride L·d, token stride d:
overlapping in the view), and the page table, built in set-up, names the L / page pages of each
sequence. Each page FlashInfer reads is then a page x d block of one head, as in its own paged cache.
A partial last page would reach past the end of the memory in that view (which torch refuses), so
the page size is the largest divisor of L that is at most ``page_size``: 16 for L = 4096 or 131072, 10
for 1000, 1 (a token a page, as SGLang pages) for a prime L such as 17 or 4099. ``run.config`` and
``kbench explain`` say which.

``--param tensor_cores``: ``off`` runs FlashInfer's decode kernel on CUDA cores, ``on`` its
tensor-core decode (the prefill kernels, each K/V head's group of query heads as the rows of one
product), ``auto`` (the default) takes tensor cores for a GQA group of 4 query heads or more: its
documentation says they are faster for large groups, and its own decode benchmark runs them at a
group of 8; the wrapper's default is off.

Several new queries (speculative decoding) are more than the decode wrapper's one query a sequence,
so they go to ``BatchPrefillWithPagedKVCacheWrapper`` with ``causal=True`` over the same pages:
FlashInfer aligns its causal mask to the bottom right (query i sees the keys up to L - Q + i, the
suite's mask). It runs on the ``fa2`` backend, the one FlashInfer's own tensor-core decode uses for
fp16 and bf16 (``auto`` would take FA3 on Hopper). FlashInfer takes queries as [tokens, heads, d]:
the suite's B x Hq x Q x d queries are copied to that layout in every call (timed: B·Q·Hq·d
elements, a small launch beside the cache read), and the output is returned as a B x Hq x Q x d
view of FlashInfer's own. One query needs neither: [B, Hq, d] is a view of the suite's queries and
of its output buffer, which FlashInfer writes.

An int8 or int4 cache is a SKIP: FlashInfer's quantized KV caches are fp8 (e4m3/e5m2, one scale a
tensor) and NVFP4 (e2m1 with fp8 scales a 16-element block); none reads integer codes with a scale
and a minimum a group. Head dims other than 64, 128 and 256 (those FlashInfer lists) are SKIPs too.
"""

from pathlib import Path

from kbench.loader import load_helper
from kbench.registry import Unsupported, implementation

_flashinfer = load_helper(Path(__file__).parent.parent / "_flashinfer.py")
seq_lengths = load_helper(Path(__file__).parent / "_lengths.py")

HEAD_DIMS = (64, 128, 256)
QUANTIZED = ("int8", "int4", "int2")
WORKSPACE_BYTES = 128 * 1024 * 1024  # the size FlashInfer recommends for its split-KV partial results
GROUP_FOR_TENSOR_CORES = 4
TENSOR_CORES = ("auto", "on", "off")
DEFAULT_PARAMS = {"tensor_cores": "auto", "page_size": 16}
INT32_MAX = 2**31 - 1
UINT32_MAX = 2**32 - 1


def page_size_for(length: int, largest: int) -> int:
    """The largest divisor of ``length`` that is at most ``largest``: the pages then end where the
    sequence ends, and the view of the cache as pages stays inside its memory."""
    return max(p for p in range(1, min(largest, length) + 1) if length % p == 0)


def uses_tensor_cores(case, tensor_cores: str) -> bool:
    if case.q > 1:  # FlashInfer's multi-query (prefill) kernels are its tensor-core ones
        return True
    if tensor_cores == "auto":
        return case.hq // case.hkv >= GROUP_FOR_TENSOR_CORES
    return tensor_cores == "on"


def kernel_name(case, tensor_cores: str) -> str:
    if case.q > 1:
        return "BatchPrefillWithPagedKVCacheWrapper (fa2, causal)"
    cores = "tensor cores" if uses_tensor_cores(case, tensor_cores) else "CUDA cores"
    return f"BatchDecodeWithPagedKVCacheWrapper ({cores})"


def as_pages(cache, page: int):
    """A contiguous B x Hkv x L x d cache as FlashInfer's HND pages, [pages, Hkv, page, d]: page g is the
    ``page`` tokens from token g of the memory (read as B·Hkv·L tokens of d elements), its head h the
    ``page`` tokens h·L tokens further on. A view: the pages overlap, and the page table names only
    those that start a page of a sequence; the last of them ends at the memory's end (page divides L)."""
    b, hkv, length, d = cache.shape
    count = (b - 1) * hkv * length + length - page + 1  # the last sequence's last page is page count - 1
    return cache.as_strided((count, hkv, page, d), (d, length * d, d, 1))


def page_table(case, page: int, device):
    """indptr, indices and last-page lengths (int32) of B sequences of L / page pages each, in the
    page numbering of :func:`as_pages`: page j of sequence b starts at token b·Hkv·L + j·page."""
    import torch

    pages = case.l // page
    starts = (torch.arange(case.batch, device=device).unsqueeze(1) * (case.hkv * case.l)
              + torch.arange(pages, device=device) * page)
    indptr = torch.arange(case.batch + 1, device=device) * pages
    last = torch.full((case.batch,), page, device=device)
    return indptr.int(), starts.flatten().int(), last.int()


def _supports(case):
    if seq_lengths.is_ragged(case):  # --l 1000+130000
        return "a ragged batch (one length a sequence): this wrapper pages one length for every sequence"
    if case.kv_dtype in QUANTIZED:
        return (f"{case.kv_dtype} cache: FlashInfer's quantized KV caches are fp8 (one scale a tensor) and NVFP4; "
                "none reads integer codes with a scale and minimum a group")
    if case.d not in HEAD_DIMS:
        return f"d={case.d}: FlashInfer's attention kernels are built for head dims {', '.join(map(str, HEAD_DIMS))}"
    if case.batch * case.hkv * case.l > INT32_MAX or case.l * case.d > UINT32_MAX:
        return ("the cache is too large for FlashInfer's page table over it: page numbers are int32 and the "
                "head stride (L·d elements) uint32")
    return None


def _page_size_reason(value: int) -> str | None:
    return None if value >= 1 else "is not a positive number of tokens"


def explain(case, params) -> dict:
    """`kbench explain decode --impl flashinfer`: FlashInfer's call and the pages it reads."""
    reason = _supports(case)
    if reason:
        return {"configuration": f"not runnable: {reason}"}
    page = page_size_for(case.l, params["page_size"])
    return {
        "FlashInfer call": kernel_name(case, params["tensor_cores"]),
        "page size": f"{page} token{'s' if page > 1 else ''}: the largest divisor of L up to {params['page_size']}",
        "pages a sequence": f"{case.l // page}, read in place as HND pages of the suite's cache",
    }


@implementation(
    "decode",
    "flashinfer",
    **_flashinfer.NEEDS,
    supports=_supports,
    params=dict(DEFAULT_PARAMS),
    allowed={"tensor_cores": TENSOR_CORES, "page_size": _page_size_reason},
    explain=explain,
    description="FlashInfer batch decode over the cache as HND pages, read in place (flashinfer-python; optional)",
)
def flashinfer_decode(case, inputs, out, tensor_cores=DEFAULT_PARAMS["tensor_cores"],
                      page_size=DEFAULT_PARAMS["page_size"]):
    import flashinfer
    import torch

    if case.q > 1 and tensor_cores == "off":
        raise Unsupported(f"q={case.q}: FlashInfer's CUDA-core decode kernel takes one query a sequence; "
                          "several run on its tensor-core (prefill) kernels")
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    if not (k.is_contiguous() and v.is_contiguous()):
        raise Unsupported("the page view needs the cache contiguous, B x Hkv x L x d")
    page = page_size_for(case.l, page_size)
    cache = (as_pages(k, page), as_pages(v, page))
    indptr, indices, last = page_table(case, page, q.device)
    workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=q.device)
    types = {"q_data_type": q.dtype, "kv_data_type": k.dtype}

    if case.q == 1:
        wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            workspace, kv_layout="HND", use_tensor_cores=uses_tensor_cores(case, tensor_cores))
        wrapper.plan(indptr, indices, last, case.hq, case.hkv, case.d, page, **types)
        rows, out_rows = q.select(2, 0), out.select(2, 0)  # [B, Hq, d]: views, FlashInfer's query layout

        def run():
            wrapper.run(rows, cache, out=out_rows)
    else:
        wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, kv_layout="HND", backend="fa2")
        qo_indptr = (torch.arange(case.batch + 1, device=q.device) * case.q).int()
        wrapper.plan(qo_indptr, indptr, indices, last, case.hq, case.hkv, case.d, page, causal=True, **types)
        tokens = torch.empty(case.batch, case.q, case.hq, case.d, dtype=q.dtype, device=q.device)
        result = torch.empty_like(tokens)
        flat_tokens, flat_result = (t.view(case.batch * case.q, case.hq, case.d) for t in (tokens, result))

        def run():
            tokens.copy_(q.transpose(1, 2))  # B x Hq x Q x d as FlashInfer's [tokens, heads, d]
            wrapper.run(flat_tokens, cache, out=flat_result)
            return result.transpose(1, 2)  # B x Hq x Q x d, a view

    return _flashinfer.compiled(run, q, kernel=kernel_name(case, tensor_cores), page_size=page)
