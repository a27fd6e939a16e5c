"""How results look: a rich table per case, or JSON / CSV for machines."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass

from rich import box
from rich.console import Console
from rich.markup import escape

from kbench import results
from kbench.errors import UserError
from kbench.record import Correctness, Metrics, Record, Stats, Timing
from rich.table import Table

STATUS_STYLE = {"OK": "green", "FAIL": "bold red", "SKIP": "yellow", "CRASH": "bold red", "TIMEOUT": "bold red"}
CPU_METHOD = "cpu-wall-clock"  # Timing.method of a time taken on CPU tensors
CPU_NOTE = ("CPU run: times are wall clock on CPU tensors (Triton through its interpreter); "
            "they show that the kernels run, not GPU performance (so no TFLOP/s, GB/s or % peak).")


def format_time(ms: float | None) -> str:
    if ms is None:
        return "-"
    if ms < 1:
        return f"{ms * 1e3:.1f} us"
    if ms < 1e3:
        return f"{ms:.3f} ms"
    return f"{ms / 1e3:.2f} s"


def _num(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _notes(record: Record) -> list[str]:
    notes = [record.reason] if record.reason else []
    eager = _eager(record)
    return (notes + list(record.timing.warnings if record.timing else [])
            + [f"eager: {w}" for w in (eager.warnings if eager else [])])


def _eager(record: Record) -> Timing | None:
    """The eager timing beside a graph-timed row's headline (timing.with_graph_replay), or None."""
    return record.timing.eager if record.ok and record.timing else None


GRAPH_NOTE = "(launch-bound under 20 us eager); eager: CUDA events, launches from Python"


def graph_footnotes(records: list[Record]) -> list[str]:
    """Which rows' medians are graph replays (launch-bound: timed again as replays), and which speedups
    were taken between eager times because the row and its baseline were not timed alike."""
    graphed = [r.name for r in records if _eager(r) is not None]
    if not graphed:
        return []
    lines = [f"median: graph replay for {', '.join(graphed)} {GRAPH_NOTE}"]
    # The rest timed as before: not launch-bound (a row that was, but could not be captured, says so itself).
    eager_only = [r.name for r in records if r.ok and _eager(r) is None and not r.timing.graph_error
                  and (r.timing.method or "").startswith("cuda-events")]
    if eager_only:
        lines.append(f"median: CUDA events for {', '.join(eager_only)} (20 us or more: not launch-bound)")
    eager_ratios = [r.name for r in records if r.ok and r.speedup_basis == "eager"]
    if eager_ratios:
        lines.append(f"vs {records[0].baseline}: eager time against eager time for {', '.join(eager_ratios)} "
                     "(one of the two was graph-timed, the other not)")
    return lines


def spread(stats: Stats) -> str:
    """Half the p20-p80 range, relative to the median."""
    if not stats.median:
        return "-"
    return f"±{(stats.p80 - stats.p20) / 2 / stats.median:.1%}"


THROUGHPUT_COLUMNS = ("TFLOP/s", "GB/s", "% peak")
LEFT_COLUMNS = ("implementation", "status")  # the rest are numbers, right-aligned


def cpu_timed_only(records: list[Record]) -> bool:
    """Whether every row that shows a time was timed by the CPU wall clock (and one does): TFLOP/s, GB/s
    and % of a GPU's peak say nothing then (0.00, 0.0, -), so the table leaves those columns out."""
    timed = [r for r in records if r.ok]
    return bool(timed) and all(r.timing.method == CPU_METHOD for r in timed)


@dataclass
class CaseRows:
    """A case's results table as plain text, for the terminal (table_for_case) and the HTML report
    (kbench.site) alike: the headers, one row of cells per record, and the footnotes (reasons for
    non-OK rows, measurement warnings). The suite's own columns come last, their cells in rich markup."""

    headers: list[str]
    rows: list[list[str]]
    footnotes: list[str]
    suite_columns: int = 0  # how many of the last columns are the suite's (Suite.columns)


def case_rows(records: list[Record], suite=None) -> CaseRows:
    """The cells of a case's table, with the columns the case's suite adds (Suite.columns). Implementations
    that are not part of the case at all (another lesson's kernels) are counted in one footnote, not
    listed."""
    outside = [r for r in records if r.out_of_case]
    records = [r for r in records if not r.out_of_case]
    baseline = (records[0].baseline or "") if records else ""
    extra = suite.columns(records) if suite is not None else []
    clocks = any(_clock(r) for r in records)
    eager = any(_eager(r) is not None for r in records)  # a graph-timed row: its eager time beside the median
    bounded = any(_share_of_bound(r) is not None for r in records)
    throughput = not cpu_timed_only(records)
    headers = ["implementation", "status", "median", *(["eager"] if eager else []), "spread",
               *(THROUGHPUT_COLUMNS if throughput else []),
               f"vs {baseline} [95% CI]", "max err", *(["of bound"] if bounded else []),
               *(["SM MHz"] if clocks else []), *(column.header for column in extra)]
    rows, footnotes = [], []
    for i, r in enumerate(records):
        m = r.metrics if r.ok and r.metrics else Metrics()
        name = r.name
        notes = _notes(r)
        if notes:
            footnotes.append(f"{name}: {'; '.join(notes)}")
            name += "*"
        speed = r.speedup if r.ok else None
        rows.append([
            name,
            r.status,
            format_time(r.median) if r.ok else "-",
            *([format_time(_eager(r).stats.median) if _eager(r) else "-"] if eager else []),
            spread(r.timing.stats) if r.ok else "-",
            *([_num(m.tflops, ".2f"), _num(m.gbps, ".1f"), _num(m.pct_of_peak, ".1f")] if throughput else []),
            speedup_cell(speed, r.speedup_interval) if speed else "-",
            _num(r.correctness.max_abs_err, ".1e") if r.correctness else "-",
            *([_num(_share_of_bound(r), ".2f")] if bounded else []),
            *([_clock(r) or "-"] if clocks else []),
            *(column.cells[i] or "-" for column in extra),
        ])
    footnotes += graph_footnotes(records)
    if outside:
        footnotes.append(f"{len(outside)} not part of this case, left out: {', '.join(r.name for r in outside)}")
    return CaseRows(headers, rows, footnotes, len(extra))


def table_for_case(title: str, records: list[Record], suite=None) -> tuple[Table, list[str]]:
    """The case's rich table and its footnotes."""
    case = case_rows(records, suite)
    table = Table(title=title, title_justify="left", header_style="bold", box=box.SIMPLE_HEAD)
    own = len(case.headers) - case.suite_columns  # the columns before the suite's
    for i, name in enumerate(case.headers):
        if i < own:
            table.add_column(escape(name), justify="left" if name in LEFT_COLUMNS else "right")
        else:
            table.add_column(escape(name), overflow="fold")
    status = case.headers.index("status")
    for row in case.rows:
        cells = [escape(cell) for cell in row[:own]] + row[own:]  # the suite's cells are markup already
        cells[status] = f"[{STATUS_STYLE.get(row[status], '')}]{row[status]}[/]"
        table.add_row(*cells)
    return table, case.footnotes


def speedup_cell(speed: float, interval) -> str:
    """1.44x [1.41-1.47]: the ratio of medians and its distribution-free 95 % interval."""
    if not interval or not all(v is not None and math.isfinite(v) and v > 0 for v in interval):
        return f"{speed:.2f}x"
    low, high = interval
    return f"{speed:.2f}x [{low:.2f}-{high:.2f}]"


def _share_of_bound(record: Record) -> float | None:
    """The largest error as a share of what a correct kernel of the case's precision may make, over
    the input distributions (1 is the limit); None where the suite judges by a fixed tolerance."""
    distributions = record.correctness.distributions.values() if record.correctness else ()
    shares = [d["max_abs_err"] / d["allowed"] for d in distributions
              if d.get("allowed") and d.get("max_abs_err") is not None]
    return max(shares) if shares else None


def _clock(record: Record) -> str:
    """The SM clock the row's samples ran at (median), and how many ran throttled."""
    clock = record.timing.clock if record.ok else None
    if not clock or not clock.sm_mhz_median:
        return ""
    return f"{clock.sm_mhz_median}" + (f" ({clock.throttled} low)" if clock.throttled else "")


def figure_lines(records: list[Record]) -> list[str]:
    """The summary lines of the figures OK records carry (what an implementation measured itself
    after timing, e.g. the streams suite's stages, ideal time and overlap efficiency)."""
    lines = []
    for r in records:
        summary = r.figures.get("summary") if r.ok else None
        for line in summary or ():
            lines.append(f"{r.name}: {line}")
    return lines


def print_tables(records: list[Record], console: Console) -> None:
    from kbench import loader

    suites = loader.builtin_suites()  # what each suite adds to its tables
    by_case: dict[str, list[Record]] = {}
    for r in records:
        by_case.setdefault(r.case_key, []).append(r)
    for case_key, rows in by_case.items():
        suite = suites.get(rows[0].suite)
        table, footnotes = table_for_case(f"{rows[0].suite}: {case_key}", rows, suite)
        console.print(table)
        for line in footnotes:
            console.print(f"  * {escape(line)}", highlight=False)
        for line in suite.summary_lines(rows) if suite is not None else ():
            console.print(f"  {escape(line)}", highlight=False)
        for line in figure_lines(rows):
            console.print(f"  {escape(line)}", highlight=False)
        console.print()
    by_suite: dict[str, list[Record]] = {}
    for r in records:
        by_suite.setdefault(r.suite, []).append(r)
    for name, rows in by_suite.items():  # what a suite says across its cases (Suite.run_lines)
        suite = suites.get(name)
        lines = suite.run_lines(rows) if suite is not None and not cpu_timed_only(rows) else []
        if lines:
            console.print(f"[bold]{escape(name)}, across the cases of this run[/]")
            for line in lines:
                console.print(f"  {escape(line)}", highlight=False)
            console.print()
    # Only a time shown makes the note true: a SKIP row's environment says cpu on a GPU machine too.
    if any(r.ok and r.timing.method == CPU_METHOD for r in records):
        console.print(f"[bold yellow]note:[/] {CPU_NOTE}")
    gpu = next((r.gpu for r in records if r.gpu), None)
    if gpu:
        console.print(f"device: {gpu['name']} (driver {gpu.get('driver', '?')}, CUDA {gpu.get('cuda_runtime')}); "
                      "% peak = share of the datasheet roofline at each kernel's arithmetic intensity",
                      highlight=False)


CSV_FIELDS = ("suite", "impl", "label", "backend", "case_key", "status", "reason", "median_ms", "p20_ms", "p80_ms",
              "samples", "tflops", "gbps", "pct_of_peak", "speedup", "max_abs_err", "max_rel_err", "method",
              "eager_median_ms")


def flat(record: Record) -> dict:
    """A CSV row. A record without a timing (a SKIP, a crash) leaves the timing columns empty."""
    timing = record.timing or Timing()
    m = record.metrics or Metrics()
    corr = record.correctness or Correctness()
    return {
        "suite": record.suite,
        "impl": record.impl,
        "label": record.name,
        "backend": record.backend,
        "case_key": record.case_key,
        "status": record.status,
        "reason": record.reason,
        "median_ms": timing.stats.median,
        "p20_ms": timing.stats.p20,
        "p80_ms": timing.stats.p80,
        "samples": timing.stats.n,
        "tflops": m.tflops,
        "gbps": m.gbps,
        "pct_of_peak": m.pct_of_peak,
        "speedup": record.speedup,
        "max_abs_err": corr.max_abs_err,
        "max_rel_err": corr.max_rel_err,
        "method": timing.method,
        "eager_median_ms": timing.eager.stats.median if timing.eager else None,  # beside a graph-timed median
    }


def to_csv(records: list[Record]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS)
    writer.writeheader()
    for r in records:
        writer.writerow(flat(r))
    return buffer.getvalue()


def to_json(records: list[Record]) -> str:
    return results.dumps([record.to_json() for record in records], indent=2)


# --- kbench compare ---------------------------------------------------------------------

DECISION_STYLE = {"slower": "bold red", "failed": "bold red", "faster": "green", "same": "", "undecided": "yellow",
                  "missing": "yellow", "new": "yellow", "skipped": "dim"}


def _change(pair) -> str:
    return "-" if pair.ratio is None else f"{pair.ratio - 1:+.1%}"


def _interval(pair) -> str:
    if pair.low is None:
        return "-"
    high = "inf" if pair.high == float("inf") else f"{pair.high - 1:+.1%}"
    return f"{pair.low - 1:+.1%} .. {high}"


def _p(pair) -> str:
    return "-" if pair.p_value is None else f"{pair.p_value:.2g}"


def compare_rows(pairs) -> list[list[str]]:
    """One row of plain text per pair, in COMPARE_COLUMNS' order."""
    rows = []
    for p in pairs:
        note = p.note
        if p.env_diff:  # compared anyway (--force)
            note = "; ".join(filter(None, [note, "env differs: " + ", ".join(name for name, _, _ in p.env_diff)]))
        rows.append([p.suite, p.case_key, p.label, format_time(p.median("base")), format_time(p.median("current")),
                     _change(p), _interval(p), _p(p), "-" if p.threshold is None else f"{p.threshold * 100:.3g}%",
                     p.decision, note])
    return rows


COMPARE_COLUMNS = ("suite", "case", "implementation", "BASE", "CURRENT", "change", "interval", "p", "threshold",
                   "decision", "note")
_RIGHT = ("BASE", "CURRENT", "change", "p", "threshold")
_DECISION = COMPARE_COLUMNS.index("decision")


def compare_tables(pairs) -> list[Table]:
    """A table per (suite, case), as `kbench run` prints them: one row per implementation."""
    groups: dict[tuple, list[list[str]]] = {}
    for row in compare_rows(pairs):
        groups.setdefault((row[0], row[1]), []).append(row[2:])
    tables = []
    for (suite, case_key), rows in groups.items():
        table = Table(title=f"{escape(suite)}: {escape(case_key)}", title_justify="left", header_style="bold",
                      box=box.SIMPLE_HEAD)
        for name in COMPARE_COLUMNS[2:]:
            table.add_column(name, justify="right" if name in _RIGHT else "left")
        for row in rows:
            decision = row[_DECISION - 2]
            style = DECISION_STYLE.get(decision, "")
            cells = [escape(cell) for cell in row]
            if style:
                cells[_DECISION - 2] = f"[{style}]{escape(decision)}[/]"
            table.add_row(*cells)
        tables.append(table)
    return tables


def _md(cell: str) -> str:
    return cell.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def compare_markdown(pairs, summary: str, notes: list[str] = ()) -> str:
    """A markdown summary for a CI job page ($GITHUB_STEP_SUMMARY)."""
    lines = ["## kbench compare", "", summary, ""]
    lines += [f"> {_md(note)}" for note in notes]
    if notes:
        lines.append("")
    lines.append("| " + " | ".join(COMPARE_COLUMNS) + " |")
    lines.append("|" + "|".join("---:" if name in _RIGHT else "---" for name in COMPARE_COLUMNS) + "|")
    for row in compare_rows(pairs):
        if row[_DECISION] in ("slower", "failed"):
            row[_DECISION] = f"**{row[_DECISION]}**"
        lines.append("| " + " | ".join(_md(cell) for cell in row) + " |")
    lines.append("")
    lines.append("*change*: median of CURRENT over median of BASE, minus 1; *interval*: where that change lies "
                 "(distribution-free); *p*: two-sided Mann-Whitney U. A pair is *slower* or *faster* only when "
                 "its change is beyond the threshold and p < alpha.")
    return "\n".join(lines) + "\n"


COMPARE_FORMATS = ("table", "json")


def _shifted(value: float | None) -> float | None:
    """A ratio as a change (0.2 is 20 % slower); None stays None, an unbounded end stays inf."""
    return None if value is None else value - 1


def compare_document(pairs, verdict: str, code: int, counts: dict[str, int], alpha: float,
                     thresholds: dict[str, tuple[float, str]]) -> dict:
    """`kbench compare --format json`: the table's content as numbers, for scripts. Medians in ms; a
    change is CURRENT's median over BASE's, minus 1; ``change_interval`` is where that change lies (an
    end that the samples cannot bound is null, as are values a pair has none of)."""
    return {
        "verdict": verdict,  # the line the table ends with: "passed: 4 same", "FAILED: 1 slower, 3 same"
        "passed": code == 0,
        "exit_code": code,
        "counts": counts,  # pairs per decision, every decision named
        "alpha": alpha,
        "thresholds": {suite: {"threshold": value, "source": source} for suite, (value, source) in thresholds.items()},
        "pairs": [{
            "suite": p.suite,
            "case_key": p.case_key,
            "implementation": p.label,
            "base_median_ms": p.median("base"),
            "current_median_ms": p.median("current"),
            "change": _shifted(p.ratio),
            "change_interval": None if p.low is None else [_shifted(p.low), _shifted(p.high)],
            "p_value": p.p_value,
            "threshold": p.threshold,
            "decision": p.decision,
            "note": p.note,
            "env_differences": [{"field": name, "base": a, "current": b} for name, a, b in p.env_diff],
            "base_record": p.base.where if p.base else None,  # file:line
            "current_record": p.current.where if p.current else None,
        } for p in pairs],
    }


FORMATS = ("table", "json", "csv")


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise UserError(f"--format: unknown format {fmt!r} (choose from {', '.join(FORMATS)})")


def emit(records: list[Record], fmt: str, console: Console) -> None:
    """Records as tables on ``console``, or as JSON / CSV on stdout (for pipes)."""
    if fmt == "json":
        print(to_json(records))
    elif fmt == "csv":
        print(to_csv(records), end="")
    else:
        print_tables(records, console)


# --- kbench bench ------------------------------------------------------------------------

def peer_table(title: str, rows) -> Table:
    """The summary of a plan: each kernel (kbench.peers.PeerRatio), its peer and the ratio [95 % CI]."""
    table = Table(title=title, title_justify="left", header_style="bold", box=box.SIMPLE_HEAD)
    for name in ("suite", "case", "kernel", "status", "median", "peer", "peer median", "peer / kernel [95% CI]"):
        table.add_column(name, justify="right" if name in ("median", "peer median", "peer / kernel [95% CI]")
                         else "left", overflow="fold")
    for row in rows:
        style = STATUS_STYLE.get(row.status)
        status = f"[{style}]{escape(row.status)}[/]" if style else escape(str(row.status))
        table.add_row(escape(row.suite or ""), escape(row.case_key or ""), escape(row.label or ""), status,
                      format_time(row.median),
                      escape(row.peer), format_time(row.peer_median),
                      (speedup_cell(row.ratio, row.interval) + (" eager" if row.basis else "")) if row.ratio
                      else "-")
    return table
