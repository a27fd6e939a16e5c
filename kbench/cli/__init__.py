"""The kbench command line: one module per command over an engine that never imports the CLI."""

from __future__ import annotations

import sys

import typer
from typer.core import TyperGroup

from kbench import __version__
from kbench.cli import (bench_cmd, calibrate_cmd, compare_cmd, env_cmd, explain_cmd, list_cmd, plot_cmd,
                        profile_cmd, report_cmd, roofline_cmd, run_cmd, show_cmd)
from kbench.cli.common import ClickException, click_error_line, print_error, stderr
from kbench.cli.typer_help import import_rich_utils, skip_coercion_of_unset_flags
from kbench.errors import UserError

import_rich_utils()  # before Typer imports it for a --help, with rich.markdown and rich.traceback deferred


INTERNAL_ERROR = 70  # sysexits' EX_SOFTWARE: kbench itself failed, not the kernels or the input


def _save_traceback() -> str:
    """The current exception's traceback, written to a file of its own; its path."""
    import tempfile
    import traceback

    with tempfile.NamedTemporaryFile("w", prefix="kbench-error-", suffix=".log", delete=False) as log:
        traceback.print_exc(file=log)
    return log.name


class KbenchGroup(TyperGroup):
    """The root command. Click's own usage errors (an unknown option, a missing argument, a bad value)
    are printed as the one line every other mistake gets, `kbench: error: ...`, with exit code 2,
    instead of Typer's usage text and boxed panel: scripts and CI logs read one line per error.

    Click is run with standalone_mode=False, so its exceptions come here rather than to its printer;
    what standalone mode would do with the rest is done below (the exit codes stay Click's). A shell's
    completion request (_KBENCH_COMPLETE in the environment) is answered inside super().main, which
    exits before any parsing, so it never reaches the error line."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:  # a caller that handles Click's exceptions itself
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except ClickException as exc:
            # no_args_is_help: the help is already printed; the exit code stays the usage error's.
            if type(exc).__name__ != "NoArgsIsHelpError":
                print_error(click_error_line(exc))
            sys.exit(exc.exit_code)
        except UserError as exc:  # raised outside a command: $KBENCH_SUITES names no folder, as the suites load
            print_error(str(exc))
            sys.exit(exc.exit_code)
        except (typer.Abort, EOFError):  # Ctrl-D at a prompt, or an explicit abort
            stderr.print("Aborted!", highlight=False)
            sys.exit(1)
        except Exception as exc:  # noqa: BLE001 - a fault of kbench itself: one line, the traceback in a file
            print_error(f"internal error: {type(exc).__name__}: {exc} (traceback: {_save_traceback()})")
            sys.exit(INTERNAL_ERROR)
        # Non-standalone Click returns an Exit's code (typer.Exit(1), --help's 0), else the command's value.
        sys.exit(code if isinstance(code, int) else 0)

    def parse_args(self, ctx, args):
        skip_coercion_of_unset_flags(self.get_params(ctx))  # `kbench SUBCOMMAND --help` imports no pydantic
        return super().parse_args(ctx, args)


app = typer.Typer(
    name="kbench",
    cls=KbenchGroup,
    help="Check, time and profile interchangeable GPU kernel implementations against their peers.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"kbench {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print kbench's version and exit."),
) -> None:
    """Check, time and profile interchangeable GPU kernel implementations against their peers."""


# The commands with a subcommand per suite: the suites load when one of them is first looked into.
_suite_groups = {"run": run_cmd.build(), "explain": explain_cmd.build(), "profile": profile_cmd.build()}

app.add_typer(_suite_groups["run"], name="run")
app.command("list")(list_cmd.list_command)
app.command("env")(env_cmd.env_command)
app.command("show")(show_cmd.show_command)
app.command("compare")(compare_cmd.compare_command)
app.command("bench")(bench_cmd.bench_command)
for _name in ("explain", "profile"):
    app.add_typer(_suite_groups[_name], name=_name)
app.command("roofline")(roofline_cmd.roofline_command)
app.command("plot")(plot_cmd.plot_command)
app.command("report")(report_cmd.report_command)
app.command("calibrate")(calibrate_cmd.calibrate_command)


def main() -> None:
    app(prog_name="kbench")
