"""Scaled dot-product attention, forward: O = softmax(Q Kᵀ · d^-½ [+ causal mask]) V.

The default case is the one the FlashAttention walkthrough starts from: B=1, H=1, N=256, d=128, fp16.

The correctness trials draw from five input distributions in turn (``DISTRIBUTIONS``), because
N(0, 1) inputs never stress a softmax: their scores stay within a few units.

- ``normal``: Q, K, V ~ N(0, 1).
- ``large-scores``: Q and K scaled so the scores have a standard deviation of 48 (the largest of
  a 32 x 32 block pass 100): a softmax that does not subtract the row's maximum overflows fp32.
- ``outliers``: N(0, 1) with two feature channels of Q and K 12x larger (the outlier features of
  real activations), one query row 8x and three value rows 24x.
- ``near-constant``: every key nearly the same vector, so each row's softmax is close to uniform
  and its sum runs over every key tile; V a ramp along the keys, so a dropped tile moves the answer.
- ``growing``: scores that grow along the keys to about 16·√d at the last one: the running
  maximum of an online softmax moves at every tile, and under a causal mask every masked key
  scores higher than every visible one, so a leak through the mask's edge dominates the row.

The tolerance is precision-aware (:meth:`Attention.plain`, kbench.correctness): the plain
computation is the three-kernel one in the case's type (S = QKᵀ·scale rounded to it, the softmax
in fp32, P rounded to it, fp32 accumulation in both products).
"""

from pathlib import Path

from kbench.dtypes import ELEMENT_BYTES, NAMES, torch_dtype
from kbench.errors import UserError
from kbench.loader import load_helper
from kbench.precision import strict_matmul
from kbench.registry import suite
from kbench.suite import Axis, Suite

# The five distributions and what each stresses: suites/_common/score_distributions.py.
shape_inputs = load_helper(Path(__file__).resolve().parent.parent / "_common" / "score_distributions.py").shape_inputs


@suite
class Attention(Suite):
    name = "attention"
    description = "Attention forward pass (softmax(QKᵀ/√d)V), B x H x N x d"
    axes = (
        Axis("n", int, (256,), "sequence length N (queries = keys)"),
        Axis("d", int, (128,), "head dimension d"),
        Axis("batch", int, (1,), "batch size B"),
        Axis("heads", int, (1,), "number of heads H"),
        Axis("dtype", str, ("fp16",), "element type", choices=NAMES),
        Axis("causal", bool, (False,), "causal mask (key j > query i is masked)"),
    )
    baseline = "naive"
    distributions = ("normal", "large-scores", "outliers", "near-constant", "growing")
    trials = len(distributions)
    # Not used to judge (the plain computation sets the bound); kept for records' atol/rtol fields.
    tolerances = {"fp16": (0.0, 0.0), "bf16": (0.0, 0.0), "fp32": (0.0, 0.0)}

    def validate(self, case):
        for axis in ("n", "batch", "heads"):
            if case.values[axis] <= 0:
                raise UserError(f"--{axis} must be positive (got {case.values[axis]})")
        if not (1 <= case.d <= 256 and case.d % 8 == 0):
            raise UserError(f"--d {case.d} is not supported: head dim must be a multiple of 8 up to 256")

    def shape(self, case):
        return (case.batch, case.heads, case.n, case.d)

    def make_inputs(self, case, seed, device, distribution="normal"):
        import torch

        gen = torch.Generator(device="cpu").manual_seed(seed)
        # Drawn on the CPU so a seed gives the same inputs on every device.
        q, k, v = (torch.randn(self.shape(case), generator=gen, dtype=torch.float32) for _ in range(3))
        shape_inputs(q, k, v, distribution, gen)
        dtype = torch_dtype(case.dtype)
        return {name: t.to(device=device, dtype=dtype) for name, t in (("q", q), ("k", k), ("v", v))}

    def make_output(self, case, inputs):
        import torch

        return torch.empty(self.shape(case), dtype=torch_dtype(case.dtype), device=inputs["q"].device)

    def reference(self, case, inputs):
        import torch

        q, k, v = (inputs[name].to(torch.float64) for name in ("q", "k", "v"))
        return _attention(q, k, v, case.causal, softmax_dtype=torch.float64)

    def plain(self, case, inputs):
        """The three-kernel computation in the case's type: what the ``naive`` implementation does."""
        import torch

        with strict_matmul():
            return _attention(inputs["q"], inputs["k"], inputs["v"], case.causal, softmax_dtype=torch.float32)

    def flops(self, case):
        # Two matmuls of 2·N²·d each per head; causal does half the work.
        full = 4.0 * case.batch * case.heads * case.n * case.n * case.d
        return full / 2 if case.causal else full

    def min_bytes(self, case):
        # Q, K, V read once and O written once.
        return 4.0 * case.batch * case.heads * case.n * case.d * ELEMENT_BYTES[case.dtype]

    def naive_bytes(self, case):
        """HBM traffic of the three-kernel version: S = QKᵀ written and read back by the
        softmax, P written and read back by P·V, on top of Q, K, V in and O out.
        (The FlashAttention walkthrough's N = 2048 example: S and P are 8 MB each, 32 MB of traffic.)"""
        e = ELEMENT_BYTES[case.dtype]
        heads = case.batch * case.heads
        return self.min_bytes(case) + 4.0 * heads * case.n * case.n * e

    def explain(self, case):
        figures = super().explain(case)
        naive = self.naive_bytes(case)
        e = ELEMENT_BYTES[case.dtype]
        figures.update({
            "S and P (N x N) per head": f"{case.n * case.n * e:,} bytes each",
            "naive attention HBM bytes (S and P written and read)": f"{naive:,.0f}",
            "naive arithmetic intensity": f"{self.flops(case) / naive:,.1f} FLOP/byte",
            "fused (FlashAttention) HBM bytes": f"{self.min_bytes(case):,.0f} "
                                                f"({naive / self.min_bytes(case):,.1f}x fewer)",
        })
        return figures

    def explain_commands(self):
        """`kbench explain mma` and `kbench explain softmax` (typer is loaded only by the CLI)."""
        commands = load_helper(Path(__file__).resolve().parent / "explain_commands.py")
        return {"mma": commands.mma_command, "softmax": commands.softmax_command}


def _attention(q, k, v, causal: bool, softmax_dtype):
    """softmax(Q Kᵀ · d^-½) V in the inputs' type, the softmax in ``softmax_dtype`` and its result
    rounded back to the inputs' type. Chunked over batch·heads so the N x N scores stay near 1 GiB."""
    import torch

    b, h, n, d = q.shape
    q, k, v = (t.reshape(b * h, n, d) for t in (q, k, v))
    out = torch.empty_like(q)
    mask = torch.ones(n, n, dtype=torch.bool, device=q.device).tril() if causal else None
    step = max(1, (1 << 30) // (8 * n * n))
    for i in range(0, b * h, step):
        s = torch.matmul(q[i : i + step], k[i : i + step].transpose(-1, -2)) * d**-0.5
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        p = torch.softmax(s.to(softmax_dtype), dim=-1).to(q.dtype)
        out[i : i + step] = torch.matmul(p, v[i : i + step])
    return out.reshape(b, h, n, d)
