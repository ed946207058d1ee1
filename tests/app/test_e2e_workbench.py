"""End to end in Chromium: the Review queue walks, and the confidence plot draws on a fresh page.

The real `reflectrm app` (demo judge, SQLite) runs in a subprocess over a store seeded by a scripted
judge (as in `test_e2e`). With REFLECTRM_SHOTS set to a folder, the tests leave screenshots there.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("playwright.sync_api")
from playwright.sync_api import Browser, Page, expect, sync_playwright  # noqa: E402

from reflectrm_db.services import JudgmentStore  # noqa: E402
from tests.app.browser import CHROMIUM, launch_chromium, running_app  # noqa: E402
from tests.app.test_e2e import SEEDED, _seed, new_page, open_tab, value, wait_value  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"needs Debian's Chromium at {CHROMIUM}"),
]


def shot(page: Page, name: str, *, selector: str = "") -> None:
    folder = os.environ.get("REFLECTRM_SHOTS")
    if folder:
        target = page.locator(selector) if selector else page
        target.screenshot(path=str(Path(folder) / f"{name}.png"))


@pytest.fixture(scope="module")
def db_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('e2e-wb') / 'app.db'}"
    _seed(url)
    return url


@pytest.fixture(scope="module")
def app_url(db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_app(db_url, log=tmp_path_factory.mktemp("log") / "app.log") as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = launch_chromium(p)
        yield b
        b.close()


@pytest.fixture
def page(browser: Browser, app_url: str) -> Iterator[Page]:
    p = new_page(browser, app_url)
    yield p
    p.context.close()


def shown_judgment(page: Page, previous: str = "") -> str:
    """The judgment number in the Review header, once it differs from `previous`'s header."""
    if previous:
        expect(page.locator("#review-header textarea")).not_to_have_value(previous)
    return value(page, "review-header")


def test_next_by_keyboard_walks_every_item_of_the_queue_in_order_then_says_it_wrapped(page: Page,
                                                                                       db_url: str) -> None:
    with JudgmentStore.open(db_url) as store:
        order = [s.id for s in store.review_queue(limit=100)]
    assert len(order) == SEEDED
    open_tab(page, "Review queue")
    header = wait_value(page, "review-header", r"^Judgment #\d+")
    seen = []
    for k in range(len(order)):
        seen.append(int(re.match(r"Judgment #(\d+)", header).group(1)))
        assert "back at the start" not in header
        if k < 10:
            shot(page, f"review-walk-{k + 1:02d}", selector="#review-header")
        page.evaluate("document.activeElement && document.activeElement.blur()")  # keys go to the shortcuts
        page.keyboard.press("n")
        header = shown_judgment(page, header)
    assert seen == order  # it used to show 11, 23, 11, 23, ...
    assert header.startswith(f"Judgment #{order[0]} ") and "back at the start of the queue" in header
    shot(page, "review-walk-wrapped")


def test_the_confidence_plot_draws_filled_bars_and_a_legend_on_a_fresh_page(page: Page) -> None:
    page.locator("#judge-examples td, #judge-examples button").first.click()
    page.click("#judge-run")
    wait_value(page, "judge-status", r"^judged and recorded as #")
    bars = page.locator("#judge-plot svg .mark-rect path")
    expect(bars.first).to_be_visible()
    fills = bars.evaluate_all("els => els.map(e => e.getAttribute('fill'))")
    cards = page.locator("#judge-anatomy [data-testid=analysis-card]").count()
    # the first chart of a fresh page drew bars with no fill and an empty legend (an empty initial frame)
    assert len(fills) == cards and all(fills), fills
    legend = page.locator("#judge-plot svg .role-legend-label text").evaluate_all("els => els.map(e => e.textContent)")
    assert {"anchor"} <= set(legend), legend
    shot(page, "plot-fresh-page", selector="#judge-plot")
