"""End to end: the real `reflectrm app` (demo judge, SQLite) in a subprocess, driven by Chromium.

The store is seeded before the server starts with judgments from a scripted judge (fast, and with
analyses that are sure to differ, some of them hostile); judging in the browser uses the real demo
judge. One server and one browser serve the whole module.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("playwright.sync_api")
from playwright.sync_api import Browser, Page, expect  # noqa: E402

from reflectrm_db.services import JudgmentStore  # noqa: E402
from reflectrm.backends import ScriptedBackend  # noqa: E402
from reflectrm.backends.base import Completion, SamplingParams  # noqa: E402
from reflectrm.core.config import JudgeConfig  # noqa: E402
from reflectrm.core.types import PreferencePair  # noqa: E402
from reflectrm.demo import DEMO_MODEL_DIR, demo_domain  # noqa: E402
from reflectrm.pipeline import judge_many  # noqa: E402
from tests.app.browser import CHROMIUM, ProxyTrap, running_app  # noqa: E402
from tests.conftest import critique_output, response_output  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"needs Debian's Chromium at {CHROMIUM}"),
]

expect.set_options(timeout=30_000)  # for assertions on what a finished event shows

IMG = "<img src=x onerror=alert(1)>"
SCRIPT = "<script>alert(1)</script>"
SEEDED = 10  # scripted judgments in the store before the server starts


def _alternating_judge() -> ScriptedBackend:
    """Stage-1 outputs alternate between the two verdicts with distinct analyses (so corrections always
    derive reflection pairs); every third analysis carries hostile markup."""
    counter = itertools.count()

    def respond(prompt: str, seed: int, params: SamplingParams) -> Completion:
        if "## Critiques for Judgment" in prompt:
            return Completion(critique_output(1), (), 5)
        k = next(counter)
        text = f"analysis {k} {IMG if k % 3 == 0 else SCRIPT if k % 3 == 1 else 'plain'}"
        return Completion(response_output(1 + k % 2, text), tuple(-0.05 * (k % 7 + 1) for _ in range(9)), 9)

    return ScriptedBackend(respond)


def _seed(url: str) -> list[int]:
    pairs = [PreferencePair.from_query(f"What is {10 + k} + {20 + k}? {IMG if k == 0 else ''}", f"{30 + 2 * k}",
                                       f"{31 + 2 * k} {SCRIPT if k == 0 else ''}", label=1, id=f"seed-{k}",
                                       source="seeded", subset="add")
             for k in range(SEEDED)]
    judgments = list(judge_many(pairs, _alternating_judge(), JudgeConfig(max_new_tokens=16)))
    with JudgmentStore.open(url) as store:
        return store.record(judgments, swapped=False)


@pytest.fixture(scope="module")
def db_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('e2e') / 'app.db'}"


@pytest.fixture(scope="module")
def seeded_ids(db_url: str) -> list[int]:
    return _seed(db_url)


@pytest.fixture(scope="module")
def proxy_trap() -> Iterator[ProxyTrap]:
    trap = ProxyTrap()
    yield trap
    trap.close()


@pytest.fixture(scope="module")
def app_url(db_url: str, seeded_ids: list[int], proxy_trap: ProxyTrap,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app; every outbound HTTP request it makes goes to `proxy_trap` instead."""
    with running_app(db_url, log=tmp_path_factory.mktemp("log") / "app.log", **proxy_trap.env()) as url:
        yield url


@pytest.fixture
def dialogs() -> list[str]:
    return []


def new_page(browser: Browser, url: str, *, dialogs: list[str] | None = None, ready: bool = True) -> Page:
    """A page in a new browser context (its own Gradio session), loaded."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    p = context.new_page()
    p.set_default_timeout(90_000)  # CI machines are small and shared
    if dialogs is not None:
        p.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    p.goto(url)
    if ready:
        p.wait_for_selector("#judge-run")
    return p


@pytest.fixture
def page(browser: Browser, app_url: str, dialogs: list[str]) -> Iterator[Page]:
    p = new_page(browser, app_url, dialogs=dialogs)
    yield p
    p.context.close()


def value(page: Page, elem_id: str) -> str:
    return page.locator(f"#{elem_id} textarea, #{elem_id} input").first.input_value()


def wait_value(page: Page, elem_id: str, pattern: str, timeout_s: float = 180) -> str:
    """Wait until a Textbox's value matches `pattern` (a regex); returns the value."""
    expect(page.locator(f"#{elem_id} textarea").first).to_have_value(re.compile(pattern), timeout=timeout_s * 1000)
    return value(page, elem_id)


def table(page: Page, elem_id: str) -> list[dict[str, str]]:
    """A gr.Dataframe's rows as {column: text} (the rows the browser has rendered)."""
    return page.evaluate("""(sel) => {
        const root = document.querySelector(sel);
        const heads = Array.from(root.querySelectorAll('[role=columnheader]')).map(th => th.innerText.trim());
        return Array.from(root.querySelectorAll('[role=row]'))
            .map(tr => Array.from(tr.querySelectorAll('[role=gridcell], td')).map(td => td.innerText.trim()))
            .filter(cells => cells.length && cells.some(c => c !== ''))
            .map(cells => Object.fromEntries(cells.map((c, k) => [heads[k], c])));
    }""", f"#{elem_id}")


def wait_rows(page: Page, elem_id: str, keep, count: int, timeout_s: float = 20) -> list[dict[str, str]]:  # noqa: ANN001
    """Wait until `count` rendered rows satisfy `keep`; returns them."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = [r for r in table(page, elem_id) if keep(r)]
        if len(rows) == count or time.monotonic() > deadline:
            return rows
        page.wait_for_timeout(200)


def open_tab(page: Page, name: str) -> None:
    page.get_by_role("tab", name=name).click()


# --- judge --------------------------------------------------------------------------------------------------------


def test_judge_a_pair_shows_eight_analyses_an_anchor_and_a_verdict(page: Page) -> None:
    query, r1, r2 = demo_domain().examples[0]  # a pair of the shipped judge's own domain, typed in
    page.fill("#judge-query textarea", query)
    page.fill("#judge-r1 textarea", r1)
    page.fill("#judge-r2 textarea", r2)
    page.click("#judge-run")
    verdict = wait_value(page, "judge-verdict", r"^(Response [12] is better than Response [12]|ABSTAIN)")
    assert verdict.startswith("Response"), verdict
    anatomy = page.locator("#judge-anatomy")
    expect(anatomy.locator("[data-testid=analysis-card]")).to_have_count(8)
    anchor = anatomy.locator(".rr-card.rr-anchor")
    expect(anchor).to_have_count(1)
    expect(anchor).to_contain_text("ANCHOR")
    expect(anatomy.locator('[data-field="anchor"]')).to_contain_text("highest confidence")
    parseable = 8 - anatomy.locator(".rr-card.rr-unparseable").count()
    expect(anatomy.locator("[data-testid=reflection-row]")).to_have_count(parseable - 1)  # each other one vs the anchor
    jid = value(page, "judge-id")
    # the strategy switch re-aggregates the same rollouts: nothing regenerated, nothing new recorded
    page.locator("#judge-switch label", has_text=re.compile(r"^\s*majority\s*$")).click()
    expect(anatomy.locator('[data-field="record"]')).to_contain_text("nothing regenerated")
    expect(anatomy.locator('[data-field="strategy"]')).to_contain_text("majority")
    assert value(page, "judge-id") == jid
    # majority used no anchor and no reflections: its anatomy shows neither
    expect(anatomy.locator(".rr-card.rr-anchor")).to_have_count(0)
    expect(anatomy.locator("[data-testid=reflection-row]")).to_have_count(0)
    expect(anatomy.locator('[data-field="tie-breaker"]')).to_contain_text("most confident sample")


def _stored_pair(db_url: str, pair_id: int) -> PreferencePair:
    with JudgmentStore.open(db_url) as store:
        return store.pairs_by_id([pair_id])[0]


def _pair_rows(db_url: str) -> int:
    with JudgmentStore.open(db_url) as store:
        return store.counts()["pairs"]


def test_judging_stored_texts_under_the_other_label_is_refused_in_one_line_in_the_form_and_the_api(
    page: Page, app_url: str, db_url: str, seeded_ids: list[int]
) -> None:
    from gradio_client import Client

    stored = _stored_pair(db_url, 2)  # a seeded pair, labelled Response 1
    assert stored.label == 1
    pairs = _pair_rows(db_url)
    page.fill("#judge-query textarea", stored.query)
    page.fill("#judge-r1 textarea", stored.response_1)
    page.fill("#judge-r2 textarea", stored.response_2)
    page.locator("#judge-label label", has_text="Response 2").click()
    page.click("#judge-run")
    status = wait_value(page, "judge-status", r"^error: ")
    assert "\n" not in status and "stored already as pair 2" in status and "Review tab" in status, status
    assert stored.response_2.strip() not in status  # no texts echoed
    # the API: the same texts with the responses swapped and the same number are the same contradiction
    with pytest.raises(Exception) as caught:
        Client(app_url, verbose=False).predict(stored.query, stored.response_2, stored.response_1, "", "reflectrm", 0,
                                               1, api_name="/judge")
    assert "stored already as pair 2 with the responses in the other order" in str(caught.value), str(caught.value)
    assert _pair_rows(db_url) == pairs  # never a second, contradicting copy


# --- hostile text -------------------------------------------------------------------------------------------------


def test_clicking_an_example_fills_the_form_and_judges_nothing(page: Page) -> None:
    page.fill("#judge-messages textarea", '[{"role": "user", "content": "would override the query"}]')
    query, r1, r2 = demo_domain().examples[-1]  # the shipped judge's own domain
    # the table shows a long query cut after about 60 characters: its opening finds the row
    page.locator("#judge-examples").get_by_text(query[:50]).first.click()
    status = wait_value(page, "judge-status", r"^example \d+ filled in")
    assert status.startswith(f"example {len(demo_domain().examples)} ")
    assert [value(page, e) for e in ("judge-query", "judge-messages", "judge-r1", "judge-r2")] == [query, "", r1, r2]
    assert value(page, "judge-verdict") == "" and value(page, "judge-id") == ""  # the user presses Judge


def test_hostile_text_is_shown_as_text_and_runs_nothing(page: Page, dialogs: list[str], seeded_ids: list[int]) -> None:
    page.fill("#judge-query textarea", "Which is right? 2 + 2 ${alert(1)}")
    page.fill("#judge-r1 textarea", f"4 {IMG}")
    page.fill("#judge-r2 textarea", f"5 {SCRIPT}")
    page.click("#judge-run")
    wait_value(page, "judge-status", r"^(judged|error)")
    assert value(page, "judge-status").startswith("judged")
    # a stored judgment whose analyses and responses carry the markup, reopened in History
    open_tab(page, "History")
    page.fill("#history-id textarea", str(seeded_ids[0]))
    page.click("#history-open")
    anatomy = page.locator("#history-anatomy")
    expect(anatomy.locator("[data-testid=analysis-card]").first).to_contain_text(IMG)
    expect(anatomy).to_contain_text(SCRIPT)
    expect(page.locator("#history-table")).to_contain_text(IMG)
    # the review queue shows the same pair's responses
    open_tab(page, "Review queue")
    page.fill("#review-jump textarea", str(seeded_ids[0]))
    page.click("#review-open")
    wait_value(page, "review-resp2", re.escape(SCRIPT))
    page.wait_for_timeout(500)
    assert page.locator("#history-anatomy img, #judge-anatomy img, #review-anatomy img").count() == 0
    assert page.locator("main script").count() == 0
    assert page.evaluate("() => document.querySelectorAll('img[src=x]').length") == 0
    assert dialogs == []


# --- review with the keyboard, then curate ------------------------------------------------------------------------


def _review_first_item(page: Page) -> int:
    open_tab(page, "Review queue")
    header = wait_value(page, "review-header", r"^Judgment #\d+")
    assert "\nWhy here: " in header  # the queue's reason for the item, in words
    return int(re.match(r"Judgment #(\d+)", header).group(1))


def test_a_keyboard_correction_derives_reflection_pairs_shown_in_curate(page: Page) -> None:
    jid = _review_first_item(page)
    page.locator("#review-wrong label").nth(0).click()  # a mark on one analysis
    page.fill("#review-note textarea", "checked by hand")
    page.keyboard.press("Escape")  # leave the note field: keys act as shortcuts again
    page.keyboard.press("1")
    if wait_value(page, "review-status", r"^(Saved|error|confirm)").startswith("confirm"):
        page.keyboard.press("1")  # #0 predicted Response 1 and is marked wrong: the app asks first
    saved = wait_value(page, "review-status", r"^(Saved|error)")
    found = re.search(r"#0 wrong; derived 1 preference example\(s\) and (\d+) reflection pair\(s\)", saved)
    assert found, saved
    pairs = int(found.group(1))
    assert pairs >= 1
    page.keyboard.press("n")
    wait_value(page, "review-header", rf"^Judgment #(?!{jid}\b)\d+")
    open_tab(page, "Curate")
    page.locator("#curate-kind label", has_text="reflection").click()
    page.fill("#curate-search textarea", "")
    page.click("#curate-show")
    rows = wait_rows(page, "curate-table", lambda r: r.get("judgment") == str(jid), pairs)
    assert len(rows) == pairs
    assert all(r["trains toward"] in ("Critique 1", "Critique 2") and r["person"] == "Response 1" for r in rows)
    expect(page.locator("#curate-mix textarea")).to_have_value(re.compile(r"Pref:Refl"))


# --- two reviewers at once ----------------------------------------------------------------------------------------


def test_two_browser_contexts_correcting_different_items_lose_nothing(browser: Browser, app_url: str,
                                                                      db_url: str) -> None:
    pages = [new_page(browser, app_url) for _ in range(2)]
    try:
        ids = [_review_first_item(p) for p in pages]
        assert ids[0] != ids[1], "two reviewers were given the same item"
        for k, p in enumerate(pages):
            p.fill("#review-author textarea", f"reviewer-{k}")
            p.locator("#review-right label").nth(k + 1).click()
        # press both before waiting for either: the two saves are in flight together
        for k, p in enumerate(pages):
            p.locator(f"#review-r{k + 1}").dispatch_event("click")
        for k, p in enumerate(pages):
            if wait_value(p, "review-status", r"^(Saved|error|confirm)").startswith("confirm"):
                p.locator(f"#review-r{k + 1}").dispatch_event("click")  # against the label: confirm it
                wait_value(p, "review-status", r"^(Saved|error)")
        with JudgmentStore.open(db_url) as store:
            got = {c.judgment_id: c for c in store.corrections(include_withdrawn=False)}
        for k, jid in enumerate(ids):
            assert jid in got, f"the correction of #{jid} was lost"
            assert (got[jid].verdict, got[jid].author, got[jid].marks) == (k + 1, f"reviewer-{k}", {k + 1: "right"})
            assert got[jid].reflection_pair_ids
    finally:
        for p in pages:
            p.context.close()


# --- issue 14: paths a new user walks ---------------------------------------------------------------------------


def _no_error_badges(page: Page) -> None:
    page.wait_for_timeout(1500)  # let any event that would fail finish
    assert page.get_by_text("Error", exact=True).count() == 0


def test_ordinary_navigation_shows_no_error_badges(page: Page, seeded_ids: list[int]) -> None:
    open_tab(page, "Review queue")
    page.fill("#review-jump textarea", str(seeded_ids[5]))
    page.click("#review-open")
    wait_value(page, "review-header", rf"^Judgment #{seeded_ids[5]}")
    open_tab(page, "Judge")
    open_tab(page, "Review queue")  # the tab's first-item handler once returned no outputs here
    _no_error_badges(page)
    assert value(page, "review-header").startswith(f"Judgment #{seeded_ids[5]}")
    open_tab(page, "Judge")
    page.click("#judge-source input")
    page.get_by_role("option", name="seeded").click()
    page.click("#judge-pick input")
    page.keyboard.press("Escape")  # closing the pair list without a choice
    _no_error_badges(page)


def test_an_error_clears_the_judgment_shown_before(page: Page, seeded_ids: list[int]) -> None:
    open_tab(page, "History")
    page.fill("#history-id textarea", str(seeded_ids[4]))
    page.click("#history-open")
    wait_value(page, "history-status", rf"^judgment #{seeded_ids[4]}")
    page.click("#history-to-judge")
    wait_value(page, "judge-status", r"^opened judgment")
    expect(page.locator("#judge-anatomy [data-testid=analysis-card]").first).to_be_visible()
    page.fill("#judge-r2 textarea", "")
    page.click("#judge-run")
    wait_value(page, "judge-status", r"^error: ")
    assert (value(page, "judge-verdict"), value(page, "judge-id")) == ("", "")  # no stale verdict, no "0"
    expect(page.locator("#judge-anatomy [data-testid=analysis-card]")).to_have_count(0)


def test_a_correction_against_the_label_asks_first_is_contested_and_can_be_withdrawn(
    page: Page, seeded_ids: list[int], db_url: str
) -> None:
    jid = seeded_ids[6]  # seeded pairs are labelled Response 1
    open_tab(page, "Review queue")
    page.fill("#review-jump textarea", str(jid))
    page.click("#review-open")
    wait_value(page, "review-header", rf"^Judgment #{jid}")
    page.keyboard.press("Escape")
    page.keyboard.press("2")
    assert "known label says Response 1" in wait_value(page, "review-status", r"^(confirm|Saved|error|nothing)")
    with JudgmentStore.open(db_url) as store:
        assert not store.corrections(judgment_id=jid)  # nothing saved before the confirmation
    page.keyboard.press("2")  # the same key again confirms
    saved = wait_value(page, "review-status", r"^Saved")
    assert f"(judgment #{jid})" in saved
    wait_value(page, "review-header", rf"^Judgment #(?!{jid}\b)\d+")  # the queue moved on
    open_tab(page, "Curate")
    page.locator("#curate-kind label", has_text="preference").click()
    rows = wait_rows(page, "curate-table", lambda r: r.get("judgment") == str(jid), 1)
    assert rows and rows[0]["contested"].startswith("yes") and rows[0]["known label"] == "Response 1"
    open_tab(page, "Review queue")
    page.fill("#review-jump textarea", str(jid))
    page.click("#review-open")
    wait_value(page, "review-header", rf"^Judgment #{jid}")
    page.click("#review-withdraw")
    wait_value(page, "review-status", r"^Withdrew correction")
    with JudgmentStore.open(db_url) as store:
        assert not store.corrections(judgment_id=jid, include_withdrawn=False)


def test_two_sessions_correcting_one_judgment_at_once_give_an_edit(browser: Browser, app_url: str,
                                                                    seeded_ids: list[int], db_url: str) -> None:
    jid = seeded_ids[7]
    pages = [new_page(browser, app_url) for _ in range(2)]
    try:
        for k, p in enumerate(pages):
            open_tab(p, "Review queue")
            p.fill("#review-author textarea", f"twin-{k}")
            p.fill("#review-jump textarea", str(jid))
            p.click("#review-open")
            wait_value(p, "review-header", rf"^Judgment #{jid}")
        for p in pages:  # both in flight together
            p.locator("#review-r1").dispatch_event("click")
        statuses = [wait_value(p, "review-status", r"^(Saved|error|confirm)") for p in pages]
        assert all(s.startswith("Saved") for s in statuses), statuses
        with JudgmentStore.open(db_url) as store:
            [record] = store.corrections(judgment_id=jid)
        assert record.revision == 2 and record.author in {"twin-0", "twin-1"}  # the second became an edit
    finally:
        for p in pages:
            p.context.close()


# --- the named API ------------------------------------------------------------------------------------------------


def test_named_api_endpoints_judge_audit_correct(app_url: str, seeded_ids: list[int]) -> None:
    from gradio_client import Client

    client = Client(app_url, verbose=False)
    judged = client.predict("What is 12 + 30?", "42", "52", api_name="/judge")
    assert len(judged["judgment"]["rollouts"]) == 8 and judged["judgment_id"] > seeded_ids[-1]
    audited = client.predict("What is 12 + 30?", "42", "52", api_name="/audit")
    assert audited["consistent"] in (True, False, None)
    assert audited["swapped"]["judgment"]["pair"]["response_1"] == "52"
    corrected = client.predict(judged["judgment_id"], 1, "api-user", "", '{"0": "right"}', api_name="/correct")
    assert corrected["verdict"] == 1 and corrected["marks"] == {"0": "right"}
    assert corrected["preference_example_ids"]
    # input errors reach the client as the UI's one-line message (not "verbose error reporting", not null)
    for args, api, fragment in ((("q", "a", ""), "/judge", "response"), ((10**9, 1), "/correct", "does not exist"),
                                ((judged["judgment_id"], 1, "", "", "{bad"), "/correct", "marks must be")):
        with pytest.raises(Exception) as caught:
            client.predict(*args, api_name=api)
        assert fragment in str(caught.value) and "verbose" not in str(caught.value), str(caught.value)


# --- progress and Stop --------------------------------------------------------------------------------------------


def _judgments(db_url: str) -> int:
    with JudgmentStore.open(db_url) as store:
        return store.counts()["judgments"]


def test_stop_cancels_a_running_batch_audit(page: Page, db_url: str) -> None:
    page.click("#judge-stop")
    assert wait_value(page, "judge-status", r"^(stopped|nothing is running)$") == "nothing is running"
    page.click("#judge-demo-pairs")
    wait_value(page, "judge-status", r"^demo pairs")
    before = _judgments(db_url)
    open_tab(page, "Audit")
    page.click("#audit-source input")
    page.get_by_role("option", name=demo_domain().source).click()
    page.fill("#audit-sample input", "0")  # all 30 pairs: 60 judgments, one pair per batch in these tests
    page.click("#audit-run")
    started = page.locator("#audit-status").get_by_text(re.compile(r"audit: \d+ of 30 pairs"))
    expect(started).to_be_visible(timeout=5_000)  # progress from the first moment, not after the first batch
    progress = page.locator("#audit-status").get_by_text(re.compile(r"audit: [1-9]\d* of 30 pairs done"))
    expect(progress).to_be_visible(timeout=120_000)
    seen = int(re.search(r"audit: (\d+) of", progress.first.inner_text()).group(1))
    page.click("#audit-stop")
    assert wait_value(page, "audit-status", r"^(stopped|nothing is running)").startswith("stopped")
    # the run stops at its next generation call: at most the batch in flight is still recorded
    settled, last = 0, -1
    while settled < 5:
        page.wait_for_timeout(1000)
        now = _judgments(db_url)
        settled, last = (settled + 1, now) if now == last else (0, now)
    assert 0 < last - before <= 2 * (seen + 2) < 60, f"{last - before} judgments recorded after Stop at {seen}"


def test_before_after_compares_two_models_on_the_same_pairs_as_text(page: Page, db_url: str,
                                                                     dialogs: list[str]) -> None:
    # the after model: the demo judge's weights in a folder of the data root whose name is markup
    name = f"judge {IMG}"
    folder = Path(db_url.removeprefix("sqlite:///")).parent / "data" / name
    if not folder.exists():
        shutil.copytree(DEMO_MODEL_DIR, folder)
    open_tab(page, "Audit")
    expect(page.locator("#ba-before input")).to_have_value("active judge: demo judge")
    page.locator("#ba-after input").fill(name)  # a model folder typed, not picked
    page.locator("#ba-after input").press("Enter")
    page.click("#ba-source input")
    page.get_by_role("option", name="seeded", exact=True).click()
    page.fill("#ba-limit input", "2")
    page.click("#ba-run")
    expect(page.locator("#ba-run")).to_be_disabled()  # one press, one comparison: off while it runs
    summary = wait_value(page, "ba-summary", r"^(after vs before|error|stopped)")
    assert summary.startswith("after vs before"), summary
    first, second = summary.split("\n")
    # the same weights: no difference, said for both paired figures
    assert first.startswith("after vs before on 2 pairs in both orders: flip rate "), summary
    assert first.count("(no difference)") == 2, summary
    assert second.startswith("before: demo judge (evaluation run ") and f"after: data/{name} (evaluation run" in second
    expect(page.locator("#ba-run")).to_be_enabled()
    rows = table(page, "ba-table")
    assert [r["figure"] for r in rows] == ["flip rate", "first-slot win rate", "both-orders accuracy",
                                          "first-critique share"], rows
    assert rows[0]["before"] == rows[0]["after"] and rows[0]["change"] == "no difference"
    assert rows[1]["before"].endswith("(n 4)")  # 2 pairs, 2 orders: 4 verdicts
    # the model's name is text: no element made of it, no script run
    assert page.locator("#ba-summary img, #ba-table img").count() == 0
    assert dialogs == []


# --- history ------------------------------------------------------------------------------------------------------


def test_history_reopens_a_judgment_as_recorded_and_opens_it_in_judge(page: Page, seeded_ids: list[int],
                                                                        db_url: str) -> None:
    target = seeded_ids[3]
    with JudgmentStore.open(db_url) as store:
        recorded = store.load(target).judgment
    open_tab(page, "History")
    cell = page.locator("#history-table [role=gridcell]", has_text=re.compile(rf"^\s*{target}\s*$")).first
    cell.click()  # selecting a row reopens it
    wait_value(page, "history-status", rf"^judgment #{target} recorded")
    anatomy = page.locator("#history-anatomy")
    cards = anatomy.locator("[data-testid=analysis-card]")
    expect(cards).to_have_count(len(recorded.rollouts))
    for k in (0, len(recorded.rollouts) - 1):
        expect(cards.nth(k)).to_contain_text(recorded.rollouts[k].analysis)
    page.click("#history-to-judge")
    wait_value(page, "judge-status", rf"^opened judgment #{target} as recorded")
    assert value(page, "judge-query") == recorded.pair.query
    assert value(page, "judge-id") == f"#{target}"
    assert value(page, "judge-verdict").startswith(f"Response {recorded.verdict}")


# --- data sets, login, network ------------------------------------------------------------------------------------


def test_import_a_data_set_and_pick_a_pair_from_it(page: Page, tmp_path: Path) -> None:
    rows = [{"id": "u1", "query": "What is 8 + 9?", "response_1": "17", "response_2": "18", "label": 1,
             "subset": "add"},
            {"id": "u2", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                                      {"role": "user", "content": "What is 9 * 9?"}],
             "response_1": "80", "response_2": "81", "label": 2, "subset": "mul"}]
    path = tmp_path / "uploaded.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    page.get_by_text("Import a data set").click()
    page.locator("#judge-upload input[type=file]").set_input_files(str(path))
    wait_value(page, "judge-status", r"^imported: 2 added")
    expect(page.locator("#judge-source input")).to_have_value("uploaded", timeout=10_000)
    page.click("#judge-pick input")
    page.get_by_role("option", name=re.compile(r"9 \* 9")).click()
    wait_value(page, "judge-status", r"^loaded pair u2")
    assert json.loads(value(page, "judge-messages"))[1] == {"role": "assistant", "content": "hello"}
    assert (value(page, "judge-r1"), value(page, "judge-r2")) == ("80", "81")


def test_login_when_auth_is_set_and_corrections_carry_the_user(browser: Browser, tmp_path: Path) -> None:
    url_db = f"sqlite:///{tmp_path / 'auth.db'}"
    [jid] = _seed(url_db)[:1]
    with running_app(url_db, log=tmp_path / "auth.log", REFLECTRM_AUTH="ana:s3cret:x,ben:pw") as url:
        page = new_page(browser, url, ready=False)
        page.locator("input[type=password]").wait_for()
        page.locator("input:not([type=password])").first.fill("ana")
        page.locator("input[type=password]").fill("wrong")
        page.keyboard.press("Enter")
        expect(page.get_by_text(re.compile("incorrect", re.I))).to_be_visible(timeout=10_000)
        page.locator("input:not([type=password])").first.fill("ana")
        page.locator("input[type=password]").fill("s3cret:x")  # a password may contain ':'
        page.get_by_role("button", name="Login").click()
        page.wait_for_selector("#judge-run")
        open_tab(page, "Review queue")
        page.fill("#review-jump textarea", str(jid))
        page.click("#review-open")
        wait_value(page, "review-header", rf"^Judgment #{jid}")
        page.fill("#review-author textarea", "someone-else")  # with a login, the user name is what counts
        page.click("#review-r2")
        wait_value(page, "review-status", r"^confirm")  # seeded pairs are labelled Response 1
        page.click("#review-r2")
        assert "by ana:" in wait_value(page, "review-status", r"^(Saved|error)")
        page.context.close()
        _api_author_is_the_logged_in_user(url, jid)
        _failed_logins_are_throttled(url)


def _api_author_is_the_logged_in_user(url: str, jid: int) -> None:
    from gradio_client import Client

    client = Client(url, auth=("ben", "pw"), verbose=False)
    corrected = client.predict(jid, 1, "bo", "", "", api_name="/correct")
    assert corrected["author"] == "ben"  # `author="bo"` cannot forge the trail


def _login(url: str, user: str, password: str) -> int:
    import urllib.error
    import urllib.parse
    import urllib.request

    body = urllib.parse.urlencode({"username": user, "password": password}).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{url}/login", data=body), timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _failed_logins_are_throttled(url: str) -> None:
    assert [_login(url, "ben", "wrong") for _ in range(5)] == [400] * 5
    assert _login(url, "ben", "pw") == 429  # per user: even the right password waits now
    statuses = [_login(url, f"guess-{k}", "x") for k in range(20)]
    assert statuses[-1] == 429 and _login(url, "ana", "s3cret:x") == 429  # per address


def test_no_outbound_connection_at_start_or_while_serving(app_url: str, proxy_trap: ProxyTrap) -> None:
    # runs last in this module: by now the app has started, judged, audited and served the API
    assert proxy_trap.connections == 0


def test_the_train_form_names_bad_step_counts_instead_of_an_error_badge(page: Page) -> None:
    open_tab(page, "Train")
    for typed, message in (("0", "max steps must be at least 1, got 0"), ("2.5", "max steps must be a whole number")):
        page.fill("#train-max-steps input", typed)
        page.click("#train-start")
        expect(page.locator("#train-form-note")).to_contain_text(message)  # under the numbers, not below the fold
    _no_error_badges(page)
