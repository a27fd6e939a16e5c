"""A suite's subcommand, built the same way for `kbench run`, `kbench explain`, `kbench profile` and the
runs of a `kbench bench` plan: the suite's case axes, each an option that takes one value or a comma
list sweeping it, then the options of the groups the command asks for.

    add_suite_commands(app, handler, [run_options])

makes `SUITE --AXIS VALUE ... --OPTION VALUE ...` for every built-in suite; `handler(suite, cases,
**options)` gets the cases the axis options make and the groups' options by name.
"""

from __future__ import annotations

import inspect
import itertools
from typing import TYPE_CHECKING, Callable, Sequence

import typer
from typer.core import TyperGroup

from kbench.cli.common import user_errors
from kbench.cli.typer_help import skip_coercion_of_unset_flags
from kbench.errors import UserError

if TYPE_CHECKING:  # the suites load when a group's subcommands are made (SuiteGroup.commands)
    from kbench.suite import Case, Suite

# A group of options a command adds to every suite's axes: suite -> its parameters (their names are
# the handler's keyword arguments).
OptionGroup = Callable[["Suite"], list[inspect.Parameter]]
SWEEPS = "; a comma list sweeps"


class SuiteGroup(TyperGroup):
    """`kbench run NAME`: an unknown suite gets one line with a suggestion.

    Its subcommands, one per suite, are made the first time anything asks for them (``commands``): the
    suites load then, not at start-up, so `kbench --help` and the commands without one load no suite.
    A group's class is made with :meth:`of`, which says how (Typer makes the group from its class)."""

    populate: Callable[[typer.Typer], None] | None = None  # adds the subcommands to an empty Typer

    @classmethod
    def of(cls, populate: Callable[[typer.Typer], None]) -> type[SuiteGroup]:
        return type(cls.__name__, (cls,), {"populate": staticmethod(populate)})

    def __init__(self, *args, **kwargs):
        self._populate = type(self).populate
        super().__init__(*args, **kwargs)
        self.suggest_commands = False  # Typer's own suggestion would repeat ours

    @property
    def commands(self) -> dict:
        if self._populate is not None:
            app = typer.Typer()
            self._populate(app)  # a UserError ($KBENCH_SUITES names no folder) leaves it to be made again
            # Made as Typer makes a group's subcommands; any added before come after them.
            self._commands = {**typer.main.get_group(app).commands, **self._commands}
            self._populate = None
        return self._commands

    @commands.setter
    def commands(self, value) -> None:
        self._commands = value

    def parse_args(self, ctx, args):
        skip_coercion_of_unset_flags(self.get_params(ctx))  # `kbench run SUITE --help` imports no pydantic
        return super().parse_args(ctx, args)

    def get_command(self, ctx, cmd_name):
        command = super().get_command(ctx, cmd_name)
        if command is None and not cmd_name.startswith("-"):
            from kbench import loader
            from kbench.registry import _did_you_mean

            known = self.list_commands(ctx)
            builtin = loader.builtin_suites()
            suites = [name for name in known if name in builtin]
            others = [name for name in known if name not in suites]  # what a suite adds: `kbench explain mma`
            ctx.fail(f"unknown {'suite or command' if others else 'suite'} {cmd_name!r}{_did_you_mean(cmd_name, known)} "
                     f"(suites: {', '.join(suites)}" + (f"; commands: {', '.join(others)})" if others else ")"))
        return command


def no_options() -> None:
    """The callback of a SuiteGroup whose command has no options of its own: with a callback Typer makes
    the group even while it has no subcommand yet (typer.main.get_command of build()'s Typer)."""


def option(name: str, annotation, default, *decls: str, help: str) -> inspect.Parameter:
    """One keyword option of a built signature: ``name`` is the handler's argument, ``decls`` its flags."""
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                             default=typer.Option(default, *decls, help=help))


def axis_options(suite: Suite, sweeps: bool = True) -> list[inspect.Parameter]:
    """An option per case axis: a flag pair for a boolean axis, else text parsed by make_cases
    (``sweeps``: the help says a comma list sweeps; a command taking one case leaves that out)."""
    params = []
    for axis in suite.axes:
        if axis.type is bool:
            default = typer.Option(bool(axis.default[0]), f"{axis.option}/--no-{axis.option[2:]}", help=axis.help)
            annotation = bool
        else:
            choices = f" ({'|'.join(map(str, axis.choices))})" if axis.choices else ""
            default = typer.Option(",".join(map(axis.format, axis.default)), axis.option,
                                   help=f"{axis.help}{choices}{SWEEPS if sweeps else ''}")
            annotation = str
        params.append(inspect.Parameter(axis.name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                                        default=default))
    return params


def make_cases(suite: Suite, raw: dict) -> list[Case]:
    """Every combination of the axes' values (a comma list on any axis sweeps it), each checked, then as
    the suite runs it (Suite.canonical): combinations that are one computation make one case."""
    from kbench.suite import Case

    values = {}
    for axis in suite.axes:
        value = raw[axis.name]
        values[axis.name] = [value] if axis.type is bool else axis.parse(value)
        # A value given twice (`--dtype fp16,fp16`, `--n 256,0256`) would measure the same case twice.
        twice = next((v for i, v in enumerate(values[axis.name]) if v in values[axis.name][:i]), None)
        if twice is not None:
            raise UserError(f"{axis.option}: {axis.format(twice)} is given twice in {value!r}")
    cases = [Case(dict(zip(values, combo))) for combo in itertools.product(*values.values())]
    for case in cases:
        suite.validate(case)
    return list(dict.fromkeys(suite.canonical(case) for case in cases))


def suite_command(suite: Suite, handler: Callable, groups: Sequence[OptionGroup] = (), *, sweeps: bool = True,
                  before_cases: Callable[[typer.Context, dict], None] | None = None, one_line_errors: bool = True):
    """The function Typer makes ``suite``'s subcommand of: its signature is the axes' options and the
    groups'; it returns what ``handler(suite, cases, **options)`` returns.

    ``before_cases(ctx, options)`` checks or rewrites the groups' options before the axes are parsed (a
    mistake there is reported first). ``one_line_errors``: a UserError becomes `kbench: error: ...` and
    exit code 2; without it the UserError reaches the caller (a bench plan names the run it came from)."""
    axis_names = [axis.name for axis in suite.axes]

    def call(ctx: typer.Context, options: dict):
        if before_cases is not None:
            before_cases(ctx, options)
        cases = make_cases(suite, {name: options.pop(name) for name in axis_names})
        return handler(suite, cases, **options)

    def command(ctx: typer.Context, **options):
        if not one_line_errors:
            return call(ctx, options)
        with user_errors():
            return call(ctx, options)

    context = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)
    params = [context, *axis_options(suite, sweeps)]
    for group in groups:
        params += group(suite)
    command.__signature__ = inspect.Signature(params)
    command.__name__ = suite.name
    command.__doc__ = suite.description
    return command


def add_suite_commands(app: typer.Typer, handler: Callable, groups: Sequence[OptionGroup] = (), *,
                       help: Callable[[Suite], str] = lambda suite: suite.description, sweeps: bool = True,
                       before_cases: Callable[[typer.Context, dict], None] | None = None) -> None:
    """A subcommand of ``app`` for every built-in suite (see suite_command); ``help`` gives its line."""
    from kbench import loader

    for suite in loader.builtin_suites().values():
        command = suite_command(suite, handler, groups, sweeps=sweeps, before_cases=before_cases)
        app.command(suite.name, help=help(suite))(command)
