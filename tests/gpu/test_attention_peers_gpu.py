"""The optional attention peers (FlashAttention-4 as `fa4`, FlashInfer as `flashinfer`) right on a GPU
at the sizes that catch tile tails: one query, fewer than a tile, a partial last tile, several tiles,
causal and not, d 64 and 128, fp16 and bf16, against the float64 reference through kbench's own check
(every input distribution, poisoned outputs). Each is skipped, with the reason, where its package is
not installed (or found through $KBENCH_SITE_DIRS)."""

from __future__ import annotations

import pytest

from kbench import correctness
from kbench.registry import Unsupported, skip_reason
from kbench.suite import Case

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_cuda")]

SIZES = ((1, False), (17, True), (1000, False), (4099, True))


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("name", ["fa4", "flashinfer"])
def test_optional_peer_matches_float64(registry, name, d, dtype):
    import torch

    suite, impl = registry.suite("attention"), registry.implementations("attention")[name]
    capability = torch.cuda.get_device_capability()
    problems, refused = [], []
    for n, causal in SIZES:
        case = Case({"n": n, "d": d, "batch": 2, "heads": 3, "dtype": dtype, "causal": causal})
        reason = skip_reason(impl, case, "cuda", capability)
        if reason:
            pytest.skip(f"{name}: {reason}")
        try:
            verdict = correctness.check(suite, impl, case, "cuda", seed=n + d, trials=2, params=impl.params)
        except Unsupported as exc:  # the library's own refusal of a shape: a SKIP row in kbench run
            refused.append(f"n={n} causal={causal}: {exc}")
            continue
        except Exception as exc:  # noqa: BLE001 - every size is tried, the failures listed together
            problems.append(f"n={n} causal={causal}: {type(exc).__name__}: {str(exc)[:300]}")
            continue
        if not verdict.ok:
            problems.append(f"n={n} causal={causal}: {verdict.reason[:300]}")
    assert not problems, f"{name} {dtype} d={d} is wrong at:\n" + "\n".join(problems)
    if len(refused) == len(SIZES):
        pytest.skip(f"{name} refused every size: " + "; ".join(refused))
