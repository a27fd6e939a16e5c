"""`kbench report RESULTS --out DIR`: the static site's pages, tables, plots and regressions, read back as HTML."""

from __future__ import annotations

import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from fake_records import A100, attention_history, gpu_record

from kbench import results
from kbench.loader import PROJECT_ROOT

BASELINES = PROJECT_ROOT / "results" / "baselines"


class Page(HTMLParser):
    """What a test reads of a page: its tables (rows of cell texts, with each row's class), images, links, text."""

    def __init__(self, path: Path):
        super().__init__()
        self.tables: list[list[tuple[str, list[str]]]] = []
        self.images: list[str] = []
        self.links: list[str] = []
        self.text: list[str] = []
        self._cell: list[str] | None = None
        self.feed(path.read_text(encoding="utf-8"))

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append((attrs.get("class") or "", []))
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "img":
            self.images.append(attrs["src"])
        elif tag == "a":
            self.links.append(attrs["href"])

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.tables[-1][-1][1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)

    def table_with(self, header: str) -> list[dict[str, str]]:
        """The rows of the first table with this column, as {header: cell} (and "class": the row's class)."""
        for table in self.tables:
            headers = table[0][1]
            if header in headers:
                return [{**dict(zip(headers, cells)), "class": cls} for cls, cells in table[1:]]
        raise AssertionError(f"no table with a {header!r} column")


def _report(cli, *args):
    result = cli("report", *map(str, args))
    assert result.exit_code == 0, result.output
    return result


def test_the_site_of_the_committed_baselines(cli, tmp_path):
    """Every suite of results/baselines has its page, linked from the index, with the terminal's table of
    each case's latest run, a plot of each case and the roofline, and nothing fetched from elsewhere."""
    from rich.text import Text

    from kbench import api, history, loader, report

    out = tmp_path / "site"
    result = _report(cli, BASELINES, "--out", out)
    records = api.load(BASELINES).records
    suites = list(dict.fromkeys(r.suite for r in records))
    index = Page(out / "index.html")
    assert index.links == [f"suite-{s}.html" for s in suites]
    rows = {row["suite"]: row for row in index.table_with("regressions")}
    for suite in suites:
        mine = [r for r in records if r.suite == suite]
        commits = list(dict.fromkeys(history.commit_of(r)[:7] for r in sorted(mine, key=lambda r: r.created_at)))
        assert rows[suite]["GPU"] == "NVIDIA H200" and rows[suite]["records"] == str(len(mine))
        assert rows[suite]["commits"].split(" (")[0] in (commits[0], f"{commits[0]} .. {commits[-1]}")
        assert f"suite-{suite}.html" in result.stderr  # a progress line per page
        page = Page(out / f"suite-{suite}.html")
        cases = history.histories(mine, lambda s: 0.05, 0.01)
        # The terminal's table of each case's latest run (kbench show's cells), then its change since the run before.
        tables = [t for t in page.tables if t[0][1][-1] == "vs previous run"]
        assert len(tables) == len(cases)
        for table, case in zip(tables, cases):
            expected = report.case_rows(case.latest.records, loader.builtin_suites().get(suite))
            assert table[0][1][:-1] == expected.headers
            own = len(expected.headers) - expected.suite_columns
            assert [cells[:-1] for _, cells in table[1:]] == [
                row[:own] + [Text.from_markup(c).plain for c in row[own:]] for row in expected.rows]
        # One history plot per case and the roofline, each an SVG in plots/ beside the page.
        assert page.images[:len(cases)] == [f"plots/{suite}-case-{n}.svg" for n in range(len(cases))]
        assert page.images[len(cases):] in ([], [f"plots/{suite}-nvidia-h200-roofline.svg"])
    for name in [*index.links, "index.html"]:
        html = (out / name).read_text()
        assert "http://" not in html and "https://" not in html  # nothing to fetch when viewed
    for svg in (out / "plots").iterdir():
        assert svg.suffix == ".svg" and svg.read_text().lstrip().startswith("<?xml")
        assert 'href="http' not in svg.read_text()


def test_the_table_is_kbench_shows(cli, tmp_path):
    """A recorded H200 run: the page's cells are the ones `kbench show` prints for it."""
    out = tmp_path / "site"
    _report(cli, PROJECT_ROOT / "tests" / "fixtures" / "h200" / "attention-n4096.jsonl", "--out", out)
    page = Page(out / "suite-attention.html")
    table = {row["implementation"]: row for row in page.table_with("vs naive [95% CI]")}
    assert list(table) == ["naive", "cupy-fa2", "sdpa", "sdpa-cudnn", "sdpa-efficient", "sdpa-math", "triton-fa2"]
    cudnn = table["sdpa-cudnn"]
    assert (cudnn["status"], cudnn["median"], cudnn["spread"], cudnn["TFLOP/s"], cudnn["GB/s"], cudnn["% peak"],
            cudnn["vs naive [95% CI]"], cudnn["max err"], cudnn["SM MHz"]) == (
        "OK", "459.0 us", "±2.4%", "598.87", "292.4", "60.6", "6.09x", "1.1e-04", "1830")
    assert table["naive"]["vs previous run"] == "-"  # one run: nothing to compare with
    assert page.images == ["plots/attention-case-0.svg", "plots/attention-nvidia-h200-roofline.svg"]


def test_a_suites_own_columns_are_in_its_table(cli, tmp_path):
    out = tmp_path / "site"
    _report(cli, BASELINES / "h200-patterns.jsonl", "--out", out)
    rows = Page(out / "suite-patterns.html").table_with("lesson predicts: measured")
    assert rows[0]["lesson predicts: measured"] == "baseline"
    assert any(row["lesson predicts: measured"].endswith(("holds", "does not hold")) for row in rows)


def _history_file(tmp_path, records) -> Path:
    path = tmp_path / "history.jsonl"
    results.write_atomic(path, records)
    return path


def test_a_planted_regression_is_marked_and_steady_ones_are_not(cli, tmp_path):
    out = tmp_path / "site"
    _report(cli, _history_file(tmp_path, attention_history(slower_at=4)), "--out", out)
    assert Page(out / "index.html").table_with("regressions")[0]["regressions"] == "1"
    page = Page(out / "suite-attention.html")
    (regression,) = page.table_with("from run")
    assert regression["implementation"] == "sdpa" and regression["class"] == "slower"
    assert regression["from run"] == "3333333 2026-11-13 10:00" and regression["to run"] == "4444444 2026-11-14 10:00"
    change = float(regression["change"].rstrip("%")) / 100
    assert 0.15 < change < 0.25 and regression["threshold"] == "5%"
    # The latest run (after the step) holds: sdpa is the same as in run 4, nobody is marked slower.
    latest = {row["implementation"]: row for row in page.table_with("vs previous run")}
    assert latest["sdpa"]["vs previous run"].startswith("same") and latest["sdpa"]["class"] == ""
    assert not any(row["class"] == "slower" for row in latest.values())
    # On the plot: the slower point ringed and its change written beside it (matplotlib keeps text as comments).
    svg = (out / "plots" / "attention-case-0.svg").read_text()
    assert "slower than the run before" in svg and f"<!-- {change:+.0%} -->" in svg


def test_the_latest_run_slower_is_marked_in_its_table(cli, tmp_path):
    out = tmp_path / "site"
    _report(cli, _history_file(tmp_path, attention_history(runs=3, slower_at=2)), "--out", out)
    latest = {row["implementation"]: row for row in Page(out / "suite-attention.html").table_with("vs previous run")}
    assert latest["sdpa"]["class"] == "slower" and latest["sdpa"]["vs previous run"].startswith("slower +")
    assert latest["naive"]["vs previous run"].startswith("same")


def test_no_regression_in_a_steady_history(cli, tmp_path):
    out = tmp_path / "site"
    _report(cli, _history_file(tmp_path, attention_history(slower_at=None)), "--out", out)
    page = Page(out / "suite-attention.html")
    assert "No regression" in "".join(page.text)
    assert "slower than the run before" not in (out / "plots" / "attention-case-0.svg").read_text()


def test_several_gpus_and_rows_without_a_time(cli, tmp_path):
    records = attention_history(runs=4, slower_at=None) + [
        gpu_record("sdpa", "a" * 40, "2026-11-20T10:00:00+00:00", 4.5, gpu=A100),
        gpu_record("naive", "a" * 40, "2026-11-20T10:00:01+00:00", 0, gpu=A100, status="SKIP")]
    out = tmp_path / "site"
    _report(cli, _history_file(tmp_path, records), "--out", out)
    page = Page(out / "suite-attention.html")
    text = "".join(page.text)
    assert "NVIDIA H200" in text and "NVIDIA A100-SXM4-80GB" in text
    assert len(page.images) == 2 * 2  # per GPU: the case's history and the roofline
    h200, a100 = [t for t in page.tables if "vs previous run" in t[0][1]]
    headers = h200[0][1]
    cupy = dict(zip(headers, next(cells for _, cells in h200[1:] if cells[0].startswith("cupy-fa2"))))
    skipped = dict(zip(headers, next(cells for _, cells in a100[1:] if cells[0].startswith("naive"))))
    for row, status in ((cupy, "FAIL"), (skipped, "SKIP")):  # a status and its reason, never a number
        assert row["status"] == status
        assert all(row[h] == "-" for h in headers if h not in ("implementation", "status", "vs previous run"))
    assert "cupy-fa2: max error 3.1e-01 over its bound 2.0e-03 (normal inputs)" in text  # run 3's FAIL
    assert "naive: needs cupy" in text


def test_records_without_a_gpu_have_no_roofline_but_a_table(cli, tmp_path):
    from fake_records import fake_record

    out = tmp_path / "site"
    _report(cli, _history_file(tmp_path, [fake_record("naive"), fake_record("sdpa", median=0.5)]), "--out", out)
    page = Page(out / "suite-attention.html")
    assert "No roofline" in "".join(page.text) and len(page.images) == 1
    assert "CPU run: times are wall clock" in "".join(page.text)


@pytest.mark.parametrize("setup, fragment", [
    ("empty", "no records"),
    ("missing", "No such file or directory"),
    ("out-is-a-file", "--out: cannot write to"),
    ("threshold", "--threshold: 'fast' is not a fraction"),
])
def test_errors_are_one_line(kbench_proc, tmp_path, setup, fragment):
    source = tmp_path / "results.jsonl"
    results.write_atomic(source, [] if setup == "empty" else attention_history(runs=1))
    args = [source, "--out", tmp_path / "site"]
    if setup == "missing":
        args[0] = tmp_path / "nothing.jsonl"
    if setup == "out-is-a-file":
        (tmp_path / "site").write_text("not a folder")
    if setup == "threshold":
        args += ["--threshold", "fast"]
    proc = kbench_proc("report", *args)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and fragment in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("kbench: error:")


def test_help_imports_no_plotting_or_tables(proc_env, tmp_path):
    """kbench --help and kbench report --help stay fast: matplotlib and pandas load only when a site is built."""
    script = ("import sys\nfrom typer.testing import CliRunner\nfrom kbench.cli import app\n"
              "for args in (['--help'], ['report', '--help']):\n"
              "    result = CliRunner().invoke(app, args)\n"
              "    assert result.exit_code == 0 and 'report' in result.output, result.output\n"
              "print(*(name in sys.modules for name in ('matplotlib', 'pandas', 'numpy', 'torch')))\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=proc_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False"] * 4


def test_a_step_across_environments_says_which_fields_differ(cli, tmp_path):
    records = attention_history(runs=2, slower_at=None)
    for r in records[4:]:  # the second run on a newer driver
        r.env["gpu"]["driver"] = "590.10"
    out = tmp_path / "site"
    _report(cli, _history_file(tmp_path, records), "--out", out)
    latest = {row["implementation"]: row for row in Page(out / "suite-attention.html").table_with("vs previous run")}
    assert latest["naive"]["vs previous run"].endswith("; env differs: gpu.driver")
