"""Is the implementation right? Several trials on fresh random inputs against the float64 reference.

Each trial: fresh inputs (a new seed), inputs cloned, the output buffer
poisoned (NaN, or the most negative integer) before the call, the result
checked for shape, dtype, non-finite values and |out - ref| <= atol + rtol·|ref|,
and the inputs compared with their clones afterwards.
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


def compare(result, expected_like, ref, atol: float, rtol: float) -> tuple[str, float | None, float | None]:
    """Returns (failure reason or "", max abs error, max relative error); errors are None when unmeasurable."""
    import torch

    if not isinstance(result, torch.Tensor):
        return f"returned {type(result).__name__}, not a tensor", None, None
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
    import torch

    atol, rtol = suite.tolerance(case)
    verdict = Verdict(ok=True, atol=atol, rtol=rtol)
    for trial in range(trials):
        inputs = suite.make_inputs(case, seed=seed + trial, device=device)
        originals = {name: t.clone() for name, t in inputs.items()}
        out = suite.make_output(case, inputs)
        fn = impl.make(case, inputs, out, **(params or {}))
        result = call_and_collect(fn, out, device)
        ref = suite.reference(case, originals)
        reason, max_abs, max_rel = compare(result, out, ref, atol, rtol)
        verdict.trials = trial + 1
        verdict.max_abs_err = None if max_abs is None else max(verdict.max_abs_err or 0.0, max_abs)
        verdict.max_rel_err = None if max_rel is None else max(verdict.max_rel_err or 0.0, max_rel)
        if not reason:
            changed = [name for name, t in inputs.items() if not torch.equal(t, originals[name])]
            if changed:
                reason = f"modified its input(s) {', '.join(changed)}"
        if reason:
            verdict.ok = False
            verdict.reason = f"trial {trial + 1} (seed {seed + trial}): {reason}"
            return verdict
        verdict.last = (fn, inputs, out, ref)
    return verdict


def recheck(verdict: Verdict, device: str) -> str:
    """After timing, run the last trial's closure once more on its inputs: a kernel
    that is only right the first time (or whose timed calls corrupt state) fails here."""
    fn, inputs, out, ref = verdict.last
    result = call_and_collect(fn, out, device)
    reason, _, _ = compare(result, out, ref, verdict.atol, verdict.rtol)
    return f"after timing: {reason}" if reason else ""
