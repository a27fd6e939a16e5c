"""What a run measures: the implementations asked for, each with every combination of the parameter
values asked for, and the baselines their speedups are relative to, added in front when not asked for."""

from __future__ import annotations

from dataclasses import dataclass

from kbench.errors import UserError
from kbench.registry import Registry, Variant, _did_you_mean, parse_param_args, variants
from kbench.suite import Case, Suite


@dataclass(frozen=True)
class Selection:
    variants: list[Variant]  # baselines first where they were added
    added_baselines: list[str]  # baselines not asked for, added so that speedups can be computed


def baselines(suite: Suite, cases: list[Case], baseline: str | None = None) -> dict[str, str]:
    """Case key -> the implementation its speedups are relative to (``baseline``, else the suite's choice)."""
    return {case.key: baseline or suite.baseline_for(case) for case in cases}


def select(registry: Registry, suite: Suite, cases: list[Case], names: list[str] | None, params: list[str],
           baseline: str | None) -> Selection:
    """The variants of the implementations ``names`` (all when None) with the `--param` arguments
    ``params``, plus every baseline the cases need; UserError for a name that is not loaded."""
    impls = registry.select(suite.name, names)
    known = registry.implementations(suite.name)
    if baseline is not None and baseline not in known:
        raise UserError(f"--baseline: unknown implementation {baseline!r}{_did_you_mean(baseline, known)}")
    needed = list(dict.fromkeys(baselines(suite, cases, baseline).values()))
    for name in needed:
        if name not in known:  # the suite's own choice: a suite or kernel file is missing
            raise UserError(f"suite {suite.name!r} measures speedups against {name!r}, which is not loaded "
                            f"(give --baseline NAME)")
    asked = {impl.name for impl in impls}
    added = [name for name in needed if name not in asked]
    chosen = variants([*(known[name] for name in added), *impls], parse_param_args(params))
    return Selection(chosen, added)
