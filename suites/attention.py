"""Scaled dot-product attention, forward: O = softmax(Q Kᵀ · d^-½ [+ causal mask]) V.

The first seed text's scenario is the default case: B=1, H=1, N=256, d=128, fp16.
"""

from kbench.dtypes import ELEMENT_BYTES, NAMES, torch_dtype
from kbench.errors import UserError
from kbench.registry import suite
from kbench.suite import Axis, Suite


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
    trials = 3
    # |out - ref| <= atol + rtol·|ref| against the float64 reference. Set from the
    # element type's rounding (fp16 eps 9.8e-4, bf16 eps 7.8e-3) with room for the
    # fp16/bf16 intermediates (S, P) that kernels keep; fp32 kernels accumulate in fp32.
    tolerances = {"fp16": (5e-3, 5e-3), "bf16": (4e-2, 4e-2), "fp32": (1e-4, 1e-4)}

    def validate(self, case):
        for axis in ("n", "batch", "heads"):
            if case.values[axis] <= 0:
                raise UserError(f"--{axis} must be positive (got {case.values[axis]})")
        if not (1 <= case.d <= 256 and case.d % 8 == 0):
            raise UserError(f"--d {case.d} is not supported: head dim must be a multiple of 8 up to 256")

    def shape(self, case):
        return (case.batch, case.heads, case.n, case.d)

    def make_inputs(self, case, seed, device):
        import torch

        gen = torch.Generator(device="cpu").manual_seed(seed)
        # Drawn on the CPU so a seed gives the same inputs on every device.
        q, k, v = (torch.randn(self.shape(case), generator=gen, dtype=torch.float32) for _ in range(3))
        dtype = torch_dtype(case.dtype)
        return {name: t.to(device=device, dtype=dtype) for name, t in (("q", q), ("k", k), ("v", v))}

    def make_output(self, case, inputs):
        import torch

        return torch.empty(self.shape(case), dtype=torch_dtype(case.dtype), device=inputs["q"].device)

    def reference(self, case, inputs):
        import torch

        q, k, v = (inputs[name].to(torch.float64) for name in ("q", "k", "v"))
        b, h, n, d = q.shape
        q, k, v = (t.reshape(b * h, n, d) for t in (q, k, v))
        out = torch.empty_like(q)
        mask = torch.ones(n, n, dtype=torch.bool, device=q.device).tril() if case.causal else None
        # Chunk over batch·heads so the float64 N x N scores stay near 1 GiB.
        step = max(1, (1 << 30) // (8 * n * n))
        for i in range(0, b * h, step):
            s = q[i : i + step] @ k[i : i + step].transpose(-1, -2) * d**-0.5
            if mask is not None:
                s = s.masked_fill(~mask, float("-inf"))
            out[i : i + step] = torch.softmax(s, dim=-1) @ v[i : i + step]
        return out.reshape(b, h, n, d)

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
        (The seed's N = 2048 example: S and P are 8 MB each, 32 MB of traffic.)"""
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
