"""`kbench compare BASE CURRENT`: is CURRENT slower than BASE? A gate for CI.

Exit codes: 0 no regression; 1 a regression (slower beyond the threshold, and
significant) or a correctness failure in CURRENT; 2 an input error: an
unreadable or malformed file, environments that differ (without --force), a
case missing on either side (without --allow-missing).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kbench.cli.common import stderr, stdout, user_errors
from kbench.errors import UserError

MAX_LISTED = 3  # keys named in an error line before "and N more"


def compare_command(
    base: Path = typer.Argument(..., metavar="BASE", help="Baseline results: a JSONL file, or a folder of them.", show_default=False),
    current: Path = typer.Argument(..., metavar="CURRENT", help="Current results: a JSONL file, or a folder of them.",
                                   show_default=False),
    threshold: Optional[str] = typer.Option(
        None, "--threshold",
        help="Smallest change of a median that counts, e.g. 5% or 0.05 (default: the threshold of "
             "tool.kbench in pyproject.toml, else 5%; a suite's entry in tool.kbench.thresholds wins for it)."),
    allow_missing: bool = typer.Option(
        False, "--allow-missing",
        help="Report cases found on one side only (and a BASE that does not exist) instead of failing (exit 2)."),
    force: bool = typer.Option(
        False, "--force", help="Compare records from different environments (GPU, driver, CUDA, libraries)."),
    markdown: Optional[Path] = typer.Option(
        None, "--markdown", help="Append a markdown summary to this file, e.g. $GITHUB_STEP_SUMMARY (default: none)."),
    fmt: str = typer.Option(
        "table", "--format",
        help="table, or json: one JSON document on stdout (per pair: medians, change, interval, p, decision; "
             "the verdict and exit code), for scripts. The exit code is the same either way."),
) -> None:
    """Compare CURRENT's timings with BASE's, case by case; exit 1 on a regression or a failure in CURRENT."""
    with user_errors():
        from kbench import report

        if fmt not in report.COMPARE_FORMATS:
            raise UserError(f"--format: unknown format {fmt!r} (choose from {', '.join(report.COMPARE_FORMATS)})")
        try:
            code = run_compare(base, current, threshold, allow_missing, force, markdown, fmt)
        except UserError as exc:
            if markdown is not None:  # the CI job's page says why there is no comparison
                _append(markdown, f"## kbench compare\n\n**could not compare (exit 2)**: {exc}\n", quiet=True)
            raise
    if code:
        raise typer.Exit(code)


def _append(path: Path, text: str, quiet: bool = False) -> None:
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        if not quiet:
            raise UserError(f"--markdown: cannot write {str(path)!r}: {exc.strerror or exc}") from None


def _listed(keys: list, describe) -> str:
    shown = "; ".join(describe(key) for key in keys[:MAX_LISTED])
    return shown + (f"; and {len(keys) - MAX_LISTED} more" if len(keys) > MAX_LISTED else "")


def run_compare(base: Path, current: Path, threshold: str | None, allow_missing: bool, force: bool,
                markdown: Path | None, fmt: str = "table") -> int:
    from kbench import api, compare, compare_thresholds, report, results

    cli_threshold = compare_thresholds.parse_fraction(threshold, "--threshold") if threshold is not None else None
    settings = compare_thresholds.load()
    if settings.note:
        stderr.print(f"note: {settings.note}", highlight=False, markup=False)
    alpha = settings.alpha or compare_thresholds.DEFAULT_ALPHA

    current_records = compare.by_key(api.load(current).located())
    if allow_missing and not Path(base).exists():  # no baseline yet (a first run): every case is new
        stderr.print(f"note: no baseline at {str(base)!r}: every case of CURRENT is new (--allow-missing)",
                     highlight=False, markup=False)
        base_records = {}
    else:
        base_records = compare.by_key(api.load(base).located())
    pairs = compare.pair_up(base_records, current_records)
    thresholds: dict[str, tuple[float, str]] = {}  # suite -> (threshold, where it comes from)

    def threshold_of(suite: str) -> float:
        thresholds[suite] = compare_thresholds.threshold_for(suite, settings, cli_threshold)
        return thresholds[suite][0]

    compare.judge(pairs, threshold_of, alpha)

    mismatched = [p for p in pairs if p.env_diff]
    if mismatched and not force:
        first = mismatched[0]
        raise UserError(
            f"environments differ, so the times are not comparable: {compare.describe_env_diff(first.env_diff)} "
            f"({first.base.where} vs {first.current.where}; {len(mismatched)} of "
            f"{sum(1 for p in pairs if p.threshold is not None)} timed pairs differ); --force compares anyway")
    if not allow_missing:
        missing = [p for p in pairs if p.decision == "missing"]
        if missing:
            raise UserError(f"CURRENT lacks {len(missing)} measurement(s) that BASE has: "
                            f"{_listed(missing, lambda p: f'{compare.describe_key(p.key)} ({p.note})')}"
                            " (--allow-missing compares the rest)")
        new = [p for p in pairs if p.decision == "new"]
        if new:
            raise UserError(f"BASE lacks {len(new)} measurement(s) that CURRENT has (no baseline): "
                            f"{_listed(new, lambda p: f'{compare.describe_key(p.key)} ({p.note})')}"
                            " (--allow-missing compares the rest)")

    tally = compare.counts(pairs)
    code = compare.exit_code(pairs)
    summary = ", ".join(f"{n} {decision}" for decision, n in tally.items() if n)
    verdict = ("FAILED: " if code else "passed: ") + (summary or "nothing to compare")
    sources = ", ".join(f"{suite} {value:.3g} ({source})" for suite, (value, source) in thresholds.items())
    notes = [f"thresholds: {sources}; alpha {alpha:g}"] if thresholds else []
    if mismatched:
        notes.append(f"--force: {len(mismatched)} pair(s) compared across different environments "
                     f"(first: {compare.describe_env_diff(mismatched[0].env_diff)})")

    if fmt == "json":  # plain print: nothing but the document on stdout, however wide the terminal
        print(results.dumps(report.compare_document(pairs, verdict, code, tally, alpha, thresholds), indent=2))
    else:
        stdout.print("kbench compare: CURRENT against BASE, median times (a change > 0 is slower)", highlight=False)
        for table in report.compare_tables(pairs):
            stdout.print(table)
        for note in notes:
            stdout.print(f"  {note}", highlight=False, markup=False)
        stdout.print(f"[bold {'red' if code else 'green'}]{verdict}[/]", highlight=False)
    if markdown is not None:
        _append(markdown, report.compare_markdown(pairs, f"**{verdict}**", notes))
    return code
