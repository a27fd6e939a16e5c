"""The kbench command line: one module per command over an engine that never imports the CLI."""

from __future__ import annotations

import typer

from kbench import __version__
from kbench.cli import (calibrate_cmd, compare_cmd, env_cmd, explain_cmd, list_cmd, profile_cmd, roofline_cmd,
                        run_cmd, show_cmd)

app = typer.Typer(
    name="kbench",
    help="Check, time and profile interchangeable GPU kernel implementations against their peers.",
    no_args_is_help=True,
    add_completion=False,
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


app.add_typer(run_cmd.build(), name="run")
app.command("list")(list_cmd.list_command)
app.command("env")(env_cmd.env_command)
app.command("show")(show_cmd.show_command)
app.command("compare")(compare_cmd.compare_command)
app.add_typer(explain_cmd.build(), name="explain")
app.add_typer(profile_cmd.build(), name="profile")
app.command("roofline")(roofline_cmd.roofline_command)
app.command("plot")(roofline_cmd.plot_command)
app.command("calibrate")(calibrate_cmd.calibrate_command)


def main() -> None:
    app(prog_name="kbench")
