"""The Evaluate tab in a real browser: the real `reflectrm app` (demo judge, SQLite), Chromium.

Two runs are stored before the server starts (a scripted position-biased judge and a scripted
truthful one, both orders); the browser shows a report, compares the runs, opens a flipped item in
the Judge view, and launches a small run with the real demo judge.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("playwright.sync_api")
from playwright.sync_api import Browser, Page, expect, sync_playwright

from reflectrm_app.services.evaluation import Evaluations
from reflectrm_db.services import JudgmentStore
from reflectrm.backends.scripted import ScriptedBackend
from tests.app.browser import CHROMIUM, launch_chromium, running_app
from tests.eval.test_runner import CONFIG, _first, _pairs_file, _request, _truthful

# like every browser test: skipped where Debian's Chromium is missing (CI installs it), not an error
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"needs Debian's Chromium at {CHROMIUM}")


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int, int]:
    folder = tmp_path_factory.mktemp("evaluate")
    url = f"sqlite:///{folder / 'app.db'}"
    path = _pairs_file(folder, 6)
    with JudgmentStore.open(url) as store:
        evals = Evaluations(store)
        a = evals.run(_request(path, strategies=("greedy",), both_orders=True), backend=ScriptedBackend(_first),
                      config=CONFIG)
        b = evals.run(_request(path, strategies=("greedy",), both_orders=True),
                      backend=ScriptedBackend(_truthful, model_revision="v2"), config=CONFIG)
    return url, a.id, b.id


@pytest.fixture(scope="module")
def page(seeded: tuple[str, int, int], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Page]:
    url, _, _ = seeded
    log = tmp_path_factory.mktemp("log") / "app.log"
    with running_app(url, log=log) as app_url, sync_playwright() as p:
        browser: Browser = launch_chromium(p)
        page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        page.set_default_timeout(120_000)
        page.goto(app_url)
        page.wait_for_selector("#judge-run")
        page.get_by_role("tab", name="Evaluate").click()
        yield page
        browser.close()


def _fill(page: Page, elem_id: str, text: str) -> None:
    page.locator(f"#{elem_id} input, #{elem_id} textarea").first.fill(text)


def test_report_compare_and_drill_down_into_the_judge_view(page: Page, seeded: tuple[str, int, int]) -> None:
    _, run_a, run_b = seeded
    _fill(page, "eval-run-id", str(run_a))
    page.click("#eval-show")
    report = page.locator("#eval-report")
    expect(report).to_contain_text("Evaluation: file:pairs.jsonl")
    expect(report.locator("tr", has_text="greedy").first).to_contain_text("50.0 [")  # right where the label is 1
    expect(page.locator("#eval-plot svg")).to_have_count(1)
    flipped = page.locator("#eval-items [role=gridcell]", has_text=re.compile(r"^\s*flipped\s*$"))
    expect(flipped.first).to_be_visible()
    first_id = page.locator("#eval-items [role=row]").nth(1).locator("[role=gridcell]").first
    judgment = first_id.inner_text().strip()
    first_id.click()
    expect(page.locator("#eval-judgment-id textarea, #eval-judgment-id input").first).to_have_value(judgment)
    page.click("#eval-open")
    expect(page.locator("#judge-status textarea")).to_have_value(re.compile(rf"^opened judgment #{judgment}"))
    page.get_by_role("tab", name="Evaluate").click()
    _fill(page, "eval-run-a", str(run_a))
    _fill(page, "eval-run-b", str(run_b))
    page.click("#eval-compare")
    comparison = page.locator("#eval-comparison")
    expect(comparison).to_contain_text("McNemar p")
    overall = comparison.locator("tr", has_text="overall").first.locator("td")
    expect(overall.first).to_have_text("greedy")
    # 6 pairs as given: the biased judge is right on 3, the truthful one on all: 3 discordant, all B's
    assert overall.all_inner_texts()[1:7] == ["overall", "6", "50.0", "100.0", "0", "3"]
    both = comparison.locator("tr", has_text="both orders").first.locator("td")
    assert both.all_inner_texts()[1:7] == ["both orders", "6", "0.0", "100.0", "0", "6"]


def test_launch_a_small_run_with_the_demo_judge(page: Page) -> None:
    page.get_by_role("tab", name="Evaluate").click()
    _fill(page, "eval-limit", "2")
    strategies = page.locator("#eval-strategies")
    strategies.get_by_role("checkbox", name="greedy").check()
    strategies.get_by_role("checkbox", name="reflectrm", exact=True).uncheck()
    page.click("#eval-run")
    expect(page.locator("#eval-status textarea")).to_have_value(re.compile(r"^run \d+ completed: 2/2"),
                                                                 timeout=300_000)
    expect(page.locator("#eval-report")).to_contain_text("Evaluation: demo")
    expect(page.locator("#eval-runs")).to_contain_text("demo")
