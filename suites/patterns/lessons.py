"""What each lesson predicts against what the GPU measured: the patterns suite's table column and the
lines under its tables. A kernel file states a prediction in its run config (``lesson_predicts``, and
``lesson_check``: {"versus": IMPL, "low": x or None, "high": y or None})."""

from __future__ import annotations

from rich.markup import escape


def _span(check: dict) -> str:
    low, high = check.get("low"), check.get("high")
    if high is None:
        return f">= {low:g}x"
    if low is None:
        return f"<= {high:g}x"
    return f"{low:g}-{high:g}x"


def verdict(record, records: list) -> tuple[float, bool] | None:
    """(measured ratio, whether it is what the lesson predicts) for a row whose run.config carries
    ``lesson_check`` ({"versus": IMPL, "low": x or None, "high": y or None}): the lesson holds when
    median(versus) / median(this) lies in [low, high]. None: no prediction, or not both measured."""
    # Here, not at the top: the suite loads this file for every `kbench run SUITE --help`, and kbench.peers
    # brings kbench.record with it.
    from kbench.peers import peer_row

    check = record.config.get("lesson_check")
    mine = record.median
    if not check or not mine:
        return None
    versus = peer_row([r for r in records if r.median], check["versus"])  # timed, without --param first
    if versus is None:
        return None
    ratio = versus.median / mine
    low, high = check.get("low"), check.get("high")
    return ratio, (low is None or ratio >= low) and (high is None or ratio <= high)


def cell(record, records: list) -> str:
    """The table's cell: the predicted ratio and the measured one ("" without a prediction)."""
    config = record.config
    if not config.get("lesson_predicts"):
        return ""
    check = config.get("lesson_check")
    if not check:
        return "baseline"
    claim = f"{_span(check)} vs {check['versus']}"
    measured = verdict(record, records)
    if measured is None:
        return f"{claim}: not measured"
    ratio, holds = measured
    return f"{claim}: {ratio:.2f}x, {'holds' if holds else 'does not hold'}"


def lines(records: list) -> list[str]:
    """Below the table: each prediction in full (``lesson_predicts``) and, when measured, whether it holds
    on this GPU (some of the classic lessons no longer do on recent ones)."""
    lines = []
    for r in records:
        text = r.config.get("lesson_predicts")
        if not text:
            continue
        line = f"{r.name}: {text}"
        measured = verdict(r, records)
        if measured is not None:
            gpu = r.gpu.get("name") or "this device"
            line += f"; measured {measured[0]:.2f}x: " + ("holds" if measured[1] else f"does not hold on {gpu}")
        lines.append(line)
    return lines


def styled(text: str) -> str:
    """A cell in rich markup: a prediction that held in green, one that did not in yellow."""
    style = "yellow" if text.endswith("does not hold") else "green" if text.endswith("holds") else ""
    return f"[{style}]{escape(text)}[/]" if style else escape(text)
