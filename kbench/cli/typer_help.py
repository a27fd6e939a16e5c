"""Typer's help formatter, typer.rich_utils, without the two modules it imports at its top for what a
`kbench --help` never draws: rich.markdown (markdown-it-py and Pygments: about 70 ms of start-up),
which renders help texts in rich_markup_mode="markdown" while kbench's are Rich markup (Typer's default
mode), and rich.traceback, for the pretty traceback of an uncaught exception. Each is imported when
first used."""

from __future__ import annotations

import importlib
import sys
import types

DEFERRED = {"rich.markdown": "Markdown", "rich.traceback": "Traceback"}


def _deferred(module: str, name: str) -> type:
    """A stand-in for the class ``module.name``: calling it, or any attribute (Traceback.from_exception),
    imports the module and answers with the real class."""

    def real() -> type:
        return getattr(importlib.import_module(module), name)

    class Deferred(type):
        def __getattr__(cls, attr):
            return getattr(real(), attr)

        def __instancecheck__(cls, obj):
            return isinstance(obj, real())

    def new(cls, *args, **kwargs):
        return real()(*args, **kwargs)

    return Deferred(name, (), {"__new__": new, "__module__": module, "__qualname__": name})


def import_rich_utils() -> None:
    """Import typer.rich_utils (once) with stand-ins for the DEFERRED classes that are not loaded yet.
    Only typer.rich_utils holds the stand-ins: sys.modules gets the real modules when they are imported."""
    if "typer.rich_utils" in sys.modules:
        return
    stand_ins = {}
    for module, name in DEFERRED.items():
        if module not in sys.modules:
            stand_ins[module] = types.ModuleType(module)
            setattr(stand_ins[module], name, _deferred(module, name))
    sys.modules.update(stand_ins)
    try:
        import typer.rich_utils  # noqa: F401
    finally:
        for module, stand_in in stand_ins.items():
            if sys.modules.get(module) is stand_in:
                del sys.modules[module]


def skip_coercion_of_unset_flags(params) -> None:
    """Typer coerces a parameter's value through a pydantic TypeAdapter made the first time the parameter is
    processed: pydantic's import and the adapter cost about 180 ms. A group processes its own flags on the way
    to a subcommand (`kbench compare --help` passes the root's --help, --install-completion and
    --show-completion), and a flag that is not given is None, which Typer's coercion returns as it is whatever
    the adapter (a given flag is a bool, which Typer does not coerce). Such flags get Typer's pass-through
    coercion, which makes no adapter. A Typer whose parameters look otherwise is left to its own way."""
    try:
        from typer._coercion import PassThroughRuntimeParam
        from typer.core import TyperOption
    except ImportError:  # pragma: no cover - a Typer without them
        return
    for param in params:
        if (isinstance(param, TyperOption) and param.is_flag and not param.envvar
                and getattr(param, "_runtime_param", 0) is None
                and getattr(getattr(param, "type_descriptor", None), "annotation", None) is bool):
            param._runtime_param = PassThroughRuntimeParam(parameter_info=param.type_descriptor.parameter_info,
                                                           annotation=bool)
