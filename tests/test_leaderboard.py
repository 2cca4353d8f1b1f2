"""The leaderboard page (harness.leaderboard), opened in a real headless Chromium: it loads with no
console error and no request outside itself, a sort and a filter change its rows as the verdict
table says, and a setting's link opens its curves."""

import subprocess
import sys
from pathlib import Path

import pytest

from harness import analysis, style
from harness.leaderboard import verdict_table, write_leaderboard
from harness.report import load_sweep_runs

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")  # Debian's chromium package (.ci/run installs it)
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
COURSE = ROOT / "results" / "course"  # committed: 3 nets x 10 optimizers x 3 seeds


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    return write_leaderboard(COURSE, tmp_path_factory.mktemp("page") / "leaderboard.html")


def texts(browser_page, column: str) -> list[str]:
    return browser_page.locator(f"#board tbody td.{column}").all_inner_texts()


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason=f"no Chromium at {CHROMIUM}: apt install it")
def test_the_page_sorts_filters_and_opens_curves_in_chromium(page):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (the dev extra)")
    table = verdict_table(load_sweep_runs(COURSE))
    errors, requests = [], []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        tab = browser.new_page()
        tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        tab.on("pageerror", lambda e: errors.append(str(e)))
        tab.on("request", lambda r: requests.append(r.url))
        tab.goto(page.as_uri())
        assert tab.locator("#board tbody tr").count() == len(table) == 30

        tab.select_option("#f-verdict", "worse")
        assert texts(tab, "verdict") == ["worse"] * int((table["verdict"] == "worse").sum())
        tab.select_option("#f-verdict", "")
        tab.select_option("#f-net", "net2")
        assert set(texts(tab, "net")) == {"net2"} and len(texts(tab, "net")) == 10

        tab.click("#board th[data-key=mean]")  # ascending, then descending
        means = [float(t) for t in texts(tab, "mean")]
        assert means == sorted(means)
        tab.click("#board th[data-key=mean]")
        means = [float(t) for t in texts(tab, "mean")]
        net2 = table[table["net"] == "net2"]
        test = analysis.final_quality(load_sweep_runs(COURSE))
        best = net2.loc[net2[f"{test}_mean"].idxmax(), "setting"]
        assert means == sorted(means, reverse=True)
        assert texts(tab, "setting")[0] == best

        assert not tab.locator("#curves").is_visible()
        tab.locator("#board tbody td.setting a").first.click()
        assert tab.locator("#curves").is_visible()
        assert tab.locator("#curves-title").inner_text().startswith(f"{best} on net2")
        assert tab.locator("#curves svg").count() == 2
        assert tab.locator("#curves svg polyline").count() >= 2  # its curves (+ the reference)
        browser.close()
    assert errors == []
    assert all(url.startswith("file:") for url in requests)  # offline: nothing fetched


@pytest.mark.slow  # a fresh interpreter's imports
def test_a_folder_that_is_not_there_is_one_line_and_status_2(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", "from harness.leaderboard import main; main()", "nowhere"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "harness-leaderboard: error: nowhere is not a folder"
    ]


def test_the_reference_is_the_best_course_optimizer_on_validation():
    """The page's verdicts are against_reference's, against the course's optimizers."""
    runs = load_sweep_runs(COURSE)
    table = verdict_table(runs)
    expected = analysis.against_reference(runs, style.COURSE_OPTIMIZERS)
    assert list(table["verdict"]) == list(expected["verdict"])
    assert set(table["library"]) == {"torch", "harness"}  # YellowFin is the harness's own
