"""cupy-fa2's optional log-sum-exp output (--param lse=1), which kbench's harness does not check (it
checks O only), against float64 logsumexp(Q K^T / sqrt(d)), per query row; and its output against
float64 through kbench's check (every input distribution) with the running maximum moved at every
new maximum (rescale=0) and only past a margin of 2^8 (rescale=8), the K/V copies checked row by row
and stepped (loads=stepped), and its blocks taking query tiles in each order (--param order). (cupy-fa2 under compute-sanitizer: test_sanitizer_gpu.py.)"""

from __future__ import annotations

import pytest

from kbench import correctness
from kbench.suite import Case

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_cuda", "needs_cupy")]

# One query; fewer than a tile; a causal size with a partial last tile; several tiles; a causal
# size shorter than one 128-row tile.
SIZES = ((1, False), (255, False), (1000, True), (4096, False), (130, True))
LSE_ATOL = 1e-3  # the kernel's row maximum and sum are fp32: hundreds of its ulps at these magnitudes (< 20)


def _reference_lse(inputs, n: int, d: int, causal: bool):
    import torch

    q, k = (inputs[x].double().reshape(-1, n, d) for x in "qk")
    scores = q @ k.transpose(-1, -2) * d**-0.5
    if causal:
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool, device=scores.device).triu(1), float("-inf"))
    return torch.logsumexp(scores, dim=-1)


@pytest.mark.parametrize("order", ["rows", "heaviest"])  # the grid's two shapes: (Q tiles, B x H) and (B x H, Q tiles)
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("d", [64, 128])
def test_cupy_fa2_log_sum_exp_matches_float64(registry, dtype, d, order):
    import torch

    suite, impl = registry.suite("attention"), registry.implementations("attention")["cupy-fa2"]
    problems = []
    for n, causal in SIZES:
        case = Case({"n": n, "d": d, "batch": 2, "heads": 3, "dtype": dtype, "causal": causal})
        inputs = suite.make_inputs(case, seed=n + d, device="cuda")
        run = impl.make(case, inputs, suite.make_output(case, inputs), **{**impl.params, "lse": 1, "order": order})
        run.lse.fill_(float("nan"))  # a row the kernel leaves unwritten stays NaN
        run()
        torch.cuda.synchronize()
        ref = _reference_lse(inputs, n, d, causal)
        assert run.lse.shape == ref.shape, f"n={n}: lse has shape {tuple(run.lse.shape)}, expected {tuple(ref.shape)}"
        finite = bool(torch.isfinite(run.lse).all())
        err = (run.lse.double() - ref).abs().max().item()
        if not finite or not err < LSE_ATOL:
            problems.append(f"n={n} causal={causal}: {'non-finite rows, ' if not finite else ''}max abs err {err:.2e}")
    assert not problems, f"cupy-fa2 lse, {dtype} d={d}, off float64 by more than {LSE_ATOL}:\n" + "\n".join(problems)


FORMS = ({"rescale": 0, "loads": "checked"}, {"rescale": 8, "loads": "checked"}, {"rescale": 0, "loads": "stepped"},
         {"rescale": 8, "loads": "stepped"}, {"order": "reverse"}, {"order": "heaviest"})


@pytest.mark.parametrize("form", FORMS, ids=lambda form: ",".join(f"{k}={v}" for k, v in form.items()))
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_cupy_fa2_matches_float64_in_each_form(registry, dtype, form):
    suite, impl = registry.suite("attention"), registry.implementations("attention")["cupy-fa2"]
    problems = []
    for d in (64, 128):
        for n, causal in SIZES:
            case = Case({"n": n, "d": d, "batch": 2, "heads": 3, "dtype": dtype, "causal": causal})
            verdict = correctness.check(suite, impl, case, "cuda", seed=n, trials=1, params={**impl.params, **form})
            if not verdict.ok:
                problems.append(f"d={d} n={n} causal={causal}: {verdict.reason[:300]}")
    assert not problems, f"cupy-fa2 {form} {dtype}:\n" + "\n".join(problems)
