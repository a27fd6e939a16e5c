"""Is the implementation right? Several trials on fresh random inputs against the float64 reference.

Each trial: fresh inputs (a new seed), inputs cloned, the output buffer
poisoned (NaN, or the most negative integer) before the call, the result
checked for shape, dtype, non-finite values and |out - ref| <= atol + rtol·|ref|,
and the inputs compared with their clones afterwards. A result that is the
harness's own tensor (the reference's output, or the clones of the inputs)
is refused whatever its values.

After timing, :func:`recheck` refills the same input tensors with new random
values and calls the timed closure once more: a closure that replays an
answer it cached (from set-up, an earlier call or an earlier trial) fails
there. So a closure must read its inputs on every call.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Verdict:
    ok: bool
    reason: str = ""
    trials: int = 0
    max_abs_err: float | None = 0.0  # None: not measurable (wrong shape, NaN output)
    max_rel_err: float | None = 0.0  # max |out - ref| / max |ref|
    atol: float = 0.0
    rtol: float = 0.0
    # The last trial's closure, inputs, output buffer and reference, reused for timing.
    last: tuple | None = field(default=None, repr=False)
    # (suite, case, seed) that recheck() draws its new inputs from; None: recheck reuses the last inputs.
    refresh: tuple | None = field(default=None, repr=False)

    def as_record(self) -> dict:
        return {
            "ok": self.ok,
            "reason": self.reason,
            "trials": self.trials,
            "max_abs_err": self.max_abs_err,
            "max_rel_err": self.max_rel_err,
            "atol": self.atol,
            "rtol": self.rtol,
        }


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


def compare(result, expected_like, ref, atol: float, rtol: float,
            harness: dict | None = None) -> tuple[str, float | None, float | None]:
    """Returns (failure reason or "", max abs error, max relative error); errors are None when unmeasurable.

    ``harness``: name -> tensor the implementation must never hand back as its result
    (the reference's output, the clones of the inputs): such a result would be compared with itself.
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
    got = result.detach().to(device=ref.device, dtype=torch.float64)
    finite = torch.isfinite(got)
    bad_values = int((~finite).sum())
    if bad_values:
        return f"{bad_values} of {got.numel()} outputs are NaN/Inf (unwritten, or overflow)", None, None
    err = (got - ref).abs()
    max_abs = float(err.max()) if err.numel() else 0.0
    scale = float(ref.abs().max()) if ref.numel() else 0.0
    max_rel = max_abs / scale if scale > 0 else max_abs
    outside = int((err > atol + rtol * ref.abs()).sum())
    if outside:
        return (
            f"{outside} of {got.numel()} outputs outside atol={atol:g} rtol={rtol:g} (max abs err {max_abs:.3g})",
            max_abs,
            max_rel,
        )
    return "", max_abs, max_rel


def check(suite, impl, case, device: str, seed: int, trials: int, params: dict | None = None) -> Verdict:
    atol, rtol = suite.tolerance(case)
    verdict = Verdict(ok=True, atol=atol, rtol=rtol)
    ref = None  # the previous trial's reference is alive during the next call: never accept it back
    for trial in range(trials):
        inputs = suite.make_inputs(case, seed=seed + trial, device=device)
        originals = {name: t.clone() for name, t in inputs.items()}
        out = suite.make_output(case, inputs)
        fn = impl.make(case, inputs, out, **(params or {}))
        result = call_and_collect(fn, out, device)
        stale = ref
        ref = suite.reference(case, originals)
        reason, max_abs, max_rel = compare(result, out, ref, atol, rtol, _harness(originals, stale))
        verdict.trials = trial + 1
        verdict.max_abs_err = None if max_abs is None else max(verdict.max_abs_err or 0.0, max_abs)
        verdict.max_rel_err = None if max_rel is None else max(verdict.max_rel_err or 0.0, max_rel)
        reason = _with_modified_inputs(inputs, originals, reason)
        if reason:
            verdict.ok = False
            verdict.reason = f"trial {trial + 1} (seed {seed + trial}): {reason}"
            return verdict
        verdict.last = (fn, inputs, out, ref)
    verdict.refresh = (suite, case, seed + trials)
    return verdict


def _harness(originals: dict, stale_ref) -> dict:
    named = {f"the harness's copy of input {name}": t for name, t in originals.items()}
    if stale_ref is not None:
        named["the reference's output (of an earlier trial)"] = stale_ref
    return named


def _with_modified_inputs(inputs: dict, originals: dict, reason: str) -> str:
    """A closure that changed its inputs is named first (whatever its output), then any wrong output."""
    import torch

    changed = [name for name, t in inputs.items() if not torch.equal(t, originals[name])]
    if not changed:
        return reason
    modified = f"modified its input(s) {', '.join(changed)}"
    return f"{modified}; {reason}" if reason else modified


def recheck(verdict: Verdict, device: str) -> str:
    """After timing, call the last trial's closure once more, on its input tensors refilled with new
    random values: a kernel that is only right the first time, whose timed calls corrupt state, or
    that replays an answer it cached fails here."""
    fn, inputs, out, ref = verdict.last
    if verdict.refresh is None:  # built without a suite: the same inputs again
        result = call_and_collect(fn, out, device)
        reason, _, _ = compare(result, out, ref, verdict.atol, verdict.rtol)
        return f"after timing: {reason}" if reason else ""
    suite, case, seed = verdict.refresh
    fresh = suite.make_inputs(case, seed=seed, device=device)
    for name, tensor in inputs.items():
        tensor.copy_(fresh[name])
    originals = {name: t.clone() for name, t in inputs.items()}
    result = call_and_collect(fn, out, device)
    new_ref = suite.reference(case, originals)
    reason, _, _ = compare(result, out, new_ref, verdict.atol, verdict.rtol, _harness(originals, ref))
    reason = _with_modified_inputs(inputs, originals, reason)
    return f"after timing: on new inputs (seed {seed}), {reason}" if reason else ""
