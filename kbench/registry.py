"""The registry: suites and the implementations that solve them.

Files register themselves while :mod:`kbench.loader` executes them:

    @kbench.registry.suite
    class Attention(Suite): ...

    @kbench.registry.implementation("attention", "naive", backend="torch")
    def naive(case, inputs, out):
        ...            # set-up, never timed
        return run     # zero-argument closure: the unit that is timed

The closure either writes into ``out`` (which kbench poisons with NaN before
every call, so unwritten elements are caught) and returns None, or returns a
tensor of its own.
"""

from __future__ import annotations

import contextlib
import difflib
import itertools
from dataclasses import dataclass, field
from typing import Callable

from kbench.errors import UserError
from kbench.suite import Case, Suite, parse_value

# A closure factory: make(case, inputs, out) -> zero-argument callable.
Factory = Callable[..., Callable[[], object]]


@dataclass(frozen=True)
class Needs:
    """What an implementation needs to run. Anything missing makes it a SKIP with the reason."""

    cuda: bool = False  # needs a CUDA device (False: also runs on CPU tensors)
    modules: tuple[str, ...] = ("torch",)  # Python modules that must be importable
    min_cc: tuple[int, int] | None = None  # minimum compute capability
    dtypes: tuple[str, ...] | None = None  # supported dtypes (None: all of the suite's)
    # Shape-level limits: returns the reason a case is unsupported, or None.
    supports: Callable[[Case], str | None] | None = None
    # The cases the implementation is part of at all: returns why a case is not one of them (another
    # lesson's case, say), or None. Such a SKIP is counted under a table, not listed in it.
    belongs: Callable[[Case], str | None] | None = None

    def describe(self) -> str:
        parts = ["CUDA" if self.cuda else "CPU or CUDA"]
        parts += [m for m in self.modules if m != "torch"]
        if self.min_cc:
            parts.append(f"sm_{self.min_cc[0]}{self.min_cc[1]}+")
        if self.dtypes:
            parts.append("/".join(self.dtypes))
        return ", ".join(parts)


@dataclass(frozen=True)
class Implementation:
    suite: str
    name: str
    backend: str  # "torch", "triton", "cupy", ...
    make: Factory
    needs: Needs
    description: str
    source: str  # file it was loaded from
    # Tunable parameters and their defaults (tile shapes, warps...), passed to
    # make() as keyword arguments; `--param NAME=V1,V2` picks or sweeps them.
    params: dict = field(default_factory=dict)
    # What `--param` may set a parameter to: the values it takes (a tuple), or a function of one value
    # returning why it cannot be taken (else None). Checked before anything runs, so a typo is a usage
    # error rather than a SKIP row. Values that are wrong only together (tile rows and warps) stay SKIPs:
    # a sweep's cross product may hold some.
    allowed: dict = field(default_factory=dict)
    # explain(case, params) -> {figure: value}: launch geometry and resources for
    # `kbench explain`, computed without running the kernel.
    explain: Callable[[Case, dict], dict] | None = None
    # The compute unit the roofline measures it against: "tensor", "cuda-core" or "memory".
    unit: str = "tensor"
    # Left out of a run, profile or explain that names no implementation: it runs when --impl names it
    # (one whose correctness is not yet established on the GPUs it is built for, say, which could cost
    # every default run its --timeout).
    named_only: bool = False


@dataclass(frozen=True)
class Variant:
    """An implementation with every parameter fixed: what one row of results measures."""

    impl: Implementation
    params: dict
    label: str  # "cupy-fa2", or "cupy-fa2[block_m=64,warps=4]" for parameters away from their defaults


def parse_param_args(args: list[str]) -> dict[str, list[str]]:
    """["block_m=64,128", "warps=4"] -> {"block_m": ["64", "128"], "warps": ["4"]}."""
    requested: dict[str, list[str]] = {}
    given: dict[str, str] = {}  # name -> the argument that set it, for the message below
    for arg in args:
        name, sep, values = arg.partition("=")
        name = name.strip().replace("-", "_")
        parts = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not name or not parts:
            raise UserError(f"--param: expected NAME=VALUE[,VALUE...], got {arg!r}")
        if name in requested:  # the later one would silently win: say so instead
            raise UserError(f"--param {name} is given twice ({given[name]!r} and {arg!r}): "
                            f"write --param {name}={','.join(requested[name] + parts)} to sweep")
        requested[name] = parts
        given[name] = arg
    return requested


def variants(impls: list[Implementation], requested: dict[str, list[str]]) -> list[Variant]:
    """Every implementation x every combination of the requested values of the parameters it declares."""
    declared = {name for impl in impls for name in impl.params}
    for name in requested:
        if name not in declared:
            takers = ", ".join(f"{i.name} takes {', '.join(i.params)}" for i in impls if i.params) or "none take any"
            raise UserError(f"--param: no chosen implementation has a parameter {name!r} ({takers})")
    out = []
    for impl in impls:
        names = [name for name in requested if name in impl.params]
        if not names:
            out.append(Variant(impl, dict(impl.params), impl.name))
            continue
        choices = [_param_values(impl, name, requested[name]) for name in names]
        for combo in itertools.product(*choices):
            chosen = dict(zip(names, combo))
            # A value given that is the default names the same variant as not giving it: one label, so
            # `kbench compare` and --resume match `--param tma=auto` with a run that left tma alone.
            changed = {k: v for k, v in chosen.items() if v != impl.params[k]}
            label = f"{impl.name}[{','.join(f'{k}={v}' for k, v in changed.items())}]" if changed else impl.name
            out.append(Variant(impl, {**impl.params, **chosen}, label))
    return out


def _param_values(impl: Implementation, name: str, raws: list[str]) -> list:
    """The values of one parameter of a sweep, typed as its default; UserError for a value the
    implementation does not take or a value given twice (the same variant measured twice)."""
    values = []
    for raw in raws:
        value = _param_value(impl, name, raw)
        if value in values:
            raise UserError(f"--param {name} (for {impl.name}): {raw!r} is given twice in "
                            f"{','.join(raws)!r} (the same variant would be measured twice)")
        values.append(value)
    return values


def _param_value(impl: Implementation, name: str, raw: str):
    kind = type(impl.params[name])
    if kind not in (bool, int, float, str):
        raise UserError(f"--param {name}: {impl.name}'s default {impl.params[name]!r} cannot be set from the command line")
    where = f"--param {name} (for {impl.name})"
    allowed = impl.allowed.get(name)
    # A choice list may mix a word with numbers (warps: auto, 2, 4, 8): the word is the default's type,
    # the numbers are not, so the raw text is matched against each choice as written.
    written = {str(choice): choice for choice in allowed} if isinstance(allowed, (tuple, list, set)) else {}
    value = written[raw] if raw in written else parse_value(kind, raw, where)
    if callable(allowed):
        reason = allowed(value)
        if reason:
            raise UserError(f"{where}: {raw!r} {reason}")
    elif allowed is not None and value not in allowed:
        raise UserError(f"{where}: {raw!r} is not one of {', '.join(map(str, allowed))}")
    return value


@dataclass
class Registry:
    suites: dict[str, Suite] = field(default_factory=dict)
    impls: dict[str, dict[str, Implementation]] = field(default_factory=dict)
    load_errors: dict[str, str] = field(default_factory=dict)  # file -> error

    @classmethod
    def with_suites(cls, suites: dict[str, Suite], load_errors: dict[str, str] | None = None) -> Registry:
        """A registry of suites loaded before (kbench.loader's, loaded once per process), to which
        kernel files then add their implementations; ``load_errors``: the suite files' failures."""
        registry = cls(load_errors=dict(load_errors or {}))
        for suite in suites.values():
            registry.add_suite(suite)
        return registry

    def add_suite(self, suite: Suite) -> None:
        if suite.name in self.suites:
            raise ValueError(f"suite {suite.name!r} is defined twice")
        self.suites[suite.name] = suite
        self.impls.setdefault(suite.name, {})

    def add_impl(self, impl: Implementation) -> None:
        table = self.impls.setdefault(impl.suite, {})
        if impl.name in table:
            raise ValueError(
                f"implementation {impl.suite}/{impl.name} is defined twice "
                f"({table[impl.name].source} and {impl.source})"
            )
        table[impl.name] = impl

    # --- look-ups with user-facing errors ---------------------------------
    def suite(self, name: str) -> Suite:
        if name not in self.suites:
            raise UserError(f"unknown suite {name!r}{_did_you_mean(name, self.suites)}")
        return self.suites[name]

    def implementations(self, suite: str) -> dict[str, Implementation]:
        self.suite(suite)
        return self.impls.get(suite, {})

    def select(self, suite: str, names: list[str] | None) -> list[Implementation]:
        """The named implementations of a suite, in the order given (when names is None, all but those
        registered named_only)."""
        table = self.implementations(suite)
        if not names:
            return [impl for impl in table.values() if not impl.named_only]
        chosen = []
        for name in names:
            if name not in table:
                known = ", ".join(table) or "none"
                raise UserError(
                    f"unknown implementation {name!r} for suite {suite!r}"
                    f"{_did_you_mean(name, table)} (known: {known})"
                )
            if any(impl.name == name for impl in chosen):  # each of its rows would be measured twice
                raise UserError(f"--impl: {name!r} is given twice")
            chosen.append(table[name])
        return chosen


def _did_you_mean(name: str, known) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else ""


# --- registration while a file is being loaded ---------------------------

_collecting: list[tuple[Registry, str]] = []  # (registry, source file) being loaded


@contextlib.contextmanager
def collecting(registry: Registry, source: str):
    """Send the registrations made while loading ``source`` to ``registry``."""
    _collecting.append((registry, source))
    try:
        yield registry
    finally:
        _collecting.pop()


def _target() -> tuple[Registry, str]:
    if not _collecting:
        raise RuntimeError("kbench registrations happen while kbench.loader loads a file")
    return _collecting[-1]


def suite(cls: type[Suite]) -> type[Suite]:
    """Class decorator: register a Suite subclass."""
    registry, _ = _target()
    registry.add_suite(cls())
    return cls


def implementation(
    suite: str,
    name: str,
    *,
    backend: str,
    cuda: bool = False,
    modules: tuple[str, ...] = ("torch",),
    min_cc: tuple[int, int] | None = None,
    dtypes: tuple[str, ...] | None = None,
    supports: Callable[[Case], str | None] | None = None,
    belongs: Callable[[Case], str | None] | None = None,
    description: str = "",
    params: dict | None = None,
    allowed: dict | None = None,
    explain: Callable[[Case, dict], dict] | None = None,
    unit: str = "tensor",
    named_only: bool = False,
) -> Callable[[Factory], Factory]:
    """Function decorator: register ``make(case, inputs, out, **params) -> closure`` as an implementation.

    ``allowed`` ({param: values, or value -> reason or None}) lets `--param` refuse a value in the parent
    process, before anything runs: it must be cheap (no torch, no compiling)."""

    if unit not in ("tensor", "cuda-core", "memory"):
        raise ValueError(f"implementation {suite}/{name}: unit {unit!r} is not tensor, cuda-core or memory")
    for param in allowed or {}:
        if param not in (params or {}):
            raise ValueError(f"implementation {suite}/{name}: allowed names {param!r}, which is not a parameter")

    def register(make: Factory) -> Factory:
        registry, source = _target()
        needs = Needs(cuda=cuda, modules=tuple(modules), min_cc=min_cc, dtypes=dtypes, supports=supports,
                      belongs=belongs)
        doc_lines = (make.__doc__ or "").strip().splitlines()
        registry.add_impl(
            Implementation(
                suite=suite,
                name=name,
                backend=backend,
                make=make,
                needs=needs,
                description=description or (doc_lines[0] if doc_lines else ""),
                source=source,
                params=dict(params or {}),
                allowed={param: values if callable(values) else tuple(values)
                         for param, values in (allowed or {}).items()},
                explain=explain,
                unit=unit,
                named_only=named_only,
            )
        )
        return make

    return register


class Unsupported(Exception):
    """Raised by an implementation's set-up for a case it cannot run: reported as SKIP with the message."""


def out_of_case(impl: Implementation, case: Case) -> str | None:
    """Why ``case`` is not one of the cases ``impl`` is part of (Needs.belongs), or None."""
    return impl.needs.belongs(case) if impl.needs.belongs is not None else None


def _installed(module: str, util) -> bool:
    """Whether ``module`` can be imported, without importing it. find_spec of a dotted name imports its
    parent and raises ModuleNotFoundError when the parent is absent (``flash_attn.cute`` without
    flash_attn): that is a missing module too, not an error of the run."""
    try:
        return util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def skip_reason(impl: Implementation, case: Case, device: str, capability: tuple[int, int] | None = None) -> str | None:
    """Why ``impl`` cannot run ``case`` here, or None. ``capability`` None skips the compute-capability check."""
    import importlib.util

    needs = impl.needs
    outside = out_of_case(impl, case)
    if outside:
        return outside
    if needs.cuda and device != "cuda":
        return "needs a CUDA device"
    for module in needs.modules:
        if not _installed(module, importlib.util):
            return f"needs {module} (not installed)"
    if needs.min_cc and capability and tuple(capability) < tuple(needs.min_cc):
        return (f"needs compute capability {needs.min_cc[0]}.{needs.min_cc[1]}+ "
                f"(this GPU is {capability[0]}.{capability[1]})")
    dtype = case.values.get("dtype")
    if needs.dtypes and dtype is not None and dtype not in needs.dtypes:
        return f"{dtype} not supported (supports {', '.join(needs.dtypes)})"
    if needs.supports is not None:
        return needs.supports(case)
    return None
