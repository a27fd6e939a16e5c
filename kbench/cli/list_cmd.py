"""`kbench list`: suites, their implementations, what each needs and whether it can run here."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape
from rich.table import Table

from kbench.cli.common import stderr, stdout, user_errors


def list_command(
    kernels: Optional[List[Path]] = typer.Option(
        None, "--kernels", help="Extra folder of kernel files, or one kernel file (repeatable), besides the built-in "
                                "kernels and $KBENCH_KERNELS's (default: those only)."),
) -> None:
    """List suites and implementations, with what each needs and whether it can run here."""
    from kbench import loader
    from kbench.registry import skip_reason
    from kbench.runner import host_has_gpu
    from kbench.suite import Case

    with user_errors():
        registry = loader.load(kernels or [])
    device = "cuda" if host_has_gpu() else "cpu"
    for suite in registry.suites.values():
        default_case = suite.canonical(Case({axis.name: axis.default[0] for axis in suite.axes}))
        table = Table(title=f"{suite.name}: {suite.description}", title_justify="left", header_style="bold")
        for column in ("implementation", "backend", "needs", f"runs here ({device})", "description"):
            table.add_column(column)
        for impl in registry.impls.get(suite.name, {}).values():
            reason = skip_reason(impl, default_case, device)
            here = "[green]yes[/]" if reason is None else f"[yellow]no[/]: {reason}"
            name = f"{impl.name} (baseline)" if impl.name == suite.baseline else impl.name
            if impl.named_only:
                name += " (runs when named: --impl)"
            params = ", ".join(f"{k}={v}{_values(impl.allowed.get(k))}" for k, v in impl.params.items())
            about = f"{impl.description} [dim](--param {escape(params)})[/]" if params else impl.description
            table.add_row(name, impl.backend, impl.needs.describe(), here, about)
        stdout.print(table)
    for path, error in registry.load_errors.items():
        stderr.print(f"[yellow]warning:[/] could not load {path}: {error}", highlight=False)


def _values(allowed) -> str:
    """The values a parameter takes, where the implementation lists them: " (auto|0|1)"."""
    return f" ({'|'.join(map(str, allowed))})" if isinstance(allowed, tuple) else ""
