"""Is the implementation right? Trials on fresh random inputs against the float64 reference, and
the timed calls themselves checked.

Each trial: fresh inputs (a new seed, and the next of the suite's input distributions, so a trial
set covers every one of them), inputs cloned, the output buffer poisoned (NaN, or the most negative
integer) before the call, the result checked for shape, dtype and non-finite values, then for its
error against the float64 reference, and the inputs compared with their clones afterwards. A result
that is the harness's own tensor (the reference's output, or the clones of the inputs) is refused
whatever its values. Between judgements the reference is kept sealed (:class:`Sealed`, its bits XORed
with a random key): while the implementation's code runs, no tensor in the process but its own
output holds the answer, so a closure searching the process for one to copy finds nothing.

How far from the reference a result may be:

- Where the suite has a *plain* computation of the problem in the case's own precision
  (:meth:`kbench.suite.Suite.plain`: the inputs in their type, fp32 accumulation, intermediates
  rounded where a straightforward kernel rounds them), the bound is what such a correct kernel
  makes: ``max |out - ref| <= c x max |plain - ref| + floor`` (c = PLAIN_FACTOR: 2 for fp16 and
  bf16 outputs, 32 for fp32), with ``floor`` an ulp of the output type (four for fp32) at the
  reference's largest magnitude (so outputs that are exact or nearly so still leave a correct kernel
  its last roundings). This is FlashAttention's own test rule; it
  sees precision: a kernel that computes an fp16 case in bf16, or an fp32 product on TF32, is
  several times over it.
- Otherwise ``|out - ref| <= atol + rtol·|ref|`` element by element (:meth:`Suite.tolerance`):
  suites whose answer is exact (integer sums: tolerance 0) and those whose error is bounded analytically.
- Where the suite judges results itself (:meth:`Suite.judge`: integer codes whose rounding ties may go
  either way, fields of several types packed in one buffer), its verdict, once the result has the
  output's shape and type.

The error the inputs themselves carry (:meth:`Suite.input_error`: a quantized input against the values
before quantization) is measured once per input distribution and recorded beside the kernel's own.

The timed calls are checked too (:class:`TimedCalls`): the output is poisoned before every timed
call (outside the timed region, like the L2 flush), and the last call of every batch of samples
and randomly chosen others are judged against the reference on the spot. A closure that does less
work when it is timed than when it is checked fails there.

After timing, :func:`recheck` twice refills the same input tensors with new random values and calls the
timed closure (or replays its graph), each call judged and, on a GPU, timed as the samples were: a closure that
replays an answer it cached (from set-up, an earlier call or an earlier trial) fails there, and so does
one that keeps its answer while its inputs look unchanged (right on every timed call, all on the same
inputs, but far slower on inputs it has not seen). So a closure must read its inputs, and do its work,
on every call.
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import dataclass, field

from kbench.dtypes import UNIT_ROUNDOFF

# c in max|out - ref| <= c·max|plain - ref| + floor, by output type. FlashAttention's tests use 2 for
# fp16 and bf16; correct kernels stay under 0.3 of that bound in attention, while computing in bf16 the
# case asked in fp16 is 1.3-12 times over it. In fp32 the error of a correct kernel depends on its
# order of summation and its exponential more than on the type (on the H200, triton-fa2's ex2.approx
# reached 9.7x the plain computation's error on outlier inputs), so the factor is 32 there: an fp32
# product on TF32 is about 700 times over, one in bf16 500 times and more.
PLAIN_FACTOR = {"float16": 2.0, "bfloat16": 2.0, "float32": 32.0, "float64": 32.0}
# The floor, in ulps of the output type at the reference's largest magnitude: rounding the exact answer
# costs up to half of one; fp32 kernels' exponentials and divisions are a few ulps off on their own
# (torch's memory-efficient SDPA is 2 ulps off where the plain computation is exact, at N = 1).
FLOOR_ULPS = {"float16": 1, "bfloat16": 1, "float32": 4, "float64": 4}
# Timed calls judged in each batch of samples besides its last one, chosen at random after the call.
CHECKED_PER_BATCH = 2
# After timing (recheck): this many calls, each on inputs refilled with new random values. On a GPU each
# is timed as the samples were (after the L2 flush and the hold), and the faster may take at most
# FRESH_FACTOR x the timed median plus FRESH_SLACK_MS: on an H100 correct kernels took 1.00-1.08x their
# median (attention, N = 4096), a closure copying a kept answer 27.6x. Two rounds, so that one call
# slowed by something else (the host, the allocator) is not the verdict.
RECHECK_ROUNDS = 2
FRESH_FACTOR = 2.0
FRESH_SLACK_MS = 0.01


@dataclass
class Bound:
    """The precision-aware limit of one set of inputs: max |out - ref| <= factor·plain_err + floor."""

    plain_err: float
    floor: float
    factor: float = 2.0

    @property
    def limit(self) -> float:
        return self.factor * self.plain_err + self.floor

    def describe(self, dtype: str) -> str:
        return (f"{self.factor:g} x the plain {dtype} computation's {self.plain_err:.3g} "
                f"+ {self.floor:.3g} = {self.limit:.3g}")


class Sealed:
    """A reference kept out of reach of the implementation's code between judgements: its bits XORed
    with a random key, so no tensor holding the right answer (in any type) is alive while a closure
    runs. A closure that looks among the process's objects for the answer to copy (gc, frames) finds
    only noise; :meth:`open` gives the tensor back, for as long as a judgement takes."""

    _INT = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}

    def __init__(self, tensor):
        import torch

        tensor = tensor.detach().contiguous()
        self.dtype = tensor.dtype
        size = tensor.element_size()
        signed = size in self._INT  # an integer of the element's width; other widths (complex) as bytes
        bits = tensor.view(getattr(torch, self._INT[size]) if signed else torch.uint8)
        width = 8 * size if signed else 8
        # A key of the integer's width, in its signed range (uint8: 0..255).
        key = random.SystemRandom().getrandbits(width)
        self._key = key - (1 << width) if signed and key >= 1 << (width - 1) else key
        self.bits = bits ^ self._key  # a new tensor: the reference itself is let go

    def open(self):
        """The reference, as a new tensor."""
        return (self.bits ^ self._key).view(self.dtype)

    @contextmanager
    def opened(self):
        """The reference itself for as long as the block runs: the bits unsealed in place and sealed
        again after, so that judging a large reference takes no second copy of it."""
        self.bits.bitwise_xor_(self._key)
        try:
            yield self.bits.view(self.dtype)
        finally:
            self.bits.bitwise_xor_(self._key)


@dataclass
class Expected:
    """What a correct call on one set of inputs returns: the float64 reference (sealed between
    judgements), the output's type and shape (``like``, the output buffer), and how far from the
    reference it may be."""

    sealed: Sealed
    like: object
    atol: float
    rtol: float
    bound: Bound | None = None
    dtype: str = ""
    harness: dict = field(default_factory=dict)  # tensors the implementation must never hand back
    originals: dict = field(default_factory=dict)  # the harness's copies of the inputs, name -> tensor
    # The suite's own comparison (Suite.judge(result, ref)) of a result of the right shape and type, or None.
    suite_judge: object = None

    @property
    def ref(self):
        """The reference, opened (a new tensor each time)."""
        return self.sealed.open()

    def judge(self, result) -> tuple[str, float | None, float | None]:
        with self.sealed.opened() as ref:  # open only while this judgement runs, never while the closure does
            own = None if self.suite_judge is None else (lambda r: self.suite_judge(r, ref))
            return compare(result, self.like, ref, self.atol, self.rtol, self.harness, self.bound, self.dtype,
                           own)


@dataclass
class Verdict:
    ok: bool
    reason: str = ""
    trials: int = 0
    max_abs_err: float | None = 0.0  # None: not measurable (wrong shape, NaN output)
    max_rel_err: float | None = 0.0  # max |out - ref| / max |ref|
    atol: float = 0.0
    rtol: float = 0.0
    # distribution -> its worst trial: max_abs_err, and the bound where the suite has a plain computation
    distributions: dict = field(default_factory=dict)
    # The last trial's closure, inputs, output buffer and Expected, reused for timing.
    last: tuple | None = field(default=None, repr=False)
    # (suite, case, seed, distribution) that recheck() draws its new inputs from; None: the last inputs again.
    refresh: tuple | None = field(default=None, repr=False)
    # What the inputs themselves lose (Suite.input_error): name -> worst figures and each distribution's.
    input_error: dict = field(default_factory=dict)
    # recheck()'s timed calls on new inputs, in ms (none where it had no timer).
    new_inputs_ms: list = field(default_factory=list)

    def as_record(self) -> dict:
        record = {
            "ok": self.ok,
            "reason": self.reason,
            "trials": self.trials,
            "max_abs_err": self.max_abs_err,
            "max_rel_err": self.max_rel_err,
            "atol": self.atol,
            "rtol": self.rtol,
            "distributions": self.distributions,
        }
        if any("allowed" in d for d in self.distributions.values()):
            factor = next(d["factor"] for d in self.distributions.values() if "factor" in d)
            record["bound"] = f"max |out - ref| <= {factor:g} x max |plain - ref| + a floor of ulps of the output"
        if self.input_error:
            record["input_error"] = self.input_error
        return record

    def note_input_error(self, distribution: str, errors: dict) -> None:
        """Keep one distribution's input errors, and each name's worst figures over the distributions."""
        for name, figures in errors.items():
            entry = self.input_error.setdefault(name, {})
            for key, value in figures.items():
                entry[key] = max(entry.get(key, value), value)
            entry.setdefault("distributions", {})[distribution] = dict(figures)

    def note(self, distribution: str, max_abs: float | None, bound: Bound | None) -> None:
        """Keep the worst trial of each distribution (the record says which ones the kernel passed)."""
        entry = self.distributions.setdefault(distribution, {"max_abs_err": 0.0})
        if max_abs is None:
            entry["max_abs_err"] = None
        elif entry["max_abs_err"] is not None and max_abs >= entry["max_abs_err"]:
            entry["max_abs_err"] = max_abs
            if bound is not None:
                entry.update(plain_max_abs_err=bound.plain_err, allowed=bound.limit, factor=bound.factor)


def poison(tensor) -> None:
    """Fill an output buffer with a value no correct kernel leaves behind."""
    import torch

    if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
        tensor.fill_(float("nan"))
    else:
        tensor.fill_(torch.iinfo(tensor.dtype).min)


def call_and_collect(fn, out, device: str):
    """Poison ``out``, call the closure, and return what it produced (its return value or ``out``)."""
    import torch

    poison(out)
    returned = fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return out if returned is None else returned


def same_memory(a, b) -> bool:
    """Do two tensors share storage (one is the other, or a view of it)?"""
    import torch

    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.device != b.device:
        return False
    try:
        pa, pb = a.untyped_storage().data_ptr(), b.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # tensors without storage (sparse, meta...)
        return False
    return pa != 0 and pa == pb


def compare(result, expected_like, ref, atol: float, rtol: float, harness: dict | None = None,
            bound: Bound | None = None, dtype: str = "", suite_judge=None) -> tuple[str, float | None, float | None]:
    """Returns (failure reason or "", max abs error, max relative error); errors are None when unmeasurable.

    ``harness``: name -> tensor the implementation must never hand back as its result
    (the sealed references, the clones of the inputs): such a result would be compared with itself.
    ``bound``: the precision-aware limit on the largest error; without one, atol and rtol element by element.
    ``suite_judge``: result -> the suite's own verdict (Suite.judge) or None, asked once the result has
    the output's shape and type.
    """
    import torch

    if not isinstance(result, torch.Tensor):
        return f"returned {type(result).__name__}, not a tensor", None, None
    for name, tensor in {"the reference's output": ref, **(harness or {})}.items():
        if same_memory(result, tensor):
            return f"returned {name} (a tensor of the harness, not its own result)", None, None
    if tuple(result.shape) != tuple(ref.shape):
        return f"wrong shape {tuple(result.shape)}, expected {tuple(ref.shape)}", None, None
    if result.dtype != expected_like.dtype:
        return f"wrong dtype {result.dtype}, expected {expected_like.dtype}", None, None
    own = suite_judge(result) if suite_judge is not None else None
    if own is not None:
        return own
    got = result.detach().to(device=ref.device, dtype=torch.float64)
    finite = torch.isfinite(got)
    bad_values = int((~finite).sum())
    if bad_values:
        return f"{bad_values} of {got.numel()} outputs are NaN/Inf (unwritten, or overflow)", None, None
    err = (got - ref).abs()
    max_abs = float(err.max()) if err.numel() else 0.0
    scale = float(ref.abs().max()) if ref.numel() else 0.0
    max_rel = max_abs / scale if scale > 0 else max_abs
    if bound is not None:
        if max_abs > bound.limit:
            return (f"max abs err {max_abs:.3g} is over what a correct {dtype} kernel makes "
                    f"({bound.describe(dtype)})", max_abs, max_rel)
        return "", max_abs, max_rel
    outside = int((err > atol + rtol * ref.abs()).sum())
    if outside:
        return (
            f"{outside} of {got.numel()} outputs outside atol={atol:g} rtol={rtol:g} (max abs err {max_abs:.3g})",
            max_abs,
            max_rel,
        )
    return "", max_abs, max_rel


def expect(suite, case, originals: dict, out, stale_ref=None) -> Expected:
    """The float64 reference of ``originals`` and the bound a correct result keeps to."""
    ref = suite.reference(case, originals)
    atol, rtol = suite.tolerance(case)
    dtype = suite.dtype(case)
    bound = None
    plain = suite.plain(case, originals)
    if plain is not None:
        # Several plain computations (Suite.plain): the largest of their errors.
        plains = list(plain) if isinstance(plain, tuple) else [plain]
        del plain
        plain_err = 0.0
        while plains:
            plain_err = max(plain_err, _max_abs_diff(plains.pop(), ref))
        out_dtype = str(out.dtype).removeprefix("torch.")
        bound = Bound(plain_err=plain_err, floor=_ulp_floor(ref, out_dtype), factor=PLAIN_FACTOR.get(out_dtype, 2.0))
    sealed = Sealed(ref)
    del ref
    return Expected(sealed=sealed, like=out, atol=atol, rtol=rtol, bound=bound, dtype=dtype,
                    harness=_harness(originals, stale_ref), originals=originals,
                    suite_judge=lambda result, ref: suite.judge(case, result, ref, originals))


def _max_abs_diff(a, b) -> float:
    import torch

    if not a.numel():
        return 0.0
    return float((a.to(device=b.device, dtype=torch.float64) - b).abs().max())


# One unit in the last place at 1.0 (2 x the unit roundoff) for the torch dtype names outputs have.
_ULP = {"float16": 2 * UNIT_ROUNDOFF["fp16"], "bfloat16": 2 * UNIT_ROUNDOFF["bf16"],
        "float32": 2 * UNIT_ROUNDOFF["fp32"], "float64": 2.0**-52}


def _ulp_floor(ref, out_dtype: str) -> float:
    """FLOOR_ULPS ulps of the output type at the reference's largest magnitude: what rounding the
    exact answer to that type, and a correct kernel's last operations, may cost on their own."""
    scale = float(ref.abs().max()) if ref.numel() else 0.0
    return FLOOR_ULPS.get(out_dtype, 1) * _ULP.get(out_dtype, 0.0) * scale


def check(suite, impl, case, device: str, seed: int, trials: int, params: dict | None = None) -> Verdict:
    """``trials`` trials (at least one per input distribution of the suite, the last one from its first
    distribution: those inputs are timed next), each on fresh inputs drawn just before its call."""
    return Trials(suite, case, device, seed, trials).run(impl, params)


@dataclass
class Trial:
    """One trial's inputs, the harness's copies of them, the output buffer and (once worked out) what a
    correct call returns."""

    number: int  # from 0
    seed: int
    distribution: str
    inputs: dict
    originals: dict
    out: object
    expected: Expected | None = None


class Trials:
    """The trials of one check. Each is drawn just before its call (:meth:`run` alone), or every one of
    them ahead (:meth:`prepare`): inputs, copies, float64 references and bounds, the harness's part of
    a check, in which no code of the implementation's runs; then :meth:`run` calls the implementation
    on each in turn."""

    def __init__(self, suite, case, device: str, seed: int, trials: int):
        atol, rtol = suite.tolerance(case)
        self.verdict = Verdict(ok=True, atol=atol, rtol=rtol)
        distributions = suite.distributions
        plan = [distributions[t % len(distributions)] for t in range(max(trials, len(distributions)))]
        if plan[-1] != distributions[0]:
            # The last trial's inputs are the ones timed: always the suite's first (typical) distribution,
            # since speed can depend on the data (a softmax of extreme scores is mostly zeros).
            plan.append(distributions[0])
        self.suite, self.case, self.device, self.seed, self.plan = suite, case, device, seed, plan
        self.ready: list[Trial] = []  # drawn ahead, by prepare()

    def _draw(self, number: int) -> Trial:
        suite, case, device = self.suite, self.case, self.device
        distribution, seed = self.plan[number], self.seed + number
        inputs = suite.draw(case, seed=seed, device=device, distribution=distribution)
        if self.plan.index(distribution) == number:  # once a distribution, of the inputs its first trial gets
            self.verdict.note_input_error(distribution, suite.input_error(case, seed, device, distribution))
        originals = {name: t.clone() for name, t in inputs.items()}
        # Poisoned now, not only before its call: a buffer from torch.empty may hold what the harness just
        # computed (a trial's plain computation), and a trial drawn ahead waits while others are called.
        out = suite.make_output(case, inputs)
        poison(out)
        return Trial(number, seed, distribution, inputs, originals, out)

    def prepare(self) -> None:
        """Draw every trial and work out its expected result now. Each trial's list of the harness's
        tensors, which a result must never be, then holds every other trial's reference too."""
        for number in range(len(self.plan)):
            trial = self._draw(number)
            trial.expected = expect(self.suite, self.case, trial.originals, trial.out)
            self.ready.append(trial)
        for trial in self.ready:
            for other in self.ready:
                if other is not trial:
                    trial.expected.harness[f"the reference's output (of trial {other.number + 1})"] = \
                        other.expected.sealed.bits

    def run(self, impl, params: dict | None = None) -> Verdict:
        """Call the implementation on each trial and judge it; the verdict (its ``last`` holds the last
        trial's closure and tensors, for timing)."""
        verdict, suite, case, device = self.verdict, self.suite, self.case, self.device
        stale = None  # the previous trial's (sealed) reference, which the next call must not hand back
        for number in range(len(self.plan)):
            trial = self.ready[number] if number < len(self.ready) else self._draw(number)
            fn = impl.make(case, trial.inputs, trial.out, **(params or {}))
            result = call_and_collect(fn, trial.out, device)
            if trial.expected is None:  # worked out after the call: never there for a closure to find
                trial.expected = expect(suite, case, trial.originals, trial.out, stale_ref=stale)
            expected = trial.expected
            stale = expected.sealed.bits
            reason, max_abs, max_rel = expected.judge(result)
            verdict.trials = number + 1
            verdict.max_abs_err = None if max_abs is None else max(verdict.max_abs_err or 0.0, max_abs)
            verdict.max_rel_err = None if max_rel is None else max(verdict.max_rel_err or 0.0, max_rel)
            verdict.note(trial.distribution, max_abs, expected.bound)
            reason = _with_modified_inputs(trial.inputs, trial.originals, reason)
            if reason:
                verdict.ok = False
                verdict.reason = f"trial {number + 1} (seed {trial.seed}, {trial.distribution} inputs): {reason}"
                return verdict
            _spoil(result, trial.out)
            verdict.last = (fn, trial.inputs, trial.out, expected)
        verdict.refresh = (suite, case, self.seed + len(self.plan), suite.distributions[0])
        self.ready = []
        return verdict


def _spoil(result, out) -> None:
    """Poison a right answer the closure returned in a tensor of its own, once it has been judged:
    memory the allocator hands out later (to a closure that only pretends to compute) then holds NaN,
    not this answer. (A result that passed is never one of the harness's tensors.)"""
    import torch

    if isinstance(result, torch.Tensor) and result is not out and not same_memory(result, out):
        poison(result)


def _harness(originals: dict, stale_ref) -> dict:
    named = {f"the harness's copy of input {name}": t for name, t in originals.items()}
    if stale_ref is not None:
        named["the reference's output (of an earlier trial)"] = stale_ref
    return named


def _changed(inputs: dict, originals: dict) -> list[str]:
    """The names of the inputs that differ from the harness's copies of them."""
    import torch

    return [name for name, t in inputs.items() if not torch.equal(t, originals[name])]


def _with_modified_inputs(inputs: dict, originals: dict, reason: str) -> str:
    """A closure that changed its inputs is named first (whatever its output), then any wrong output."""
    changed = _changed(inputs, originals)
    if not changed:
        return reason
    modified = f"modified its input(s) {', '.join(changed)}"
    return f"{modified}; {reason}" if reason else modified


class TimedCalls:
    """The timed calls of a closure that passed its trials, checked like the trials were.

    The timing loop calls :meth:`before` ahead of every timed call (outside the timed region):
    the output buffer is poisoned, so a call that skips work leaves NaN behind, never an earlier
    call's answer. After a call it asks :meth:`chosen` whether to judge this one (the last call of
    every batch, and ``CHECKED_PER_BATCH`` others at random, drawn after the call so the closure
    cannot know), then hands what the call returned to :meth:`after`, which poisons a tensor the
    closure returned (not its output buffer), so memory the allocator hands back later holds no answer.
    """

    def __init__(self, verdict: Verdict, device: str, per_batch: int = CHECKED_PER_BATCH):
        _, self.inputs, self.out, self.expected = verdict.last
        # What a returned tensor must not be poisoned as: the inputs and the harness's own tensors (a
        # closure handing one back is judged wrong when its call is judged, but must not corrupt them).
        self._never_spoiled = (*self.inputs.values(), *self.expected.harness.values(), self.expected.sealed.bits)
        self.device = device
        self.per_batch = per_batch
        self.checked = 0
        self.calls = 0
        self._random = random.SystemRandom()  # not the closure's (or torch's) seeded generators
        self._batch: set[int] = set()

    def plan_batch(self, size: int) -> None:
        """Pick which of the next ``size`` calls are judged: the last one and ``per_batch`` others."""
        others = self._random.sample(range(size - 1), min(self.per_batch, size - 1)) if size > 1 else []
        self._batch = {size - 1, *others}

    def before(self) -> None:
        if self.device == "cuda" and not self.out.is_cuda:
            # An output in host memory (a pinned buffer a copy back writes) may still be the target of the
            # previous call's copy back: let it land first, or it could overwrite the poison.
            import torch

            torch.cuda.synchronize()
        poison(self.out)

    def chosen(self, index_in_batch: int) -> bool:
        return index_in_batch in self._batch

    def judge(self, returned) -> str:
        """The reason this timed call is wrong, or ""; synchronises the device first."""
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()
        self.checked += 1
        result = self.out if returned is None else returned
        reason, _, _ = self.expected.judge(result)
        if reason:
            return (f"timed call {self.calls + 1} (checked at random, outside the timed region) differs from "
                    f"the checked calls: {reason}")
        return ""

    def after(self, returned) -> None:
        self.calls += 1
        if returned is not None and not any(same_memory(returned, t) for t in self._never_spoiled):
            _spoil(returned, self.out)

    def unchanged_inputs(self) -> str:
        """After timing: did the timed calls leave the inputs as they were?"""
        changed = _changed(self.inputs, self.expected.originals)
        return f"the timed calls modified input(s) {', '.join(changed)}" if changed else ""

    def summary(self) -> dict:
        return {"calls": self.calls, "checked": self.checked}


def recheck(verdict: Verdict, device: str, replay=None, timer=None, median_ms: float | None = None) -> str:
    """After timing, call the last trial's closure again, on its input tensors refilled with new random
    values (RECHECK_ROUNDS times, new values each time): a kernel that is only right the first time, whose
    timed calls corrupt state, or that replays an answer it cached fails here.

    ``replay``: the CUDA graph the timed calls were (timing's REPLAY_CALL), replayed on the new inputs
    before the closure is called and judged against the same reference. Every timed replay read the
    inputs the graph was captured with, so a closure that records something else while captured than it
    runs when called (a copy of an answer it keeps, refreshed by each direct call) passes the timed
    checks; replayed first on new inputs, its graph gives the old answer.

    ``timer`` (the sampler's ``time_once``) and ``median_ms`` (the timed calls' median): what the samples
    timed (the graph, or the closure) is timed the same way on each set of new inputs, and the fastest of
    those calls may take at most FRESH_FACTOR x the median plus FRESH_SLACK_MS. Every timed call read the
    same inputs, so a closure that keeps its last answer and copies it back while its inputs look
    unchanged (a fingerprint of a few of their elements and their addresses) is right on every timed
    call and timed as a copy; on inputs it has not seen it must do the work, at the work's speed."""
    fn, inputs, out, expected = verdict.last
    if verdict.refresh is None:  # built without a suite: the same inputs again
        reason = _replayed_wrong(replay, out, device, expected) or _wrong(fn, out, device, expected)
        return f"after timing: {reason}" if reason else ""
    suite, case, seed, distribution = verdict.refresh
    timed = replay if replay is not None else fn
    took = []
    stale = expected.sealed.bits  # the reference a call must not hand back: the last one judged against
    for round_seed in range(seed, seed + RECHECK_ROUNDS):
        originals = suite.draw(case, seed=round_seed, device=device, distribution=distribution)
        new = expect(suite, case, originals, out, stale_ref=stale)
        # The inputs written last, as the timed calls found them: in the CPU's caches as far as they fit.
        for name, tensor in inputs.items():
            tensor.copy_(originals[name])
        if timer is not None:
            poison(out)
            seconds, returned = timer(timed)  # on a GPU, synchronised after the end event
            result = out if returned is None else returned
        else:
            seconds, result = None, call_and_collect(timed, out, device)
        reason, _, _ = new.judge(result)
        if replay is not None:  # then the closure itself, called directly
            reason = _as_replayed(reason) or _wrong(fn, out, device, new)
        reason = _with_modified_inputs(inputs, originals, reason)  # by either call
        if reason:
            return f"after timing: on new {distribution} inputs (seed {round_seed}), {reason}"
        took.append(seconds)
        # Only this round's sealed reference is kept into the next: a large case's inputs are not held twice.
        stale = new.sealed.bits
        del new, originals, result
    if timer is None or not median_ms:
        return ""
    verdict.new_inputs_ms = [round(t * 1e3, 6) for t in took]
    fastest_ms = min(took) * 1e3
    if fastest_ms > FRESH_FACTOR * median_ms + FRESH_SLACK_MS:
        return (f"after timing: its fastest call on new inputs took {fastest_ms:.3g} ms, "
                f"{fastest_ms / median_ms:.1f}x the timed calls' median of {median_ms:.3g} ms: the timed calls, "
                "all on the same inputs, did less than a call on inputs it had not seen (an answer kept between calls?)")
    return ""


def _wrong(fn, out, device: str, expected) -> str:
    """What is wrong with one call of ``fn`` against ``expected``, or ""."""
    reason, _, _ = expected.judge(call_and_collect(fn, out, device))
    return reason


def _replayed_wrong(replay, out, device: str, expected) -> str:
    """The same for one replay of recheck's CUDA graph, where there is one, saying it was the graph."""
    return _as_replayed(_wrong(replay, out, device, expected)) if replay is not None else ""


def _as_replayed(reason: str) -> str:
    """A reason found on a replay of the graph the row was timed as, saying so."""
    return f"the CUDA graph it was timed as, replayed: {reason}" if reason else ""
