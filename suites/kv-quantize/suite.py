"""Writing a quantized KV cache: fp16 K and V in, the int8, int4 or int2 cache the decode suite reads out.

Each group of ``--group`` elements (K along the tokens, one group per channel for every ``group``
tokens; V along the channels, one per token for every ``group`` channels) gets an fp16 minimum (its
smallest value) and an fp16 scale ((largest - smallest) / (2^bits - 1), rounded to fp16), and each
element the code round((x - minimum) / scale) against those stored fp16 values, clamped to the codes'
range; int4 codes two a byte along the channels (channel 2j low, 2j + 1 high), int2 codes four (channel
4j in the lowest two bits). The definition is the
decode suite's own, in suites/_common/kv_quantization.py: a cache written here is one decode's kernels
read.

A kernel writes the whole cache into one uint8 buffer, its tensors back to back (``views`` gives them
by the names decode's kernels take: k_codes, v_codes, k_scale, k_min, v_scale, v_min). The engine
checks one output tensor, and a cache is one allocation in practice too.

The reference is that definition in float64 (:func:`quantize` on the float64 values). The check, which
the suite makes itself (:meth:`KvQuantize.judge`), is exact but for rounding ties:

- minimums: exactly the group's smallest value (it is an fp16 input: nothing to round);
- scales: the fp16 rounding of the exact quotient, or its other fp16 neighbour where the quotient lies
  within a relative TIE of the midpoint between the two (a kernel dividing in fp32 and rounding to
  fp16 rounds twice);
- codes: against the kernel's own stored scale and minimum, the nearest code to the exact (x - minimum)
  / scale, or its other neighbour where that quotient lies within TIE of the midpoint (exact ties may
  go either way: half to even or half up, nothing in the format depends on it). Where a scale is 0 (a
  constant group, whose range underflows fp16) every code decodes to the minimum, and any is right.

TIE = 2^-20 (relative): an fp32 computation of the quotients, a few operations rounded to 24 bits each
(a reciprocal in place of a division, or the GPU's 2-ulp fp32 division, included), is within about 2^-22
of them; a code rounded the wrong way is half a code off. The record's max abs error is the largest
difference between what the result's cache and the reference's decode to (a tie taken the other way:
one scale), its relative error that over the largest |x|.

The FLOPs are none; the fewest bytes are fp16 K and V read once and the codes, scales and minimums
written once. The inputs are the decode suite's K and V draws (``normal``, and ``outliers``: outlier
channels of K, large value rows of V) rounded to fp16.
"""

from pathlib import Path

from kbench.errors import UserError
from kbench.loader import load_helper
from kbench.registry import suite
from kbench.suite import Axis, Suite

COMMON = Path(__file__).resolve().parent.parent / "_common"
shape_inputs = load_helper(COMMON / "score_distributions.py").shape_inputs
kv = load_helper(COMMON / "kv_quantization.py")

DISTRIBUTIONS = ("normal", "outliers")
TIE = 2.0**-20  # relative distance to a rounding midpoint within which either neighbour is right


@suite
class KvQuantize(Suite):
    name = "kv-quantize"
    description = "Write a quantized KV cache: fp16 K/V to int8, int4 or int2 codes with an fp16 scale and minimum a group"
    axes = (
        Axis("l", int, (4096,), "tokens L"),
        Axis("batch", int, (1,), "sequences B"),
        Axis("hkv", int, (8,), "key/value heads Hkv"),
        Axis("d", int, (128,), "head dimension d"),
        Axis("kv_dtype", str, ("int8",), "the cache's codes", choices=tuple(kv.QUANTIZED)),
        Axis("group", int, (32,), "elements sharing a scale (K: along tokens, V: along channels)"),
    )
    baseline = "torch"
    distributions = DISTRIBUTIONS
    trials = len(distributions)
    # Not used to judge (judge() does); kept for records' atol/rtol fields.
    tolerances = {"fp16": (0.0, 0.0)}

    def validate(self, case):
        for axis in ("l", "batch", "hkv", "group"):
            if case.values[axis] <= 0:
                raise UserError(f"--{axis} must be positive (got {case.values[axis]})")
        # The decode suite's head dims, so that every cache written here is one it reads.
        if not (8 <= case.d <= 256 and case.d % 8 == 0):
            raise UserError(f"--d {case.d} is not supported: head dim must be a multiple of 8 up to 256")

    def dtype(self, case):
        """The inputs' type, which picks the peaks (a memory kernel: the bandwidth)."""
        return "fp16"

    def bits(self, case) -> int:
        return kv.QUANTIZED[case.kv_dtype]

    def layout(self, case) -> dict:
        """The cache's tensors in the output buffer: name -> (shape, bytes an element)."""
        return kv.cache_layout(case.batch, case.hkv, case.l, case.d, case.group, self.bits(case))

    def make_inputs(self, case, seed, device, distribution="normal"):
        import torch

        gen = torch.Generator(device=device).manual_seed(seed)
        # Drawn on the device that runs the check, as the decode suite's caches are (a long cache is
        # minutes of draws on a CPU); the shaping wants queries too, which are dropped.
        k, v = (torch.randn(case.batch, case.hkv, case.l, case.d, generator=gen, device=device) for _ in range(2))
        shape_inputs(torch.zeros(case.batch, 1, 1, case.d, device=device), k, v, distribution, gen)
        return {"k": k.to(dtype=torch.float16), "v": v.to(dtype=torch.float16)}

    def make_output(self, case, inputs):
        import torch

        return torch.empty(kv.layout_bytes(self.layout(case)), dtype=torch.uint8, device=inputs["k"].device)

    def reference(self, case, inputs):
        """The cache the definition writes, quantized from the float64 values."""
        import torch

        out = torch.empty(kv.layout_bytes(self.layout(case)), dtype=torch.uint8, device=inputs["k"].device)
        parts = kv.views(out, self.layout(case))
        for name in ("k", "v"):
            stored = kv.quantize(inputs[name].to(torch.float64), case.group, kv.ALONG[name], self.bits(case), name)
            for part, tensor in stored.items():
                parts[part].copy_(tensor)
        return out

    def judge(self, case, result, ref, inputs):
        import torch

        result = result.to(ref.device)
        if torch.equal(result, ref):  # the usual case: every byte the reference's
            return "", 0.0, 0.0
        got, want = kv.views(result, self.layout(case)), kv.views(ref, self.layout(case))
        worst, largest = 0.0, 0.0
        for name in ("k", "v"):
            x = inputs[name].to(ref.device)
            largest = max(largest, float(x.abs().max()))
            reason, err = self._judge_tensor(case, name, x, got, want)
            if reason:
                return reason, None, None
            worst = max(worst, err)
        return "", worst, worst / largest if largest > 0 else worst

    def _judge_tensor(self, case, name, x, got, want) -> tuple[str, float]:
        """Why K's or V's part of the cache is wrong (or ""), and the largest difference between what the
        result's and the reference's caches decode to. Only the elements whose code, or whose group's
        scale, differs from the reference's are looked at in float64: the others decode the same."""
        import torch

        bits, along, group = self.bits(case), kv.ALONG[name], case.group
        levels = 2**bits - 1
        g_min, g_scale = got[f"{name}_min"], got[f"{name}_scale"]
        w_min, w_scale = want[f"{name}_min"], want[f"{name}_scale"]
        wrong = g_min != w_min
        if wrong.any():
            return _first(f"{name} minimums", wrong, g_min, w_min, "are not the smallest value of their group"), 0.0
        scales_differ = g_scale != w_scale
        if scales_differ.any():
            low, high = kv.group_range(x, group, along)  # exact in fp16: they are elements
            exact = kv.exact_scale(low.double(), high.double(), bits)
            midpoint = (g_scale.double() + w_scale.double()) / 2
            wrong = scales_differ & ~((exact - midpoint).abs() <= TIE * exact)
            if wrong.any():
                return _first(f"{name} scales", wrong, g_scale, w_scale,
                              f"are not (largest - smallest) / {levels} of their group rounded to fp16"), 0.0
        codes, w_codes = kv.unpacked(got[f"{name}_codes"], bits), kv.unpacked(want[f"{name}_codes"], bits)
        suspect = codes != w_codes
        if scales_differ.any():  # codes are judged against the scale the kernel stored
            suspect |= kv.spread(scales_differ, group, along, x.shape[along])
        where = suspect.nonzero(as_tuple=True)
        if not where[0].numel():
            return "", 0.0
        in_groups = list(where)
        in_groups[along] = in_groups[along] // group
        in_groups = tuple(in_groups)
        scale, minimum = g_scale[in_groups].double(), g_min[in_groups].double()
        code = codes[where].double()
        quotient = (x[where].double() - minimum) / torch.where(scale > 0, scale, 1.0)
        nearest = quotient.round().clamp(0, levels)
        # Right: the nearest code, or the other one of a tie (the quotient at their midpoint, to TIE);
        # a constant group's codes all decode to its minimum.
        tie = (quotient - (code + nearest) / 2).abs() <= TIE * quotient.abs().clamp_min(1.0)
        wrong = (code != nearest) & ~tie & (scale > 0)
        if wrong.any():
            first = int(wrong.nonzero()[0])
            index = tuple(int(w[first]) for w in where)
            return (f"{int(wrong.sum())} of {codes.numel()} {name} codes are not the nearest code to (x - minimum) "
                    f"/ scale, nor a rounding tie's other one (first at {index}: {int(code[first])}, the quotient "
                    f"{float(quotient[first]):.6g})"), 0.0
        decoded = code * scale + minimum
        reference = w_codes[where].double() * w_scale[in_groups].double() + minimum
        return "", float((decoded - reference).abs().max())

    def flops(self, case):
        return 0.0

    def min_bytes(self, case):
        read = 2.0 * case.batch * case.hkv * case.l * case.d * 2  # fp16 K and V
        return read + kv.layout_bytes(self.layout(case))  # codes, scales and minimums written

    def explain(self, case):
        figures = super().explain(case)
        written = kv.layout_bytes(self.layout(case))
        figures.update({
            "fp16 K and V read": f"{2 * case.batch * case.hkv * case.l * case.d * 2:,}",
            "cache written (codes, scales and minimums)": f"{written:,}",
            "K groups (per channel, along the tokens)": f"{-(-case.l // case.group)} a channel",
            "V groups (per token, along the channels)": f"{-(-case.d // case.group)} a token",
        })
        return figures

    def summary_lines(self, records):
        """Why a right kernel's max err may not be 0."""
        if not any(r.ok and r.correctness is not None and r.correctness.max_abs_err for r in records):
            return []
        return ["max err: what the kernel's cache decodes to against the reference's; a rounding tie taken "
                "the other way (accepted) costs one scale"]


def _first(what: str, wrong, got, expected, rule: str) -> str:
    """How many of ``what`` are wrong and the first of them."""
    index = tuple(int(i) for i in wrong.nonzero()[0])
    return (f"{int(wrong.sum())} of {wrong.numel()} {what} {rule} (first at {index}: "
            f"{float(got[index]):.6g}, expected {float(expected[index]):.6g})")
