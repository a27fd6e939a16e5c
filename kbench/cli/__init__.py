"""The kbench command line: one module per command over an engine that never imports the CLI."""

from __future__ import annotations

import importlib
import sys

import typer
from typer.core import TyperGroup

from kbench import __version__
from kbench.cli.common import ClickException, click_error_line, print_error, stderr
from kbench.cli.typer_help import import_rich_utils, skip_coercion_of_unset_flags
from kbench.errors import UserError

import_rich_utils()  # before Typer imports it for a --help, with rich.markdown and rich.traceback deferred


INTERNAL_ERROR = 70  # sysexits' EX_SOFTWARE: kbench itself failed, not the kernels or the input

# The commands, in the order `kbench --help` lists them: name -> (module in kbench.cli, its command
# function, or "build" for a group with a subcommand per suite). A command's module is imported only
# when the command runs or shows its own help: `kbench --help` lists them from SUMMARIES alone.
COMMANDS = {
    "list": ("list_cmd", "list_command"),
    "env": ("env_cmd", "env_command"),
    "show": ("show_cmd", "show_command"),
    "compare": ("compare_cmd", "compare_command"),
    "bench": ("bench_cmd", "bench_command"),
    "roofline": ("roofline_cmd", "roofline_command"),
    "plot": ("plot_cmd", "plot_command"),
    "report": ("report_cmd", "report_command"),
    "calibrate": ("calibrate_cmd", "calibrate_command"),
    "run": ("run_cmd", "build"),
    "explain": ("explain_cmd", "build"),
    "profile": ("profile_cmd", "build"),
}
# Each command's help as its own module gives it (tests/cli checks the two agree).
SUMMARIES = {
    "list": "List suites and implementations, with what each needs and whether it can run here.",
    "env": "Show the environment every result records: GPU, driver, CUDA, versions, clocks and peaks.",
    "show": "Show stored results: one table per case, with the same columns as `kbench run`.",
    "compare": "Compare CURRENT's timings with BASE's, case by case; exit 1 on a regression or a failure in CURRENT.",
    "bench": "Run a benchmark plan: every run into one results file, then each kernel against its peer.",
    "roofline": "Each result against its roof: arithmetic intensity, attained and attainable TFLOP/s, % of roof, "
                "bound.",
    "plot": "Throughput against size for each implementation of a sweep, with the peer dashed.",
    "report": "A static HTML site of results: per suite, the latest tables, each case over commits with its "
              "regressions (judged as kbench compare judges), and the roofline. Open OUT/index.html in a browser.",
    "calibrate": "Measure the device's ceilings (copy bandwidth, fp16 tensor, fp32 FMA) for `kbench roofline`.",
    "run": "Check and time a suite's implementations: kbench run SUITE --OPTION VALUE ....",
    "explain": "Launch geometry, resources and traffic of a case; mma.sync lane layouts; the online softmax step "
               "by step.",
    "profile": "Profile a suite's implementations under a profiler: kbench profile --ncu|--nsys|--torch-profiler "
               "SUITE --OPTION VALUE ....",
}


def load_command(name: str):
    """The Click command of ``name`` (one of COMMANDS), its module imported now."""
    module_name, attribute = COMMANDS[name]
    made = getattr(importlib.import_module(f"kbench.cli.{module_name}"), attribute)
    if attribute == "build":
        command = typer.main.get_group(made())
    else:
        single = typer.Typer()
        single.command(name)(made)
        command = typer.main.get_command(single)
    command.name = name
    return command


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

    _listing = False  # while the root's help is drawn: its list of commands needs their summaries only

    def list_commands(self, ctx):
        return list(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        if self._listing:
            return typer.core.TyperCommand(name, help=SUMMARIES[name])
        if name not in self.commands:
            self.commands[name] = load_command(name)
        return self.commands[name]

    def format_help(self, ctx, formatter):
        self._listing = True
        try:
            return super().format_help(ctx, formatter)
        finally:
            self._listing = False


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


def _start_run_early(args: list[str]) -> None:
    """`kbench run SUITE ...`: start the run's fork server (kbench.worker_starter) before the command line
    is parsed and the kernels are loaded, so that its imports overlap them. The suite, --device and
    --kernels are read off the arguments as given; where the run turns out to need another server (or
    the command line is wrong), the run starts its own and this one is closed at exit."""
    if len(args) < 2 or args[0] != "run" or args[1].startswith("-") or {"-h", "--help"} & set(args):
        return
    device, kernels = "auto", []
    for i, arg in enumerate(args):
        for name in ("--device", "--kernels"):
            if arg.startswith(name + "="):
                value = arg.split("=", 1)[1]
            elif arg == name and i + 1 < len(args):
                value = args[i + 1]
            else:
                continue
            if name == "--device":
                device = value
            else:
                kernels.append(value)
    from kbench.worker_starter import start_fork_server_early

    start_fork_server_early(kernels, device, args[1])


def main() -> None:
    _start_run_early(sys.argv[1:])
    app(prog_name="kbench")
