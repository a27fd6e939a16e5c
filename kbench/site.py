"""`kbench report`: results as a static HTML site, to open from disk (no server, nothing fetched).

    OUT/index.html            the suites: GPUs, cases, commits and dates spanned, regressions
    OUT/suite-NAME.html       per GPU and case: the latest run's table, the case over runs, the roofline
    OUT/plots/*.svg           the pictures the pages show (matplotlib, kbench.plots)

The table is kbench's terminal table (kbench.report.case_rows); the history and its regressions come
from kbench.history, judged with kbench compare's statistics and thresholds; the roofline is
kbench roofline's (kbench.roofline.place, kbench.plots.roofline_plot).
"""

from __future__ import annotations

import datetime as dt
import html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kbench import history, report
from kbench.errors import UserError
from kbench.record import Record

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; color: #1d1d1f; max-width: 1250px; margin: 1.5rem auto; padding: 0 1rem; }
h1 { font-size: 1.6rem; margin: .2rem 0 .6rem; } h2 { border-bottom: 2px solid #ddd; margin-top: 2rem; }
h3 { margin: 1.6rem 0 .3rem; } h3.case { font-family: ui-monospace, monospace; font-size: 1rem; }
div.wide { overflow-x: auto; } td.text { white-space: normal; min-width: 16em; }
table { border-collapse: collapse; margin: .4rem 0; font-size: 13px; }
th, td { padding: 3px 10px; border-bottom: 1px solid #e3e3e3; text-align: left; white-space: nowrap; }
th { background: #f4f4f6; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.OK { color: #137333; } .SKIP { color: #8a6100; } .FAIL, .CRASH, .TIMEOUT, .slower { color: #b3261e; font-weight: 600; }
tr.slower td { background: #fdecea; } .faster { color: #137333; } .muted, .notes { color: #5f6368; font-size: 12px; }
ul.notes { margin: .2rem 0; padding-left: 1.2rem; }
img { display: block; width: 900px; max-width: 100%; height: auto; margin: .5rem 0; }
a { color: #0b57d0; }
"""


def _page(title: str, body: str) -> str:
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n<body>\n{body}\n</body></html>\n")


class Html(str):
    """Text that is HTML already (a link): put in a page as it is, where other text is escaped."""


def _html(text: str) -> str:
    return text if isinstance(text, Html) else html.escape(text)


def _table(headers: list[str], rows: list[list[str]], right: set[int] = frozenset(), row_class=None,
           cell_class=None) -> str:
    """An HTML table of text cells (escaped here, but for Html ones), scrolled sideways where the page is
    narrower; ``right``: the numeric columns; ``row_class(i)``, ``cell_class(i, j)``: CSS classes."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        cells = []
        for j, cell in enumerate(row):
            classes = " ".join(filter(None, ["num" if j in right else "", cell_class(i, j) if cell_class else ""]))
            cells.append(f'<td class="{classes}">{_html(cell)}</td>' if classes else f"<td>{_html(cell)}</td>")
        tr = f'<tr class="{row_class(i)}">' if row_class and row_class(i) else "<tr>"
        body.append(tr + "".join(cells) + "</tr>")
    return (f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>\n' + "\n".join(body)
            + "\n</tbody></table></div>")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-").lower() or "x"


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None


def _span(values: list[str]) -> str:
    """'a' or 'a .. b' of values in order (duplicates dropped)."""
    values = list(dict.fromkeys(v for v in values if v))
    return "-" if not values else values[0] if len(values) == 1 else f"{values[0]} .. {values[-1]}"


# --- a suite's page ----------------------------------------------------------------------------------

def _change_cell(step) -> tuple[str, str]:
    """The 'vs previous run' cell of a row, and its class: compare's decision and change."""
    if step is None:
        return "-", ""
    pair = step.pair
    change = "" if pair.ratio is None else f" {pair.ratio - 1:+.1%}"
    p = "" if pair.p_value is None else f" (p {pair.p_value:.2g})"
    # Judged all the same, as compare --force would: the cell says which fields differ.
    env = f"; env differs: {', '.join(name for name, _, _ in pair.env_diff)}" if pair.env_diff else ""
    return f"{pair.decision}{change}{p}{env}", pair.decision


def case_table(case: history.CaseHistory, suite) -> str:
    """The latest run's table as kbench run prints it, with each row's change since its previous record."""
    from rich.text import Text

    run = case.latest
    rows = report.case_rows(run.records, suite)
    own = len(rows.headers) - rows.suite_columns
    latest = len(case.runs) - 1
    changes = [_change_cell(case.step(r.name, latest)) for r in run.records]
    cells = [[*row[:own], *(Text.from_markup(c).plain for c in row[own:]), changes[i][0]]
             for i, row in enumerate(rows.rows)]
    status = rows.headers.index("status")
    right = {j for j, h in enumerate(rows.headers[:own]) if h not in report.LEFT_COLUMNS}
    last = len(rows.headers)

    def cell_class(i: int, j: int) -> str:  # a status's colour, a change's decision, the suite's sentences wrap
        return cells[i][status] if j == status else changes[i][1] if j == last else "text" if j >= own else ""

    table = _table([*rows.headers, "vs previous run"], cells, right,
                   row_class=lambda i: "slower" if changes[i][1] == "slower" else "", cell_class=cell_class)
    notes = rows.footnotes + list(suite.summary_lines(run.records) if suite is not None else ())
    notes += report.figure_lines(run.records)
    listed = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    return table + (f'<ul class="notes">{listed}</ul>' if notes else "")


REGRESSION_HEADERS = ("GPU", "case", "implementation", "from run", "to run", "before", "after", "change",
                      "interval", "p", "threshold", "note")


def regressions_table(cases: list[history.CaseHistory], anchors: list[str]) -> str:
    """Every slower step of the suite's cases, with compare's figures; each case links to its section."""
    rows = []
    for case, anchor in zip(cases, anchors):
        for step in case.regressions:
            pair = step.pair
            _, _, label, before, after, change, interval, p, threshold, _, note = report.compare_rows([pair])[0]
            link = Html(f'<a href="#{anchor}">{html.escape(case.case_key)}</a>')
            rows.append([case.gpu, link, label, pair.base.where, pair.current.where, before, after,
                         change, interval, p, threshold, note])
    if not rows:
        return '<p class="muted">No regression: no implementation was slower than in its previous run.</p>'
    return _table(list(REGRESSION_HEADERS), rows, right={5, 6, 7, 9, 10}, row_class=lambda i: "slower")


@dataclass
class SuiteSummary:
    """A suite's line of the index."""

    name: str
    page: str
    gpus: list[str]
    cases: int
    commits: str
    dates: str
    records: int
    regressions: int


def suite_page(name: str, cases: list[history.CaseHistory], suite, units: dict, out: Path, rule: str) -> str:
    """A suite's page: its regressions, then per GPU each case's latest table and history, and the
    roofline of the suite's latest records. Writes the plots under OUT/plots/."""
    from kbench import plots, roofline

    parts = ['<p><a href="index.html">&larr; all suites</a></p>', f"<h1>{html.escape(name)}</h1>"]
    if suite is not None and suite.description:
        parts.append(f'<p class="muted">{html.escape(suite.description)}</p>')
    gpus = list(dict.fromkeys(c.gpu for c in cases))
    cases = [c for gpu in gpus for c in cases if c.gpu == gpu]  # GPU by GPU
    anchors = [f"case-{n}" for n in range(len(cases))]
    parts += ["<h2>Regressions</h2>", f'<p class="muted">{html.escape(rule)}</p>', regressions_table(cases, anchors)]
    for gpu in gpus:
        parts.append(f"<h2>{html.escape(gpu)}</h2>")
        mine = [(case, anchor) for case, anchor in zip(cases, anchors) if case.gpu == gpu]
        for case, anchor in mine:
            plot = plots.history_plot(case, out / "plots" / f"{_slug(name)}-{anchor}.svg")[0]
            parts += [f'<h3 class="case" id="{anchor}">{html.escape(case.case_key)}</h3>',
                      f'<p class="muted">latest run: {html.escape(case.latest.label)} '
                      f"({len(case.runs)} run{'s' if len(case.runs) > 1 else ''})</p>",
                      case_table(case, suite),
                      f'<img src="plots/{plot.name}" alt="{html.escape(name)} {html.escape(case.case_key)} over runs">']
        latest = [r for case, _ in mine for r in case.latest.records]
        if any(r.ok and r.timing.method == report.CPU_METHOD for r in latest):
            parts.append(f'<p class="muted">{html.escape(report.CPU_NOTE)}</p>')
        parts.append("<h3>Roofline of the latest runs</h3>")
        placed = roofline.place(latest, units)  # one GPU's records: one set of roofs
        if placed.points:
            peaks = placed.points[0][0]
            plot = plots.roofline_plot([p for _, p in placed.points], peaks,
                                       out / "plots" / f"{_slug(name)}-{_slug(gpu)}-roofline.svg",
                                       title=f"{name} on {peaks.name}: latest runs ({peaks.source})",
                                       calibration=placed.calibrations.get(peaks.key), suffixes=(".svg",))[0]
            parts.append(f'<img src="plots/{plot.name}" alt="{html.escape(name)} roofline on {html.escape(gpu)}">')
        else:
            parts.append('<p class="muted">No roofline: no OK record with a GPU time and FLOPs on a GPU of '
                         "kbench's table (CPU runs and failed rows have none).</p>")
    return _page(f"kbench report: {name}", "\n".join(parts))


# --- the site ----------------------------------------------------------------------------------------

def index_page(summaries: list[SuiteSummary], sources: list[str], records: int) -> str:
    rows = [[Html(f'<a href="{s.page}">{html.escape(s.name)}</a>'), ", ".join(s.gpus), str(s.cases), s.commits,
             s.dates, str(s.records), str(s.regressions)] for s in summaries]
    table = _table(["suite", "GPU", "cases", "commits", "dates (UTC)", "records", "regressions"], rows,
                   right={2, 5, 6}, row_class=lambda i: "slower" if summaries[i].regressions else "")
    built = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = ["<h1>kbench results</h1>",
            f'<p class="muted">{records} records from {html.escape(", ".join(sources))}; built {built}.</p>', table]
    return _page("kbench report", "\n".join(body))


def build(records: list[Record], out: Path, sources: list[str], suites: dict, units: dict,
          thresholds: dict[str, tuple[float, str]], alpha: float,
          progress: Callable[[str], None] = lambda line: None) -> Path:
    """Write the site into ``out`` and return its index.html. ``suites``: the suite definitions by name
    (their table columns and notes); ``units``: (suite, impl) -> roofline unit, for records without one;
    ``thresholds`` (suite -> threshold and where it comes from) and ``alpha``: kbench compare's."""
    if not records:
        raise UserError("no records to report")
    try:
        (out / "plots").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--out: cannot write to {str(out)!r}: {exc.strerror or exc}") from None
    cases = history.histories(records, lambda suite: thresholds[suite][0], alpha)
    summaries = []
    for name in dict.fromkeys(r.suite for r in records):
        mine = [c for c in cases if c.suite == name]
        page = f"suite-{_slug(name)}.html"
        threshold, source = thresholds[name]
        rule = (f"A regression: an implementation slower than in its previous run of the same case on the same GPU, "
                f"as kbench compare decides: the median's change beyond {threshold * 100:.3g}% ({source}) "
                f"and a Mann-Whitney U p under {alpha:g}.")
        _write(out / page, suite_page(name, mine, suites.get(name), units, out, rule))
        runs = sorted((run for c in mine for run in c.runs), key=lambda run: run.created_at or "")
        commits = list(dict.fromkeys((run.commit or "")[:7] for run in runs if run.commit))
        summary = SuiteSummary(
            name, page, list(dict.fromkeys(c.gpu for c in mine)), len(mine),
            f"{_span(commits)} ({len(commits)})" if commits else "-",
            _span([(run.created_at or "")[:10] for run in runs]),
            sum(len(run.records) for c in mine for run in c.runs), sum(len(c.regressions) for c in mine))
        summaries.append(summary)
        progress(f"{out / page}: {len(mine)} case(s), {summary.records} records, {summary.regressions} regression(s)")
    index = out / "index.html"
    _write(index, index_page(summaries, sources, len(records)))
    return index
