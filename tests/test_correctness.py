"""The correctness engine: every kind of wrong implementation is caught, a right one passes."""

from __future__ import annotations

import math

import pytest
import torch

from kbench import correctness
from kbench.correctness import Verdict, call_and_collect, check, compare, poison, recheck
from kbench.registry import Implementation, Needs
from kbench.suite import Case

CASE = Case({"n": 20, "d": 16, "batch": 2, "heads": 3, "dtype": "fp32", "causal": False})
CAUSAL16 = Case({"n": 20, "d": 16, "batch": 1, "heads": 2, "dtype": "fp16", "causal": True})


def impl(make, name="toy") -> Implementation:
    return Implementation(suite="attention", name=name, backend="torch", make=make, needs=Needs(),
                          description="", source="test")


def exact(case, q, k, v, scale=None):
    """Attention in float64, cast to the case's dtype."""
    s = q.double() @ k.double().transpose(-1, -2) * (case.d**-0.5 if scale is None else scale)
    if case.causal:
        s = s.masked_fill(torch.ones(case.n, case.n, dtype=torch.bool).triu(1), float("-inf"))
    return (torch.softmax(s, -1) @ v.double()).to(q.dtype)


# --- implementations, one per kind of mistake --------------------------------------

def make_correct(case, inputs, out):
    q, k, v = inputs["q"], inputs["k"], inputs["v"]

    def run():
        out.copy_(exact(case, q, k, v))  # writes into out and returns None

    return run


def make_returns_own_tensor(case, inputs, out):
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    return lambda: exact(case, q, k, v)


def make_returns_v(case, inputs, out):
    return lambda: inputs["v"]


def make_wrong_scale(case, inputs, out):
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    return lambda: exact(case, q, k, v, scale=1.0 / case.d)


def make_unwritten(case, inputs, out):
    return lambda: None


def make_partial(case, inputs, out):
    q, k, v = inputs["q"], inputs["k"], inputs["v"]

    def run():
        full = exact(case, q, k, v)
        out[..., : case.n // 2, :] = full[..., : case.n // 2, :]  # the last rows never written

    return run


def make_mutates_input(case, inputs, out):
    q, k, v = inputs["q"], inputs["k"], inputs["v"]

    def run():
        out.copy_(exact(case, q, k, v))
        q.mul_(0)  # right answer, then scribbles on its input

    return run


def make_wrong_shape(case, inputs, out):
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    return lambda: exact(case, q, k, v)[..., :-1, :]


def make_transposed(case, inputs, out):
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    return lambda: exact(case, q, k, v).transpose(1, 2)


def make_wrong_dtype(case, inputs, out):
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    return lambda: exact(case, q, k, v).double()


def make_one_nan(case, inputs, out):
    q, k, v = inputs["q"], inputs["k"], inputs["v"]

    def run():
        out.copy_(exact(case, q, k, v))
        out[0, 0, 0, 0] = float("nan")

    return run


def make_overflow(case, inputs, out):
    q, k, v = inputs["q"], inputs["k"], inputs["v"]

    def run():
        out.copy_(exact(case, q, k, v))
        out[-1, -1, -1, :3] = float("inf")

    return run


def make_not_a_tensor(case, inputs, out):
    return lambda: [1.0, 2.0]


def make_slightly_off(case, inputs, out):
    """Off by far more than fp32's tolerance on one element only."""
    q, k, v = inputs["q"], inputs["k"], inputs["v"]

    def run():
        out.copy_(exact(case, q, k, v))
        out[1, 2, 3, 4] += 1e-2

    return run


@pytest.mark.parametrize("make,expected", [
    (make_returns_v, "outputs outside atol=0.0001 rtol=0.0001"),
    (make_wrong_scale, "outputs outside atol"),
    (make_unwritten, f"{2 * 3 * 20 * 16} of {2 * 3 * 20 * 16} outputs are NaN/Inf (unwritten, or overflow)"),
    (make_partial, f"{2 * 3 * 10 * 16} of {2 * 3 * 20 * 16} outputs are NaN/Inf"),
    (make_mutates_input, "modified its input(s) q"),
    (make_wrong_shape, "wrong shape (2, 3, 19, 16), expected (2, 3, 20, 16)"),
    (make_transposed, "wrong shape (2, 20, 3, 16), expected (2, 3, 20, 16)"),
    (make_wrong_dtype, "wrong dtype torch.float64, expected torch.float32"),
    (make_one_nan, f"1 of {2 * 3 * 20 * 16} outputs are NaN/Inf"),
    (make_overflow, f"3 of {2 * 3 * 20 * 16} outputs are NaN/Inf"),
    (make_not_a_tensor, "returned list, not a tensor"),
    (make_slightly_off, f"1 of {2 * 3 * 20 * 16} outputs outside atol"),
], ids=lambda x: getattr(x, "__name__", "")[5:] if callable(x) else "")
def test_wrong_implementations_are_caught(attention, make, expected):
    verdict = check(attention, impl(make), CASE, "cpu", seed=11, trials=3)
    assert verdict.ok is False
    assert verdict.trials == 1  # it stops at the first failing trial
    assert verdict.reason.startswith("trial 1 (seed 11): ")
    assert expected in verdict.reason, verdict.reason
    assert verdict.last is None


@pytest.mark.parametrize("make", [make_correct, make_returns_own_tensor])
@pytest.mark.parametrize("case", [CASE, CAUSAL16], ids=["fp32", "fp16-causal"])
def test_correct_implementation_passes(attention, make, case):
    verdict = check(attention, impl(make), case, "cpu", seed=5, trials=3)
    atol, rtol = attention.tolerance(case)
    assert verdict.ok, verdict.reason
    assert verdict.reason == ""
    assert verdict.trials == 3
    assert (verdict.atol, verdict.rtol) == (atol, rtol)
    assert 0 <= verdict.max_abs_err <= atol
    assert verdict.max_rel_err <= verdict.max_abs_err / 1e-3  # |ref| is O(1)
    fn, inputs, out, ref = verdict.last
    assert ref.dtype == torch.float64 and tuple(ref.shape) == attention.shape(case)
    assert recheck(verdict, "cpu") == ""
    assert verdict.as_record()["ok"] is True and "last" not in verdict.as_record()


def test_output_is_poisoned_before_every_call(attention):
    seen = []

    def make(case, inputs, out):
        def run():
            seen.append(bool(torch.isnan(out).all()))
            out.copy_(exact(case, inputs["q"], inputs["k"], inputs["v"]))

        return run

    verdict = check(attention, impl(make), CASE, "cpu", seed=0, trials=3)
    assert verdict.ok
    assert seen == [True, True, True]
    assert recheck(verdict, "cpu") == ""
    assert seen == [True] * 4


def test_written_only_in_setup_is_caught(attention):
    """Writing the answer in make() (untimed set-up) and doing nothing in the closure is wrong."""

    def make(case, inputs, out):
        out.copy_(exact(case, inputs["q"], inputs["k"], inputs["v"]))
        return lambda: None

    verdict = check(attention, impl(make), CASE, "cpu", seed=0, trials=1)
    assert not verdict.ok and "NaN/Inf" in verdict.reason


def test_each_trial_gets_fresh_inputs(attention):
    """An implementation that replays the first answer it computed is caught on trial 2."""
    cache = {}
    seeds_seen = []

    def make(case, inputs, out):
        seeds_seen.append(float(inputs["q"].flatten()[0]))

        def run():
            if "answer" not in cache:
                cache["answer"] = exact(case, inputs["q"], inputs["k"], inputs["v"])
            out.copy_(cache["answer"])

        return run

    verdict = check(attention, impl(make), CASE, "cpu", seed=40, trials=3)
    assert not verdict.ok
    assert verdict.trials == 2
    assert verdict.reason.startswith("trial 2 (seed 41): ")
    assert "outside atol" in verdict.reason
    assert seeds_seen[0] != seeds_seen[1]


def test_max_errors_are_unknown_after_a_nan_failure(attention):
    verdict = check(attention, impl(make_unwritten), CASE, "cpu", seed=0, trials=2)
    assert verdict.max_abs_err is None and verdict.max_rel_err is None


def test_recheck_catches_right_only_the_first_time(attention):
    calls = []

    def make(case, inputs, out):
        q, k, v = inputs["q"], inputs["k"], inputs["v"]

        def run():
            calls.append(1)
            out.copy_(exact(case, q, k, v))
            if len(calls) > 1:  # a stale accumulator: wrong from the second call on
                out.add_(1.0)

        return run

    verdict = check(attention, impl(make), CASE, "cpu", seed=0, trials=1)
    assert verdict.ok
    again = recheck(verdict, "cpu")
    assert again.startswith("after timing: ") and "outside atol" in again


def test_mutating_a_different_input_names_it(attention):
    def make(case, inputs, out):
        q, k, v = inputs["q"], inputs["k"], inputs["v"]

        def run():
            out.copy_(exact(case, q, k, v))
            k.add_(1)
            v.add_(1)

        return run

    verdict = check(attention, impl(make), CASE, "cpu", seed=0, trials=1)
    assert not verdict.ok
    assert verdict.reason.endswith("modified its input(s) k, v")


def test_reference_uses_unmodified_inputs(attention):
    """The reference is computed from clones taken before the call, so mutating inputs
    cannot also fool the reference into agreeing."""

    def make(case, inputs, out):
        q, k, v = inputs["q"], inputs["k"], inputs["v"]

        def run():
            v.zero_()  # corrupt the input first...
            out.copy_(exact(case, q, k, v))  # ...then compute from it (all zeros)

        return run

    verdict = check(attention, impl(make), CASE, "cpu", seed=0, trials=1)
    assert not verdict.ok and "outside atol" in verdict.reason


# --- compare(), poison(), call_and_collect() -------------------------------------------

def test_compare_within_and_outside_tolerance():
    ref = torch.tensor([1.0, -2.0, 4.0], dtype=torch.float64)
    like = torch.empty(3, dtype=torch.float32)
    reason, max_abs, max_rel = compare(torch.tensor([1.0, -2.0, 4.0]), like, ref, 1e-3, 1e-3)
    assert (reason, max_abs, max_rel) == ("", 0.0, 0.0)

    got = torch.tensor([1.001, -2.0, 4.002])
    reason, max_abs, max_rel = compare(got, like, ref, 1e-3, 1e-3)
    assert reason == ""  # 0.002 <= 1e-3 + 1e-3 * 4
    assert max_abs == pytest.approx(0.002, rel=1e-3)
    assert max_rel == pytest.approx(0.002 / 4, rel=1e-3)

    got = torch.tensor([1.01, -2.0, 4.0])
    reason, max_abs, _ = compare(got, like, ref, 1e-3, 1e-3)
    assert reason == "1 of 3 outputs outside atol=0.001 rtol=0.001 (max abs err 0.01)"
    assert max_abs == pytest.approx(0.01, rel=1e-3)


def test_compare_rtol_scales_with_reference():
    ref = torch.tensor([1000.0], dtype=torch.float64)
    like = torch.empty(1, dtype=torch.float64)
    assert compare(torch.tensor([1000.5], dtype=torch.float64), like, ref, 0.0, 1e-3)[0] == ""
    assert compare(torch.tensor([1001.5], dtype=torch.float64), like, ref, 0.0, 1e-3)[0] != ""


def test_compare_shape_dtype_type_nonfinite():
    ref = torch.zeros(2, 3, dtype=torch.float64)
    like = torch.empty(2, 3, dtype=torch.float16)
    assert compare(torch.zeros(3, 2, dtype=torch.float16), like, ref, 1, 1)[0] == \
        "wrong shape (3, 2), expected (2, 3)"
    assert compare(torch.zeros(2, 3), like, ref, 1, 1)[0] == "wrong dtype torch.float32, expected torch.float16"
    reason, a, r = compare(None, like, ref, 1, 1)
    assert reason == "returned NoneType, not a tensor" and a is None and r is None
    bad = torch.zeros(2, 3, dtype=torch.float16)
    bad[0, 0] = float("nan")
    bad[1, 2] = float("-inf")
    assert compare(bad, like, ref, 1, 1)[0] == "2 of 6 outputs are NaN/Inf (unwritten, or overflow)"


def test_compare_zero_reference_uses_absolute_error():
    ref = torch.zeros(4, dtype=torch.float64)
    reason, max_abs, max_rel = compare(torch.full((4,), 0.5, dtype=torch.float64), ref, ref, 1.0, 0.0)
    assert reason == "" and max_abs == 0.5 and max_rel == 0.5


def test_poison():
    f = torch.zeros(3, dtype=torch.bfloat16)
    poison(f)
    assert torch.isnan(f).all()
    i = torch.zeros(3, dtype=torch.int32)
    poison(i)
    assert (i == torch.iinfo(torch.int32).min).all()


def test_call_and_collect_prefers_returned_tensor():
    out = torch.zeros(2)
    mine = torch.ones(2)
    assert call_and_collect(lambda: mine, out, "cpu") is mine
    assert torch.isnan(out).all()  # poisoned even though the closure returned its own tensor

    def writes():
        out.fill_(3.0)

    assert call_and_collect(writes, out, "cpu") is out
    assert (out == 3.0).all()


def test_verdict_record_fields():
    v = Verdict(ok=False, reason="r", trials=2, max_abs_err=0.5, max_rel_err=0.25, atol=1.0, rtol=2.0)
    assert v.as_record() == {"ok": False, "reason": "r", "trials": 2, "max_abs_err": 0.5, "max_rel_err": 0.25,
                             "atol": 1.0, "rtol": 2.0}
    assert correctness.Verdict(ok=True).last is None
