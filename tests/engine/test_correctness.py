"""The correctness engine: every kind of wrong implementation is caught, a right one passes."""

from __future__ import annotations


import pytest
import torch

from kbench import correctness
from kbench.correctness import (CHECKED_PER_BATCH, PLAIN_FACTOR, TimedCalls, Verdict, call_and_collect, check, compare,
                                poison, recheck)
from kbench.registry import Implementation, Needs
from kbench.stopping import StopRule
from kbench.suite import Case
from kbench.timing import CPU_CHECK_BATCH, Settings, measure_cpu

CASE = Case({"n": 20, "d": 16, "batch": 2, "heads": 3, "dtype": "fp32", "causal": False})
CAUSAL16 = Case({"n": 20, "d": 16, "batch": 1, "heads": 2, "dtype": "fp16", "causal": True})
# The precision-aware bound's failure message on CASE (fp32 output, attention's plain computation).
OVER_BOUND = f"is over what a correct fp32 kernel makes ({PLAIN_FACTOR['float32']:g} x the plain fp32 computation's"


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


def make_in_bf16(case, inputs, out):
    """The right formula on inputs rounded to bf16: the right shape and dtype, a precision error."""
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    return lambda: exact(case, q.bfloat16(), k.bfloat16(), v.bfloat16()).to(out.dtype)


def make_slightly_off(case, inputs, out):
    """Off by far more than a correct fp32 kernel's error on one element only."""
    q, k, v = inputs["q"], inputs["k"], inputs["v"]

    def run():
        out.copy_(exact(case, q, k, v))
        out[1, 2, 3, 4] += 1e-2

    return run


@pytest.mark.parametrize("make,expected", [
    (make_returns_v, OVER_BOUND),
    (make_wrong_scale, OVER_BOUND),
    (make_unwritten, f"{2 * 3 * 20 * 16} of {2 * 3 * 20 * 16} outputs are NaN/Inf (unwritten, or overflow)"),
    (make_partial, f"{2 * 3 * 10 * 16} of {2 * 3 * 20 * 16} outputs are NaN/Inf"),
    (make_mutates_input, "modified its input(s) q"),
    (make_wrong_shape, "wrong shape (2, 3, 19, 16), expected (2, 3, 20, 16)"),
    (make_transposed, "wrong shape (2, 20, 3, 16), expected (2, 3, 20, 16)"),
    (make_wrong_dtype, "wrong dtype torch.float64, expected torch.float32"),
    (make_one_nan, f"1 of {2 * 3 * 20 * 16} outputs are NaN/Inf"),
    (make_overflow, f"3 of {2 * 3 * 20 * 16} outputs are NaN/Inf"),
    (make_not_a_tensor, "returned list, not a tensor"),
    (make_in_bf16, OVER_BOUND),
    (make_slightly_off, f"max abs err 0.01 {OVER_BOUND}"),
], ids=lambda x: getattr(x, "__name__", "")[5:] if callable(x) else "")
def test_wrong_implementations_are_caught(attention, make, expected):
    verdict = check(attention, impl(make), CASE, "cpu", seed=11, trials=3)
    assert verdict.ok is False
    assert verdict.trials == 1  # it stops at the first failing trial
    assert verdict.reason.startswith("trial 1 (seed 11, normal inputs): ")
    assert expected in verdict.reason, verdict.reason
    assert verdict.last is None


@pytest.mark.parametrize("make", [make_correct, make_returns_own_tensor])
@pytest.mark.parametrize("case", [CASE, CAUSAL16], ids=["fp32", "fp16-causal"])
def test_correct_implementation_passes(attention, make, case):
    verdict = check(attention, impl(make), case, "cpu", seed=5, trials=3)
    assert verdict.ok, verdict.reason
    assert verdict.reason == ""
    # 3 asked for, but one per distribution at least, and a last one from the first distribution (timed next)
    assert verdict.trials == len(attention.distributions) + 1 == 6
    assert (verdict.atol, verdict.rtol) == attention.tolerance(case)  # recorded; the bound judges
    assert set(verdict.distributions) == set(attention.distributions)
    for name, entry in verdict.distributions.items():
        assert 0 <= entry["max_abs_err"] <= entry["allowed"], (name, entry)
        assert entry["allowed"] >= entry["factor"] * entry["plain_max_abs_err"] > 0
    assert verdict.max_abs_err == max(entry["max_abs_err"] for entry in verdict.distributions.values())
    assert verdict.max_rel_err <= verdict.max_abs_err / 1e-3  # |ref| is O(1)
    fn, inputs, out, expected = verdict.last
    assert expected.ref.dtype == torch.float64 and tuple(expected.ref.shape) == attention.shape(case)
    assert expected.bound is not None
    assert expected.bound.factor == PLAIN_FACTOR[str(out.dtype).removeprefix("torch.")]
    assert recheck(verdict, "cpu") == ""
    record = verdict.as_record()
    assert record["ok"] is True and "last" not in record
    assert set(record["distributions"]) == set(attention.distributions) and "bound" in record


def test_trials_take_the_distributions_in_turn(attention, monkeypatch):
    """Trial t draws distribution t mod D with seed + t; more trials than distributions wrap around; a
    last trial of the first distribution follows where the turn ended elsewhere (its inputs are the
    ones timed); recheck draws the first distribution with the first seed no trial used."""
    draws = []
    original = attention.draw

    def spy(case, seed, device, distribution=None):
        draws.append((seed, distribution))
        return original(case, seed=seed, device=device, distribution=distribution)

    monkeypatch.setattr(attention, "draw", spy)
    turn = ["normal", "large-scores", "outliers", "near-constant", "growing"]
    assert list(attention.distributions) == turn
    for asked, planned in ((3, [*turn, "normal"]),  # fewer asked than distributions: each once, then normal
                           (6, [*turn, "normal"]),  # the turn ends on normal: nothing added
                           (7, [*turn, "normal", "large-scores", "normal"])):
        draws.clear()
        verdict = check(attention, impl(make_correct), CASE, "cpu", seed=100, trials=asked)
        assert verdict.ok, verdict.reason
        assert verdict.trials == len(planned)
        assert draws == [(100 + t, name) for t, name in enumerate(planned)]
        # the closure timed next holds the last trial's inputs: the typical distribution's
        expected_inputs = attention.draw(CASE, seed=100 + len(planned) - 1, device="cpu", distribution="normal")
        assert all(torch.equal(verdict.last[1][name], expected_inputs[name]) for name in ("q", "k", "v"))
        draws.clear()
        assert recheck(verdict, "cpu") == ""
        assert draws == [(100 + len(planned) + r, "normal") for r in range(correctness.RECHECK_ROUNDS)]


def test_distributions_are_different_inputs(attention):
    """Each distribution is its own draw: the same seed gives different tensors (and large-scores
    has larger scores than normal, which is what it is for)."""
    drawn = {name: attention.draw(CASE, seed=3, device="cpu", distribution=name) for name in attention.distributions}
    names = list(drawn)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert any(not torch.equal(drawn[a][t], drawn[b][t]) for t in ("q", "k", "v")), (a, b)

    def scores(inputs):
        return (inputs["q"].double() @ inputs["k"].double().transpose(-1, -2) * CASE.d**-0.5).std()

    assert scores(drawn["large-scores"]) > 10 * scores(drawn["normal"])
    with pytest.raises(ValueError, match="distribution"):
        attention.draw(CASE, seed=3, device="cpu", distribution="no-such-thing")


def test_output_is_poisoned_before_every_call(attention):
    seen = []

    def make(case, inputs, out):
        def run():
            seen.append(bool(torch.isnan(out).all()))
            out.copy_(exact(case, inputs["q"], inputs["k"], inputs["v"]))

        return run

    verdict = check(attention, impl(make), CASE, "cpu", seed=0, trials=3)
    assert verdict.ok
    trials = len(attention.distributions) + 1  # one per distribution, then the first one again
    assert verdict.trials == trials and seen == [True] * trials
    assert recheck(verdict, "cpu") == ""
    assert seen == [True] * (trials + correctness.RECHECK_ROUNDS)


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
    assert verdict.reason.startswith(f"trial 2 (seed 41, {attention.distributions[1]} inputs): ")
    assert OVER_BOUND in verdict.reason
    assert seeds_seen[0] != seeds_seen[1]


def test_max_errors_are_unknown_after_a_nan_failure(attention):
    verdict = check(attention, impl(make_unwritten), CASE, "cpu", seed=0, trials=2)
    assert verdict.max_abs_err is None and verdict.max_rel_err is None


def test_recheck_catches_right_only_the_first_time(attention):
    def make(case, inputs, out):
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        calls = []  # each trial's closure is called once: right on all of them

        def run():
            calls.append(1)
            out.copy_(exact(case, q, k, v))
            if len(calls) > 1:  # a stale accumulator: wrong from the second call on
                out.add_(1.0)

        return run

    verdict = check(attention, impl(make), CASE, "cpu", seed=0, trials=1)
    assert verdict.ok, verdict.reason
    trials = len(attention.distributions) + 1  # one per distribution, then the first one again
    again = recheck(verdict, "cpu")
    # new inputs: the first (typical) distribution, with the first seed no trial used
    assert again.startswith(f"after timing: on new {attention.distributions[0]} inputs (seed {trials}), ")
    assert OVER_BOUND in again


def test_recheck_replays_the_timed_graph_on_the_new_inputs(attention):
    """A graph-timed closure's graph (timing's REPLAY_CALL) is replayed on the new inputs, before the
    closure's own call: one that holds a copy of the answer the closure keeps gives the old answer, though
    the closure called directly is right (and would refresh what it keeps)."""
    def make(case, inputs, out):
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        kept = {}

        def run():
            kept["answer"] = exact(case, q, k, v)
            out.copy_(kept["answer"])

        run.replay_a_copy = lambda: out.copy_(kept["answer"])  # what a capture of the cheat records
        return run

    verdict = check(attention, impl(make), CASE, "cpu", seed=0, trials=1)
    assert verdict.ok, verdict.reason
    fn = verdict.last[0]
    fn()  # the answer kept is the timed inputs', as when the graph was captured
    again = recheck(verdict, "cpu", replay=fn.replay_a_copy)
    trials = len(attention.distributions) + 1
    assert again.startswith(f"after timing: on new {attention.distributions[0]} inputs (seed {trials}), "
                            "the CUDA graph it was timed as, replayed: ")
    assert OVER_BOUND in again, again
    assert recheck(verdict, "cpu", replay=fn) == ""  # a graph that computes from its inputs is right on them


@pytest.mark.parametrize("took_ms, fails", [([6.0, 6.0], True), ([6.0, 1.2], False), ([2.0, 2.0], False)])
def test_recheck_times_its_calls_on_new_inputs_against_the_median(attention, took_ms, fails):
    """Each call on new inputs is timed by the sampler's timer (the worker gives one on a GPU); the faster
    of the two may take at most FRESH_FACTOR x the timed median plus FRESH_SLACK_MS (2 x 1 ms + 0.01 ms
    here), and the calls' times go into the verdict whatever it says."""
    verdict = check(attention, impl(make_correct), CASE, "cpu", seed=0, trials=1)
    assert verdict.ok, verdict.reason
    times = list(took_ms)

    def timer(call):
        return times.pop(0) / 1e3, call()

    again = recheck(verdict, "cpu", timer=timer, median_ms=1.0)
    assert verdict.new_inputs_ms == pytest.approx(took_ms)
    if fails:
        assert again == ("after timing: its fastest call on new inputs took 6 ms, 6.0x the timed calls' median of "
                         "1 ms: the timed calls, all on the same inputs, did less than a call on inputs it had not "
                         "seen (an answer kept between calls?)")
    else:
        assert again == ""


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
    assert not verdict.ok and "modified its input(s) v" in verdict.reason and OVER_BOUND in verdict.reason


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
                             "atol": 1.0, "rtol": 2.0, "distributions": {}}
    assert correctness.Verdict(ok=True).last is None


def test_verdict_keeps_the_worst_trial_of_each_distribution():
    v = Verdict(ok=True)
    v.note("uniform", 0.25, None)
    v.note("uniform", 0.125, None)  # a better trial does not hide the worse one
    v.note("runs", 0.5, None)
    assert v.as_record()["distributions"] == {"uniform": {"max_abs_err": 0.25}, "runs": {"max_abs_err": 0.5}}
    assert "bound" not in v.as_record()  # no plain computation: atol/rtol judged

    bound = correctness.Bound(plain_err=0.01, floor=0.001, factor=2.0)
    v.note("outliers", 0.0125, bound)
    v.note("outliers", 0.015, correctness.Bound(plain_err=0.02, floor=0.001, factor=2.0))
    record = v.as_record()
    assert record["distributions"]["outliers"] == {"max_abs_err": 0.015, "plain_max_abs_err": 0.02,
                                                   "allowed": pytest.approx(0.041), "factor": 2.0}
    assert record["bound"].startswith("max |out - ref| <= 2 x max |plain - ref| + ")
    v.note("runs", None, None)  # unmeasurable (NaN output): stays unknown
    v.note("runs", 0.75, None)
    assert v.as_record()["distributions"]["runs"] == {"max_abs_err": None}


def test_bound_limit_and_description():
    bound = correctness.Bound(plain_err=0.01, floor=0.001, factor=2.0)
    assert bound.limit == pytest.approx(0.021)
    assert bound.describe("fp16") == "2 x the plain fp16 computation's 0.01 + 0.001 = 0.021"


def test_compare_with_a_bound_ignores_atol_and_rtol():
    ref = torch.tensor([1.0, -2.0, 4.0], dtype=torch.float64)
    like = torch.empty(3, dtype=torch.float32)
    bound = correctness.Bound(plain_err=1e-3, floor=1e-4, factor=2.0)  # limit 2.1e-3
    reason, max_abs, _ = compare(torch.tensor([1.002, -2.0, 4.0]), like, ref, 0.0, 0.0, bound=bound, dtype="fp32")
    assert reason == "" and max_abs == pytest.approx(0.002, rel=1e-3)  # atol = rtol = 0 would refuse it
    reason, _, _ = compare(torch.tensor([1.003, -2.0, 4.0]), like, ref, 1.0, 1.0, bound=bound, dtype="fp32")
    assert reason == ("max abs err 0.003 is over what a correct fp32 kernel makes "
                      "(2 x the plain fp32 computation's 0.001 + 0.0001 = 0.0021)")
    # shape, dtype and NaN come first, bound or not
    assert compare(torch.zeros(2), like, ref, 0, 0, bound=bound, dtype="fp32")[0].startswith("wrong shape")
    assert "NaN/Inf" in compare(torch.full((3,), float("nan")), like, ref, 0, 0, bound=bound, dtype="fp32")[0]


@pytest.mark.parametrize("case", [CASE, CAUSAL16], ids=["fp32", "fp16-causal"])
def test_expect_takes_the_bound_from_the_plain_computation(attention, case):
    inputs = attention.make_inputs(case, seed=2, device="cpu", distribution="outliers")
    out = attention.make_output(case, inputs)
    expected = correctness.expect(attention, case, inputs, out)
    ref = attention.reference(case, inputs)
    plain_err = float((attention.plain(case, inputs).double() - ref).abs().max())
    out_dtype = str(out.dtype).removeprefix("torch.")
    assert expected.bound.plain_err == pytest.approx(plain_err)
    assert expected.bound.factor == PLAIN_FACTOR[out_dtype]
    # the floor: a few ulps of the output type at the largest |ref|, never a tolerance of its own
    ulp = torch.finfo(out.dtype).eps * float(ref.abs().max())
    assert 0 < expected.bound.floor <= 8 * ulp
    assert expected.dtype == case.dtype


def test_several_plain_computations_give_the_bound_of_the_largest_error(attention, monkeypatch):
    """A suite may give several correct computations of its precision (Suite.plain): a kernel is judged
    against the larger of their errors, never the luckier one alone."""
    case = CAUSAL16
    inputs = attention.make_inputs(case, seed=2, device="cpu", distribution="outliers")
    ref = attention.reference(case, inputs)
    plain = attention.plain(case, inputs)
    worse = plain.double() + 0.25  # as far from the reference again, and then some
    monkeypatch.setattr(attention, "plain", lambda case, inputs: (plain, worse.to(plain.dtype)))
    expected = correctness.expect(attention, case, inputs, attention.make_output(case, inputs))
    assert expected.bound.plain_err == pytest.approx(float((worse.to(plain.dtype).double() - ref).abs().max()))
    assert expected.bound.plain_err > float((plain.double() - ref).abs().max())


def test_decode_over_a_quantized_cache_is_judged_against_both_plain_computations(registry):
    """Over an int8 cache: the plain fp16 computation and the one that rounds only the dequantized cache
    to fp16; on outlier inputs whose softmax nearly ties two keys the two errors differ severalfold."""
    decode = registry.suite("decode")
    case = Case({"l": 300, "q": 1, "batch": 1, "hq": 32, "hkv": 8, "d": 128, "kv_dtype": "int8", "group": 32})
    inputs = decode.make_inputs(case, seed=2, device="cpu", distribution="outliers")
    plains = decode.plain(case, inputs)
    assert isinstance(plains, tuple) and len(plains) == 2 and all(p.dtype == torch.float16 for p in plains)
    ref = decode.reference(case, inputs)
    errors = [float((p.double() - ref).abs().max()) for p in plains]
    expected = correctness.expect(decode, case, inputs, decode.make_output(case, inputs))
    assert expected.bound.plain_err == pytest.approx(max(errors))
    fp16 = Case({**case.values, "kv_dtype": "fp16"})
    assert not isinstance(decode.plain(fp16, decode.make_inputs(fp16, seed=2, device="cpu")), tuple)


def test_no_plain_computation_no_bound(registry):
    """Suites without a plain computation (the exact sums) are judged by atol and rtol."""
    reduction = registry.suite("reduction")
    case = Case({"n": 1000, "dtype": "fp32"})
    inputs = reduction.make_inputs(case, seed=0, device="cpu")
    expected = correctness.expect(reduction, case, inputs, reduction.make_output(case, inputs))
    assert expected.bound is None and (expected.atol, expected.rtol) == reduction.tolerance(case)


# --- the timed calls ------------------------------------------------------------------------------

# Three batches of timed calls on the CPU (the last call of each batch and CHECKED_PER_BATCH others judged).
TIMED_SAMPLES = 3 * CPU_CHECK_BATCH


def timed_settings(samples: int = TIMED_SAMPLES, warmup_calls: int = 2) -> Settings:
    rule = StopRule(target_noise=0.5, min_samples=samples, max_samples=samples, min_time=0.0, max_time=100.0)
    return Settings(stop=rule, warmup_time=0.0, warmup_calls=warmup_calls, flush_l2=False)


def test_timed_calls_of_a_right_closure_are_checked_and_poisoned(attention):
    entry_nan = []

    def make(case, inputs, out):
        def run():
            entry_nan.append(bool(torch.isnan(out).all()))
            out.copy_(exact(case, inputs["q"], inputs["k"], inputs["v"]))

        return run

    verdict = check(attention, impl(make), CASE, "cpu", seed=0, trials=1)
    assert verdict.ok, verdict.reason
    entry_nan.clear()
    guard = TimedCalls(verdict, "cpu")
    result = measure_cpu(verdict.last[0], timed_settings(warmup_calls=2), guard=guard)
    assert "wrong_call" not in result
    assert result["stats"]["n"] == TIMED_SAMPLES
    # The warm-up calls find the last answer in place; every timed call finds the output poisoned.
    assert entry_nan == [False] * 2 + [True] * TIMED_SAMPLES
    batches = TIMED_SAMPLES // CPU_CHECK_BATCH
    assert result["checked_calls"] == {"calls": TIMED_SAMPLES, "checked": batches * (1 + CHECKED_PER_BATCH)}
    assert result["checked_calls"]["checked"] >= 1
    assert guard.unchanged_inputs() == ""
    assert recheck(verdict, "cpu") == ""


def test_a_measurement_shorter_than_a_batch_still_judges_its_last_call(attention):
    """Interpreted Triton on a CPU may stop after a few samples, inside the first batch: the last
    timed call is judged whatever the random choice."""
    verdict = check(attention, impl(make_correct), CASE, "cpu", seed=0, trials=1)
    for samples in range(1, CPU_CHECK_BATCH):
        result = measure_cpu(verdict.last[0], timed_settings(samples=samples), guard=TimedCalls(verdict, "cpu"))
        assert result["checked_calls"]["calls"] == samples
        assert result["checked_calls"]["checked"] >= 1


def make_computes_once_per_inputs(case, inputs, out):
    """Computes only when its inputs changed since its last call; otherwise trusts that ``out`` still
    holds the answer. Right on every trial (a new closure each) and after timing (new inputs)."""
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    seen = []

    def run():
        fingerprint = (float(q.sum()), float(k.sum()), float(v.sum()))
        if seen and seen[-1] == fingerprint:
            return None
        seen.append(fingerprint)
        out.copy_(exact(case, q, k, v))
        return None

    return run


def test_timed_calls_that_do_less_are_caught(attention):
    verdict = check(attention, impl(make_computes_once_per_inputs), CASE, "cpu", seed=0, trials=1)
    assert verdict.ok, verdict.reason  # the trials cannot see it
    guard = TimedCalls(verdict, "cpu")
    result = measure_cpu(verdict.last[0], timed_settings(), guard=guard)
    wrong = result["wrong_call"]
    n = len(result["samples"])
    assert n <= CPU_CHECK_BATCH  # the first batch's judged calls end it
    assert wrong.startswith(f"timed call {n} (checked at random, outside the timed region) differs from the "
                            "checked calls: ")
    assert f"{2 * 3 * 20 * 16} of {2 * 3 * 20 * 16} outputs are NaN/Inf" in wrong
    assert result["stop_reason"] == "a timed call was wrong"
    assert result["checked_calls"] == {"calls": n, "checked": 1}
    assert recheck(verdict, "cpu") == ""  # new inputs: it computes, so only the timed calls show it


def test_timed_calls_are_judged_at_random_not_only_at_the_end_of_a_batch(attention):
    """A closure that is right only on the last call of every batch (the one always judged) is caught
    by the others, drawn at random after each call."""

    def make(case, inputs, out):
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        calls = []
        untimed = 1 + 2  # its trial's call and the two warm-up calls

        def run():
            calls.append(1)
            out.copy_(exact(case, q, k, v))
            timed = len(calls) - untimed
            if timed > 0 and timed % CPU_CHECK_BATCH:
                out.add_(1.0)

        return run

    verdict = check(attention, impl(make), CASE, "cpu", seed=0, trials=1)
    assert verdict.ok, verdict.reason
    result = measure_cpu(verdict.last[0], timed_settings(warmup_calls=2), guard=TimedCalls(verdict, "cpu"))
    assert OVER_BOUND in result["wrong_call"]
    assert len(result["samples"]) < CPU_CHECK_BATCH  # caught before the end of the first batch


def test_timed_calls_name_the_inputs_they_modified(attention):
    verdict = check(attention, impl(make_correct), CASE, "cpu", seed=0, trials=1)
    guard = TimedCalls(verdict, "cpu")
    assert guard.unchanged_inputs() == ""
    verdict.last[1]["k"].mul_(2.0)
    assert guard.unchanged_inputs() == "the timed calls modified input(s) k"


def test_without_a_guard_timing_checks_nothing(attention):
    """The timing loop alone (kbench calibrate) neither poisons nor judges."""
    verdict = check(attention, impl(make_computes_once_per_inputs), CASE, "cpu", seed=0, trials=1)
    result = measure_cpu(verdict.last[0], timed_settings())
    assert "wrong_call" not in result and "checked_calls" not in result


# --- what a record says -----------------------------------------------------------------------

@pytest.mark.parametrize("suite_name,impl_name,case", [
    ("attention", "naive", {"n": 16, "d": 16, "batch": 1, "heads": 2, "dtype": "fp16", "causal": True}),
    ("matmul", "cublas", {"m": 16, "n": 24, "k": 40, "dtype": "fp32", "tf32": False}),
    ("reduction", "torch-sum", {"n": 5000, "dtype": "fp32"}),
    ("scan", "torch-cumsum", {"n": 5000, "dtype": "int32", "exclusive": False}),
])
def test_record_says_which_distributions_it_passed(registry, suite_name, impl_name, case):
    from kbench.worker import execute

    suite = registry.suite(suite_name)
    job = {"suite": suite_name, "impl": impl_name, "label": impl_name, "params": {}, "case": case, "seed": 0,
           "trials": 1, "flush_l2": True, "cuda_graph": False,
           "stop": {"min_samples": CPU_CHECK_BATCH, "max_samples": CPU_CHECK_BATCH, "min_time": 0.0,
                    "max_time": 10.0}}
    record = execute(registry, job, "cpu", {})
    assert record["status"] == "OK", record
    correctness_record = record["correctness"]
    assert correctness_record["ok"] is True and correctness_record["trials"] == len(suite.distributions) + 1
    assert list(correctness_record["distributions"]) == list(suite.distributions)
    assert len(suite.distributions) > 1
    bounded = suite.plain(Case(case), suite.make_inputs(Case(case), seed=0, device="cpu")) is not None
    for name, entry in correctness_record["distributions"].items():
        assert entry["max_abs_err"] is not None, name
        if bounded:
            assert entry["max_abs_err"] <= entry["allowed"], (name, entry)
        else:
            assert "allowed" not in entry
    assert ("bound" in correctness_record) is bounded
    # one batch of timed calls: its last one and CHECKED_PER_BATCH others judged
    assert record["timing"]["checked_calls"] == {"calls": CPU_CHECK_BATCH, "checked": 1 + CHECKED_PER_BATCH}


def _holders(obj) -> str:
    """What refers to ``obj`` (gc's referrers but the search's own list), to say in a failure where a
    tensor holding the answer lives: an attribute dict's keys, a frame's function, a container's type."""
    import gc
    import types

    names = []
    for ref in gc.get_referrers(obj):
        if isinstance(ref, types.FrameType):
            names.append(f"frame of {ref.f_code.co_name} ({ref.f_code.co_filename}:{ref.f_lineno})")
        elif isinstance(ref, dict):
            names.append(f"dict with keys {sorted(map(str, ref))[:8]}")
        elif not isinstance(ref, list) or len(ref) < 1000:  # not gc.get_objects()'s list
            names.append(type(ref).__name__)
    return "; ".join(names) or "nothing gc tracks"


@pytest.mark.parametrize("prepared", [False, True])
def test_no_tensor_of_the_process_holds_the_answer_while_a_closure_runs(attention, prepared):
    """While implementation code runs (trials drawn ahead or one by one, timed calls, the re-check), the
    only tensor holding the answer to its inputs is its own output: the harness's float64 reference is
    sealed between judgements, so a closure searching the process (gc) for it finds nothing to copy."""
    import gc

    # Unreachable tensors of earlier tests (the same case and seed, so the same answer) wait in gc's
    # cycles until a collection: gone first, so that what the search finds is this run's.
    gc.collect()
    found = []

    def make(case, inputs, out):
        own = {id(out), *(id(t) for t in inputs.values())}

        def run():
            answer = exact(case, inputs["q"], inputs["k"], inputs["v"]).double()
            for obj in gc.get_objects():
                # type(obj), not isinstance: isinstance reads obj.__class__, which some of torch's
                # deprecated module objects (torch.distributed.reduce_op) answer with a FutureWarning.
                if (issubclass(type(obj), torch.Tensor) and id(obj) not in own and obj is not answer
                        and tuple(obj.shape) == tuple(out.shape)
                        and torch.allclose(obj.detach().double(), answer, rtol=1e-3, atol=1e-3)):
                    found.append(f"{obj.dtype}, held by {_holders(obj)}")
            out.copy_(answer)

        return run

    trials = correctness.Trials(attention, CASE, "cpu", seed=0, trials=3)
    if prepared:
        trials.prepare()
    verdict = trials.run(impl(make))
    assert verdict.ok, verdict.reason
    result = measure_cpu(verdict.last[0], timed_settings(), guard=TimedCalls(verdict, "cpu"))
    assert "wrong_call" not in result and result["checked_calls"]["checked"] >= 1
    assert recheck(verdict, "cpu") == ""
    assert found == []


def test_trials_drawn_ahead_hold_no_stale_memory_in_their_output_buffers(attention, monkeypatch):
    """An output buffer comes from torch.empty: memory the allocator hands back, which may still hold what
    the harness computed just before (a trial's plain computation, the answer a closure could copy).
    A trial drawn ahead is called later than its buffer is made, so the buffer is poisoned when it is
    made, not only before its own call."""
    stale = lambda case, inputs: torch.ones_like(inputs["q"])  # noqa: E731 - memory that held an answer
    monkeypatch.setattr(type(attention), "make_output", lambda self, case, inputs: stale(case, inputs))
    trials = correctness.Trials(attention, CASE, "cpu", seed=0, trials=3)
    trials.prepare()
    assert len(trials.ready) > 1 and all(torch.isnan(t.out).all() for t in trials.ready)


def test_a_sealed_reference_opens_to_the_same_tensor_and_reads_as_noise():
    ref = torch.randn(4, 5, dtype=torch.float64)
    sealed = correctness.Sealed(ref)
    assert torch.equal(sealed.open(), ref) and sealed.open() is not sealed.open()
    assert sealed.bits.dtype == torch.int64
    assert not torch.allclose(sealed.bits.view(torch.float64).nan_to_num(), ref)
    for tensor in (torch.arange(6, dtype=torch.int32), torch.tensor(1.5, dtype=torch.float64), torch.tensor([True, False])):
        assert torch.equal(correctness.Sealed(tensor).open(), tensor)
    sealed_bits = sealed.bits.clone()
    with sealed.opened() as opened:  # in place, no copy: sealed again after the block
        assert torch.equal(opened, ref) and correctness.same_memory(opened, sealed.bits)
    assert torch.equal(sealed.bits, sealed_bits)
    with pytest.raises(RuntimeError), sealed.opened():
        raise RuntimeError("a judgement that raised")
    assert torch.equal(sealed.bits, sealed_bits)
