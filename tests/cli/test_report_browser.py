"""`kbench report`'s site in a real browser: headless Chromium (Debian's /usr/bin/chromium, driven by
Playwright) opens every page from disk. Each page must render its tables and plots (every image loaded,
with a size on the page), with no console error, no failed request and no request for anything but the
site's own files. Screenshots of the index and a suite page are kept under test-artifacts/.

Without Chromium or Playwright the test is skipped with the reason, except in CI (CI set in the
environment), where .ci/run installs both and a skip would hide a page that no longer renders."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from fake_records import A100, attention_history, gpu_record

from kbench import results
from kbench.loader import PROJECT_ROOT

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = PROJECT_ROOT / "test-artifacts"
# What a closed machine running as root needs: no sandbox (root), no GPU, and none of Chromium's own
# traffic (updates, sync, QUIC probes) besides the pages'.
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


def _missing() -> str:
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (apt-get install -y chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "no Playwright for Python (pip install playwright, or the test extra)"
    return ""


@pytest.fixture(scope="module")
def browser_context():
    missing = _missing()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"the report's browser test must run in CI: {missing}")
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="kbench-chromium-")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=ARGS, viewport={"width": 1300, "height": 900})
        try:
            yield context
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A site of the committed H200 baselines, an attention history with a regression planted and the
    same case on a second GPU (one row SKIPped there)."""
    from typer.testing import CliRunner

    from kbench.cli import app

    folder = tmp_path_factory.mktemp("report")
    for path in (PROJECT_ROOT / "results" / "baselines").glob("*.jsonl"):
        shutil.copy(path, folder / path.name)
    results.write_atomic(folder / "history.jsonl", attention_history(slower_at=4) + [
        gpu_record("sdpa", "a" * 40, "2026-11-20T10:00:00+00:00", 4.5, gpu=A100),
        gpu_record("naive", "a" * 40, "2026-11-20T10:00:01+00:00", 0, gpu=A100, status="SKIP")])
    out = folder / "site"
    result = CliRunner().invoke(app, ["report", str(folder), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _open(context, path: Path) -> tuple:
    """The page at ``path`` opened from disk, and what went wrong on the way: console errors, uncaught
    exceptions, failed requests and requests for anything outside the site's folder."""
    page = context.new_page()
    problems: list[str] = []
    root = path.parent.as_uri()
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on("requestfailed", lambda r: problems.append(f"failed request: {r.url} ({r.failure})"))
    page.on("request", lambda r: None if r.url.startswith(root) else problems.append(f"request outside: {r.url}"))
    page.goto(path.as_uri(), wait_until="load")
    return page, problems


def _rendered_images(page) -> list[dict]:
    return page.evaluate("""[...document.images].map(img => {
        const box = img.getBoundingClientRect();
        return {src: img.getAttribute('src'), complete: img.complete, natural: img.naturalWidth,
                width: box.width, height: box.height};
    })""")


def test_every_page_renders_its_tables_and_plots(browser_context, site):
    index, problems = _open(browser_context, site / "index.html")
    suites = index.eval_on_selector_all("table a", "links => links.map(a => a.getAttribute('href'))")
    committed = {r.suite for path in (PROJECT_ROOT / "results" / "baselines").glob("*.jsonl") for r in results.read(path)}
    assert len(suites) == len(committed) and problems == []  # a page for each suite, the history's in them
    ARTIFACTS.mkdir(exist_ok=True)
    index.screenshot(path=str(ARTIFACTS / "report-index.png"), full_page=True)
    index.close()
    for name in suites:
        page, problems = _open(browser_context, site / name)
        images = _rendered_images(page)
        cases = page.locator("h3.case").count()
        assert cases >= 1 and len(images) >= cases, name  # a history per case, and rooflines
        for image in images:
            assert image["complete"] and image["natural"] > 0, (name, image)  # the SVG loaded and decoded
            assert image["width"] > 200 and image["height"] > 100, (name, image)  # and takes room on the page
        assert page.locator("table").count() >= cases, name
        assert problems == [], (name, problems)
        if name == "suite-attention.html":
            page.screenshot(path=str(ARTIFACTS / "report-suite-attention.png"), full_page=True)
            # The planted regression is listed at the top, in red, and both GPUs have a section.
            regression = page.locator("tr.slower").first
            assert "sdpa" in regression.inner_text() and "4444444" in regression.inner_text()
            assert regression.evaluate("row => getComputedStyle(row.querySelector('td')).backgroundColor") \
                != "rgba(0, 0, 0, 0)"
            headings = page.locator("h2").all_inner_texts()
            assert "NVIDIA H200" in headings and "NVIDIA A100-SXM4-80GB" in headings
        page.close()
    assert (ARTIFACTS / "report-index.png").stat().st_size > 10_000
    assert (ARTIFACTS / "report-suite-attention.png").stat().st_size > 50_000


def test_a_broken_plot_link_is_caught(browser_context, tmp_path):
    """The checks above can fail: a page whose plot is missing reports a failed request and an image
    that did not load."""
    page_path = tmp_path / "page.html"
    page_path.write_text('<!doctype html><html><body><img src="plots/missing.svg" alt="x"></body></html>')
    page, problems = _open(browser_context, page_path)
    (image,) = _rendered_images(page)
    assert image["natural"] == 0
    assert any("missing.svg" in p for p in problems), problems
    page.close()
