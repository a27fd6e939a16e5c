"""Attention at decode time: a few new queries against a long KV cache, O = softmax(Q Kᵀ · d^-½) V.

A step of LLM decoding attends Q new tokens (1, or a few under speculative decoding) of Hq query heads
to the L tokens already in the cache, whose Hkv key/value heads are shared by Hq / Hkv query heads
each (grouped-query attention; MQA when Hkv = 1). Query head h reads K/V head h // (Hq / Hkv). The Q
queries are the cache's last Q positions: query i sees the keys up to position L - Q + i.

A ragged batch (``--l 1000+130000``: one length a sequence, the batch their count) is a cache as long as
the longest sequence with each sequence's length beside it (the ``lengths`` input): sequence b attends to
its first L_b tokens, the tokens past them drawn like the others, so a kernel that reads them is wrong.
The FLOPs and bytes count each sequence's own tokens.

It is the memory-bound half of inference: each cached element is used by Hq / Hkv · Q queries only, so
the floor is the cache read once at HBM speed. The fewest bytes are the cache (K and V) read once, plus
the queries read and the output written; the FLOPs are the two products, 4·B·Hq·Q·L·d.

The correctness trials draw from four of the distributions in suites/_common/score_distributions.py:
``normal``, ``large-scores`` (a softmax that does not subtract the row's maximum overflows),
``outliers`` (outlier channels of Q and K, large value rows) and ``growing``: scores that grow along
the cache to about 16·√d at its last token, so the newest keys dominate every row, and a piece of the
cache whose partial result is dropped or misweighted in the combine moves the answer, as does a tail
tile left out.

The tolerance is precision-aware (:meth:`Decode.plain`): the plain computation in the cache's type
(S = QKᵀ·scale rounded to it, the softmax in fp32, P rounded to it, fp32 accumulation); over a
quantized cache also the cache rounded to fp16 with the rest in fp32, the bound taking the larger of
the two errors.

**Quantized caches** (``--kv-dtype int8``, ``int4`` or ``int2``): each cached element is an 8-, 4- or 2-bit code c
with x = c · scale + minimum, the scale and minimum fp16 per group of ``--group`` elements: for K along
the tokens (one pair per channel for every ``group`` tokens: keys' outlier channels keep their own
range), for V along the channels (one pair per token for every ``group`` channels). int4 codes are
packed two a byte along the channels: byte j of a token holds channel 2j in its low nibble and
channel 2j + 1 in its high one; int2 codes four a byte, channel 4j in the lowest two bits. The queries and the output
are fp16. The reference is float64 attention over the dequantized cache, and the plain computation is
the fp16 one over the cache dequantized to fp16: a kernel is judged against what the quantized cache
holds, not against the values before quantization. The fewest bytes are the codes and the scales and
minimums, read once. (The format is defined in suites/_common/kv_quantization.py, which the kv-quantize
suite's kernels write.)

What the quantization itself costs is kept apart from the kernels' errors (:meth:`Decode.input_error`):
for each input distribution, exact attention over the dequantized cache against exact attention over
the values that were quantized, in the record's ``correctness.input_error.quantization`` and in a
line under the case's table. An fp16 or bf16 cache has none: it is the input itself.
"""

from pathlib import Path

from kbench.dtypes import ELEMENT_BYTES
from kbench.errors import UserError
from kbench.loader import load_helper
from kbench.precision import strict_matmul
from kbench.registry import suite
from kbench.suite import Axis, Case, Suite

COMMON = Path(__file__).resolve().parent.parent / "_common"
shape_inputs = load_helper(COMMON / "score_distributions.py").shape_inputs
# The quantized cache's format, shared with the kv-quantize suite (whose kernels write such caches).
kv_quantization = load_helper(COMMON / "kv_quantization.py")
quantize, unpacked, dequantize = kv_quantization.quantize, kv_quantization.unpacked, kv_quantization.dequantize
QUANTIZED = kv_quantization.QUANTIZED  # cache type -> bits a code
sequences = load_helper(COMMON / "sequence_lengths.py")
parse_lengths, is_ragged, sequence_lengths = sequences.parse_lengths, sequences.is_ragged, sequences.sequence_lengths

KV_DTYPES = ("fp16", "bf16", "int8", "int4", "int2")
DISTRIBUTIONS = ("normal", "large-scores", "outliers", "growing")
DEFAULT_GROUP = 32  # elements sharing a scale and minimum; also the group a 16-bit cache's cases carry


@suite
class Decode(Suite):
    name = "decode"
    description = "Decode attention: Q new queries x Hq heads against an L-token KV cache of Hkv heads (GQA)"
    axes = (
        Axis("l", str, ("4096",), "cached tokens L (the KV cache's length); 1000+130000: a ragged batch, "
             "one length a sequence"),
        Axis("q", int, (1,), "new queries per sequence Q (1: plain decoding; more: speculative)"),
        Axis("batch", int, (1,), "sequences B"),
        Axis("hq", int, (32,), "query heads Hq"),
        Axis("hkv", int, (8,), "key/value heads Hkv (Hq a multiple of it; 1: MQA)"),
        Axis("d", int, (128,), "head dimension d"),
        Axis("kv_dtype", str, ("fp16",), "element type of the cache (and of the queries and output; fp16 "
             "for a quantized cache)", choices=KV_DTYPES),
        Axis("group", int, (DEFAULT_GROUP,), "elements sharing a scale in a quantized cache (K: along tokens, V: along "
             "channels)"),
    )
    baseline = "sdpa"
    distributions = DISTRIBUTIONS
    trials = len(distributions)
    # Not used to judge (the plain computation sets the bound); kept for records' atol/rtol fields.
    tolerances = {dtype: (0.0, 0.0) for dtype in ("fp16", "bf16")}

    def validate(self, case):
        lengths = parse_lengths(case.l)
        if len(lengths) > 1 and case.batch not in (1, len(lengths)):
            raise UserError(f"--l {case.l} is a ragged batch of {len(lengths)} sequences: leave --batch at 1 "
                            f"or give {len(lengths)} (got {case.batch})")
        for axis in ("q", "batch", "hq", "hkv"):
            if case.values[axis] <= 0:
                raise UserError(f"--{axis} must be positive (got {case.values[axis]})")
        if case.hq % case.hkv:
            raise UserError(f"--hq {case.hq} is not a multiple of --hkv {case.hkv}: each key/value head "
                            "serves the same number of query heads")
        if case.q > min(lengths):
            shortest = f" (the shortest sequence of {case.l})" if len(lengths) > 1 else ""
            raise UserError(f"--q {case.q} is more than --l {min(lengths)}{shortest}: the new queries are the "
                            "cache's last tokens")
        if not (8 <= case.d <= 256 and case.d % 8 == 0):
            raise UserError(f"--d {case.d} is not supported: head dim must be a multiple of 8 up to 256")
        if case.group <= 0:
            raise UserError(f"--group must be positive (got {case.group})")

    def canonical(self, case):
        """The case as it runs: L a number, or a ragged batch's lengths joined by + with --batch their
        count; a 16-bit cache, which has no groups, at the default group, so that `--kv-dtype fp16,int4
        --group 32,128` runs the fp16 cache once."""
        lengths = parse_lengths(case.l)
        values = {**case.values, "l": lengths[0]} if len(lengths) == 1 else \
            {**case.values, "l": "+".join(map(str, lengths)), "batch": len(lengths)}
        if case.kv_dtype not in QUANTIZED:
            values["group"] = DEFAULT_GROUP
        return Case(values)

    def dtype(self, case):
        """The queries' and output's type (a quantized cache's are fp16), which picks the peaks."""
        return "fp16" if case.kv_dtype in QUANTIZED else case.kv_dtype

    def make_inputs(self, case, seed, device, distribution="normal"):
        return self._inputs(case, *self._values(case, seed, distribution, device), device)

    def _values(self, case, seed, distribution, device):
        """Q, K and V as drawn (float32, on ``device``), before any rounding to the cache's type.

        Drawn on the device that runs the check, unlike the suites with smaller inputs, which draw on
        the CPU so a seed gives the same values everywhere: a cache of 8 x 8 x 128k x 128 is 2 x 10^9
        float32 draws, seconds on a GPU but minutes on a CPU, and every implementation's check draws
        each input distribution anew (and quantizes it, here too)."""
        import torch

        gen = torch.Generator(device=device).manual_seed(seed)
        q = torch.randn(case.batch, case.hq, case.q, case.d, generator=gen, device=device)
        k, v = (torch.randn(case.batch, case.hkv, max(sequence_lengths(case)), case.d, generator=gen, device=device)
                for _ in range(2))
        shape_inputs(q, k, v, distribution, gen)
        return q, k, v

    def _inputs(self, case, q, k, v, device):
        """What the kernels get of the draws: Q, K and V in the case's type, or fp16 Q and the quantized cache."""
        from kbench.dtypes import torch_dtype

        import torch

        dtype = torch_dtype(self.dtype(case))
        # A ragged batch: the cache as long as its longest sequence, each sequence's length beside it (the
        # tokens past a sequence's length are drawn too, and a kernel that reads them gets another answer)
        lengths = ({"lengths": torch.tensor(sequence_lengths(case), dtype=torch.int32, device=device)}
                   if is_ragged(case) else {})
        if case.kv_dtype in QUANTIZED:
            bits = QUANTIZED[case.kv_dtype]
            cache = {**quantize(k, case.group, along=-2, bits=bits, name="k"),
                     **quantize(v, case.group, along=-1, bits=bits, name="v")}
            return {"q": q.to(device=device, dtype=dtype), **{name: t.to(device) for name, t in cache.items()},
                    **lengths}
        return {**{name: t.to(device=device, dtype=dtype) for name, t in (("q", q), ("k", k), ("v", v))}, **lengths}

    def input_error(self, case, seed, device, distribution="normal"):
        """What quantizing the cache costs, apart from any kernel's error: exact (float64) attention over
        the dequantized cache against exact attention over the values that were quantized (the
        float32 draws), with the same fp16 queries. An fp16 or bf16 cache has none: it is the problem's
        input itself, and the reference is taken over it, so nothing is lost before a kernel reads it."""
        if case.kv_dtype not in QUANTIZED:
            return {}
        import torch

        q, k, v = self._values(case, seed, distribution, device)
        inputs = self._inputs(case, q, k, v, device)  # the very cache the check's trial of this seed gets
        queries = inputs["q"].to(torch.float64)
        # One float64 copy of the cache at a time: the exact answer first, then the dequantized one's.
        exact = sequences.by_sequence(decode_attention, queries, k.to(device).double(), v.to(device).double(),
                                      sequences.ragged_lengths(case), softmax_dtype=torch.float64)
        del k, v
        err = float((self.reference(case, inputs) - exact).abs().max())
        scale = float(exact.abs().max())
        return {"quantization": {"max_abs_err": err, "max_rel_err": err / scale if scale > 0 else err}}

    def make_output(self, case, inputs):
        import torch

        return torch.empty_like(inputs["q"])

    def cache(self, case, inputs, dtype):
        """K and V as ``dtype`` (a quantized cache dequantized)."""
        if case.kv_dtype in QUANTIZED:
            bits = QUANTIZED[case.kv_dtype]
            return (dequantize(inputs, "k", case.group, along=-2, dtype=dtype, bits=bits),
                    dequantize(inputs, "v", case.group, along=-1, dtype=dtype, bits=bits))
        return inputs["k"].to(dtype), inputs["v"].to(dtype)

    def reference(self, case, inputs):
        import torch

        k, v = self.cache(case, inputs, torch.float64)
        return sequences.by_sequence(decode_attention, inputs["q"].to(torch.float64), k, v,
                                     sequences.ragged_lengths(case), softmax_dtype=torch.float64)

    def plain(self, case, inputs):
        """The plain fp16 (bf16) computation; over a quantized cache also the same cache rounded to fp16
        with the rest in fp32. Rounding the dequantized K and V to fp16 is what every kernel that feeds
        them to fp16 tensor cores does, and it can cost a lot where the softmax is sharp and two keys
        nearly tie (outlier channels: scores of several hundred): the plain computation's own rounding
        of S to fp16 may cancel part of that by chance, on one draw (0.02 against the 0.11 that torch
        SDPA and both kernels made, all alike, at 32k tokens), and the bound takes the larger error."""
        import torch

        q = inputs["q"]
        k, v = self.cache(case, inputs, q.dtype)
        with strict_matmul():
            lengths = sequences.ragged_lengths(case)
            plain = sequences.by_sequence(decode_attention, q, k, v, lengths, softmax_dtype=torch.float32)
            if case.kv_dtype not in QUANTIZED:
                return plain
            return plain, sequences.by_sequence(decode_attention, q, k, v, lengths, softmax_dtype=torch.float32,
                                                compute_dtype=torch.float32)

    def flops(self, case):
        return 4.0 * case.hq * case.q * sum(sequence_lengths(case)) * case.d

    def cache_bytes(self, case) -> float:
        """The KV cache's bytes: the elements, or a quantized cache's codes and its fp16 scale and
        minimum of every group."""
        lengths = sequence_lengths(case)  # a ragged batch: each sequence's own tokens, not the padding
        elements = case.hkv * sum(lengths) * case.d
        if case.kv_dtype not in QUANTIZED:
            return 2.0 * elements * ELEMENT_BYTES[case.kv_dtype]
        codes = elements * QUANTIZED[case.kv_dtype] / 8
        k_groups = case.hkv * sum(-(-n // case.group) for n in lengths) * case.d
        v_groups = case.hkv * sum(lengths) * -(-case.d // case.group)
        return 2.0 * codes + 4.0 * (k_groups + v_groups)

    def min_bytes(self, case):
        e = ELEMENT_BYTES[self.dtype(case)]
        return self.cache_bytes(case) + 2.0 * case.batch * case.hq * case.q * case.d * e  # Q read, O written

    def explain(self, case):
        figures = super().explain(case)
        group = case.hq // case.hkv
        cache = self.cache_bytes(case)
        figures.update({
            "query heads per key/value head (GQA group)": f"{group}",
            "rows of a tile per key/value head (group x new queries)": f"{group * case.q}",
            "cache bytes per token (K and V, all heads, scales included)": f"{cache / sum(sequence_lengths(case)):,.1f}",
            "KV cache bytes (read once)": f"{cache:,.0f}",
        })
        if is_ragged(case):
            figures["cached tokens of each sequence"] = (", ".join(map(str, sequence_lengths(case)))
                                                         + " (a ragged batch, the cache as long as the longest)")
        if case.kv_dtype in QUANTIZED:
            fp16 = self.cache_bytes(Case({**case.values, "kv_dtype": "fp16"}))
            figures["against an fp16 cache"] = f"{fp16 / cache:.2f}x fewer bytes"
        return figures

    def summary_lines(self, records):
        """Under a quantized case's table, what the quantization itself costs: the max err column is each
        kernel's error against the dequantized cache, which leaves this one out."""
        errors = [r.correctness.input_error["quantization"] for r in records
                  if r.correctness is not None and "quantization" in r.correctness.input_error]
        if not errors:
            return []
        worst = max(e["max_abs_err"] for e in errors)
        relative = max(e["max_rel_err"] for e in errors)
        where = max(((d["max_abs_err"], name) for e in errors for name, d in e.get("distributions", {}).items()),
                    default=(0.0, ""))[1]
        return [f"quantization error (exact attention, dequantized cache vs unquantized): {worst:.2e} max abs, "
                f"{100 * relative:.2g} % of the largest output" + (f", worst on {where} inputs" if where else ""),
                "(the max err column is each kernel's error against the dequantized cache)"]

    def run_lines(self, records):
        """Each quantized cache's calls against the fastest fp16 call of the same shape (L, Q, B, heads, d)
        in the run, beside the speed-up its fewer bytes allow (the fp16 cache's bytes over its own): how
        near a low-bit kernel comes to what reading fewer bytes can give. The ratio's distribution-free
        95 % interval is that of two calls of one case (kbench.stats.speedup_interval); the two cases ran
        one after the other rather than interleaved, so a drift of the clocks between them is not in it."""
        from kbench.report import format_time, speedup_cell
        from kbench.stats import speedup_interval

        timed = [r for r in records if r.ok and r.case.get("kv_dtype")]
        fastest_fp16 = {}
        for r in timed:
            if r.case["kv_dtype"] == "fp16" and (_shape(r) not in fastest_fp16 or r.median < fastest_fp16[_shape(r)].median):
                fastest_fp16[_shape(r)] = r
        lines = []
        for shape, base in fastest_fp16.items():
            quantized = sorted((r for r in timed if _shape(r) == shape and r.case["kv_dtype"] in QUANTIZED),
                               key=lambda r: (-QUANTIZED[r.case["kv_dtype"]], r.case["group"], r.median))
            if not quantized:
                continue
            lines.append(", ".join(f"{axis}={value}" for axis, value in zip(SHAPE, shape))
                         + f": the fastest fp16 call, {base.name}, {format_time(base.median)}")
            fp16_bytes = self.cache_bytes(Case(base.case))
            for r in quantized:
                limit = fp16_bytes / self.cache_bytes(Case(r.case))
                lines.append(f"  {r.case['kv_dtype']} in groups of {r.case['group']}, {r.name}: "
                             f"{format_time(r.median)}, "
                             f"{speedup_cell(base.median / r.median, speedup_interval(base.timing.samples, r.timing.samples))}"
                             f" ({limit:.2f}x fewer bytes)")
        return lines


SHAPE = ("l", "q", "batch", "hq", "hkv", "d")  # what a quantized case shares with the fp16 case it is compared to


def _shape(record) -> tuple:
    return tuple(record.case[axis] for axis in SHAPE)


def visible_mask(n_queries: int, n_keys: int, device):
    """True where new query i (the cache's position n_keys - n_queries + i) may see key j; None when
    every query sees every key (one query)."""
    import torch

    if n_queries == 1:
        return None
    positions = torch.arange(n_keys - n_queries, n_keys, device=device).unsqueeze(-1)
    return torch.arange(n_keys, device=device).unsqueeze(0) <= positions


def decode_attention(q, k, v, softmax_dtype, compute_dtype=None):
    """softmax(Q Kᵀ · d^-½) V with K/V head h // group for query head h, in the inputs' type (or
    ``compute_dtype``: the products and P in it, the output rounded to the inputs' type), the softmax in
    ``softmax_dtype`` and its result rounded back to the type of the products. One K/V head at a time,
    its query heads and queries as the rows of one product (and one head's cache at a time converted)."""
    import torch

    b, hq, nq, d = q.shape
    hkv, n = k.shape[1], k.shape[2]
    group = hq // hkv
    mask = visible_mask(nq, n, q.device)
    dtype = compute_dtype or q.dtype
    out = torch.empty_like(q)
    for h in range(hkv):
        rows = q[:, h * group:(h + 1) * group].reshape(b, group * nq, d).to(dtype)
        s = torch.matmul(rows, k[:, h].to(dtype).transpose(-1, -2)) * d**-0.5
        if mask is not None:
            s = s.masked_fill(~mask.repeat(group, 1), float("-inf"))
        p = torch.softmax(s.to(softmax_dtype), dim=-1).to(dtype)
        out[:, h * group:(h + 1) * group] = torch.matmul(p, v[:, h].to(dtype)).reshape(b, group, nq, d).to(q.dtype)
    return out
