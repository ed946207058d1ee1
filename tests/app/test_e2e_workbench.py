"""End to end in Chromium: the Review queue walks, the confidence plot draws on a fresh page, and an
evaluation run cut off by a crash is marked interrupted after a restart and resumes.

The real `reflectrm app` (demo judge, SQLite) runs in a subprocess over a store seeded by a scripted
judge (as in `test_e2e`). With REFLECTRM_SHOTS set to a folder, the tests leave screenshots there.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("playwright.sync_api")
from playwright.sync_api import Browser, Page, expect  # noqa: E402

from reflectrm_db.evaluation import EvalRunRecord, EvalStore  # noqa: E402
from reflectrm_db.services import JudgmentStore  # noqa: E402
from tests.app.browser import (  # noqa: E402
    CHROMIUM, app_process, running_app,
)
from tests.app.test_e2e import SEEDED, _seed, new_page, open_tab, table, value, wait_value  # noqa: E402

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


def test_saves_by_keyboard_are_said_in_one_status_line_not_a_pile_of_toasts(page: Page, db_url: str) -> None:
    open_tab(page, "Review queue")
    header = wait_value(page, "review-header", r"^Judgment #\d+")
    for _ in range(3):
        saved = int(re.match(r"Judgment #(\d+)", header).group(1))
        page.evaluate("document.activeElement && document.activeElement.blur()")
        page.keyboard.press("1")
        said = wait_value(page, "review-status", rf"\(judgment #{saved}\); the next item is shown")
        header = shown_judgment(page, header)
    assert said.startswith("Saved correction") and said.count("Saved") == 1  # replaced, not appended
    expect(page.locator("#review-status")).to_be_in_viewport()  # where the keys are, without scrolling
    assert page.locator(".toast-body").count() == 0, page.locator(".toast-body").all_inner_texts()


# --- training runs ---------------------------------------------------------------------------------------------


def _interrupted_run(db_url: str, folder: Path, *, max_steps: int) -> int:
    """A run folder and row as an app that died mid-run leaves them (planned for `max_steps` steps, at step 3)."""
    import json
    import subprocess
    import sys

    from reflectrm.training.runs import RunFiles, process_start

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"data": "", "model": "demo", "config": {"max_steps": max_steps}}))
    RunFiles(folder).update_status(state="interrupted", pid=gone.pid, pid_start=process_start(gone.pid), step=3,
                                   total_steps=max_steps, started_unix=time.time())
    with JudgmentStore.open(db_url) as store:
        return store.add_training_run(snapshot_id=None, base_model="demo", run_dir=str(folder),
                                      config={"max_steps": max_steps}, status="interrupted").id


def test_resume_keeps_the_runs_own_plan_not_the_forms_max_steps(page: Page, db_url: str, tmp_path: Path) -> None:
    import json

    run_id = _interrupted_run(db_url, tmp_path / "run", max_steps=12)
    open_tab(page, "Train")
    wait_value(page, "train-progress", rf"^run #{run_id} interrupted")
    assert page.locator("#train-max-steps input").input_value() == "100"  # a fresh form, for a new run
    page.click("#train-resume")
    status = wait_value(page, "train-status", rf"^(run #{run_id} starts again|resumed run #{run_id}|error)")
    assert status.startswith(f"run #{run_id} starts again from step 0, to step 12"), status
    assert json.loads((tmp_path / "run" / "run.json").read_text())["config"]["max_steps"] == 12  # it was 100
    with JudgmentStore.open(db_url) as store:
        assert store.training_run(run_id).config["max_steps"] == 12


# --- evaluation runs across an app restart -------------------------------------------------------------------------


def eval_runs(db_url: str) -> list[EvalRunRecord]:
    with JudgmentStore.open(db_url) as store:
        return EvalStore(store).runs()


def test_a_fresh_page_lists_the_evaluation_runs_made_since_the_app_started(browser: Browser, app_url: str,
                                                                         db_url: str) -> None:
    with JudgmentStore.open(db_url) as store:
        run_id, _ = EvalStore(store).start(run_key="fresh-page-run", values={
            "model": "m", "model_revision": "", "benchmark": "after-start", "data": "", "partial": "",
            "config": {"strategies": ["reflectrm"]}, "items_total": 4})
    page = new_page(browser, app_url)
    try:
        open_tab(page, "Evaluate")
        # the table was filled once, as the app started: a run made since needed Refresh runs
        expect(page.locator("#eval-runs")).to_contain_text("after-start")
        assert any(r.get("run") == str(run_id) or str(run_id) in r.values() for r in table(page, "eval-runs"))
    finally:
        page.context.close()


def test_a_run_cut_off_by_a_crash_is_interrupted_after_a_restart_and_resumes(browser: Browser,
                                                                             tmp_path: Path) -> None:
    db_url, log = f"sqlite:///{tmp_path / 'app.db'}", tmp_path / "app.log"
    with app_process(db_url, log) as (url, proc):
        page = new_page(browser, url)
        open_tab(page, "Evaluate")
        page.locator("#eval-limit input").fill("6")
        page.click("#eval-run")
        deadline = time.monotonic() + 180
        while not (eval_runs(db_url) and eval_runs(db_url)[0].items_done >= 1):  # bounded: the deadline
            assert time.monotonic() < deadline, "no pair judged within 180 s"
            page.wait_for_timeout(200)
        proc.kill()  # the app dies mid-run: nothing marks the run
        proc.wait()
        page.context.close()
    [left] = eval_runs(db_url)
    assert left.status == "running" and left.items_done < left.items_total
    with app_process(db_url, log) as (url, _):
        page = new_page(browser, url)
        open_tab(page, "Evaluate")
        wait_value(page, "eval-status", rf"^run\(s\) {left.id} interrupted: the app stopped .* Resume run")
        shot(page, "eval-interrupted-status-after-restart", selector="#eval-status")
        assert value(page, "eval-run-id") == "" and value(page, "eval-judgment-id") == ""  # empty fields, not 0
        page.click("#eval-open")
        wait_value(page, "eval-open-status", r"^error: no item is chosen")
        page.locator("#eval-run-id textarea").fill(str(left.id))
        page.click("#eval-show")
        expect(page.locator("#eval-report")).to_contain_text(
            f"Incomplete: interrupted (its process ended while it ran), {left.items_done} of 6")
        shot(page, "eval-interrupted-after-restart")
        page.click("#eval-resume")
        wait_value(page, "eval-status", rf"^run {left.id} completed: 6/6 pair-orders judged", timeout_s=300)
        page.context.close()


def test_a_correction_to_confirm_is_said_where_the_eye_is(page: Page) -> None:
    open_tab(page, "Review queue")
    wait_value(page, "review-header", r"^Judgment #\d+")
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.keyboard.press("2")  # the seeded pairs are labelled Response 1: this contradicts the label
    toast = page.locator(".toast-body", has_text="Confirm")
    expect(toast.first).to_be_visible()  # a toast in the window, whatever the scroll position
    assert wait_value(page, "review-status", r"^confirm: ").startswith("confirm: Response 2 contradicts")
    label = page.locator("#review-status").inner_text()
    assert "confirmation" in label.lower()  # the box says what it holds (it was labelled "Saved")
    shot(page, "review-confirmation-toast")


# --- what a reviewer still tripped on: dropdowns, notes under fields, headers, paths, the loss plot ---------------


def next_frames(page: Page) -> None:
    """Until the browser has drawn twice: what a key press set off (its handlers' ticks) has settled and shows."""
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")


@pytest.mark.parametrize(("tab", "dropdown"), [
    pytest.param("Judge", "judge-source", id="judge-data-set"),
    pytest.param("Judge", "judge-pick", id="judge-pair"),  # reached by Tab from the data set, it opens on focus
    pytest.param("Audit", "audit-source", id="audit-data-set"),
])
def test_tabbing_out_of_a_dropdown_closes_its_list(page: Page, tab: str, dropdown: str) -> None:
    open_tab(page, tab)
    combobox = page.locator(f"#{dropdown} input[role=combobox]")
    options = page.locator(f"#{dropdown} [role=listbox]")
    combobox.click()
    expect(options).to_be_visible()  # open: the list is drawn over the form
    page.keyboard.press("Tab")
    expect(combobox).not_to_be_focused()
    next_frames(page)
    # Gradio's key handler reopened the list a tick after the blur had closed it: it stayed drawn over the form
    expect(combobox).to_have_attribute("aria-expanded", "false")
    expect(options).to_be_hidden()


HEADER_WORDS_SPLIT = """() => {
  const split = [], seen = [];
  for (const th of document.querySelectorAll('th, [role=columnheader]')) {
    if (!th.offsetParent) continue;
    const walk = document.createTreeWalker(th, NodeFilter.SHOW_TEXT);
    for (let node = walk.nextNode(); node; node = walk.nextNode()) {
      for (const m of node.data.matchAll(/\\S+/g)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const lines = new Set(Array.from(range.getClientRects()).filter((r) => r.width > 0)
          .map((r) => Math.round(r.top)));
        seen.push(m[0]);
        if (lines.size > 1) split.push(m[0]);  // one word drawn on two lines: broken inside it
      }
    }
  }
  return {split, seen: seen.length};
}"""


@pytest.mark.parametrize("tab", ["Audit", "Curate", "Train", "Evaluate"])
def test_table_headers_break_between_words_never_inside_one(page: Page, tab: str) -> None:
    page.set_viewport_size({"width": 800, "height": 900})  # narrow: the tables' columns are squeezed
    open_tab(page, tab)
    expect(page.locator(f"#tab-{tab.lower()} [role=columnheader]").first).to_be_visible()
    next_frames(page)
    words = page.evaluate(HEADER_WORDS_SPLIT)
    assert words["seen"] >= 5, words  # the check saw the tab's headers
    assert words["split"] == [], words  # Audit showed "judgmen t", "subse t"; Curate broke even "id"


@pytest.mark.parametrize(("tab", "field", "first", "then", "press", "note", "said"), [
    pytest.param("Review queue", "#review-jump textarea", "twelve", "13b", "#review-open", "review-jump-note",
                 "a judgment number is a whole number like 12, got '13b'", id="review-open-judgment"),
    pytest.param("Curate", "#curate-since textarea", "yesterday", "tomorrow", "#curate-show", "curate-filter-note",
                 "since must be a date like", id="curate-since"),
    pytest.param("Curate", "#curate-ids textarea", "3; 5", "4;6", "#curate-exclude", "curate-ids-note",
                 "example ids must be whole numbers", id="curate-example-ids"),
    pytest.param("Train", "#train-max-steps input", "2.5", "0", "#train-start", "train-form-note",
                 "max steps must be at least 1, got 0", id="train-max-steps"),
])
def test_a_bad_number_is_said_in_one_line_under_its_field_in_view(page: Page, tab: str, field: str, first: str,
                                                                  then: str, press: str, note: str, said: str) -> None:
    open_tab(page, tab)
    shown = page.locator(f"#{note} [data-testid=markdown]")
    for typed in (first, then):
        page.fill(field, typed)
        page.click(press)
        expect(shown).to_contain_text(typed)  # the typed value as typed (escaped Markdown: nothing formats)
    expect(shown).to_contain_text(said)
    expect(shown).not_to_contain_text(first)  # replaced, not stacked
    text = shown.inner_text().strip()
    assert text.count("error") == 1 and "\n" not in text, text
    expect(shown).to_be_in_viewport()  # the status boxes were below the fold
    asked, told = page.locator(field).bounding_box(), shown.bounding_box()
    assert 0 <= told["y"] - (asked["y"] + asked["height"]) < 120, (asked, told)  # right under the field's row


def test_the_evaluate_runs_table_names_a_checkpoint_by_its_run_not_the_hosts_path(browser: Browser, app_url: str,
                                                                                 db_url: str, tmp_path: Path) -> None:
    checkpoint = tmp_path / "runs" / "run-9" / "checkpoint-30"
    checkpoint.mkdir(parents=True)
    with JudgmentStore.open(db_url) as store:
        run_id, _ = EvalStore(store).start(run_key="checkpoint-run", values={
            "model": str(checkpoint), "model_revision": "", "benchmark": "demo", "data": "", "partial": "",
            "config": {"strategies": ["reflectrm"]}, "items_total": 4})
    page = new_page(browser, app_url)
    try:
        open_tab(page, "Evaluate")
        expect(page.locator("#eval-runs")).to_contain_text("run-9/checkpoint-30")
        rows = table(page, "eval-runs")
        assert not any(cell.startswith("/") for row in rows for cell in row.values()), rows
        page.locator("#eval-run-id textarea").fill(str(run_id))
        page.click("#eval-show")
        expect(page.locator("#eval-report")).to_contain_text("Model: run-9/checkpoint-30")
        assert str(tmp_path) not in page.locator("#eval-report").inner_text()
    finally:
        page.context.close()


PLOT_TEXT_OUTSIDE = """(sel) => {
  const svg = document.querySelector(sel + ' svg');
  const box = svg.getBoundingClientRect();
  const texts = Array.from(svg.querySelectorAll('text')).filter((t) => t.textContent.trim());
  return {texts: texts.map((t) => t.textContent), outside: texts.filter((t) => {
    const r = t.getBoundingClientRect();
    return r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5;
  }).map((t) => t.textContent)};
}"""


def test_the_loss_plots_axis_titles_and_labels_are_drawn_inside_it(page: Page, db_url: str, tmp_path: Path) -> None:
    import json

    from reflectrm.training.runs import RunFiles

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "run.json").write_text(json.dumps({"data": "", "model": "demo", "config": {"max_steps": 40}}))
    RunFiles(folder).update_status(state="completed", step=40, total_steps=40, started_unix=time.time())
    # a GRPO loss near zero on both sides: wide tick labels ("−0.004") beside the axis title
    (folder / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "loss": (-1) ** s * 1.23e-4 * s, "reward": 0.5 + s / 100}) + "\n" for s in range(1, 41)))
    with JudgmentStore.open(db_url) as store:
        run_id = store.add_training_run(snapshot_id=None, base_model="demo", run_dir=str(folder),
                                        config={"max_steps": 40}, status="completed").id
    open_tab(page, "Train")
    wait_value(page, "train-progress", rf"^run #{run_id} completed")
    for plot, title in (("#train-loss", "loss"), ("#train-reward", "reward")):
        expect(page.locator(f"{plot} svg text", has_text=re.compile(rf"^{title}$"))).to_have_count(1)
        next_frames(page)
        drawn = page.evaluate(PLOT_TEXT_OUTSIDE, plot)
        assert {"step", title} <= set(drawn["texts"]), drawn
        # the y title and the tick labels were drawn left of the plot, "step" below it: cut off
        assert drawn["outside"] == [], drawn


def test_a_question_to_confirm_stays_until_answered_then_leaves_the_form(page: Page) -> None:
    open_tab(page, "Review queue")
    jid = int(re.match(r"Judgment #(\d+)", wait_value(page, "review-header", r"^Judgment #\d+")).group(1))
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.keyboard.press("2")  # the seeded pairs are labelled Response 1: this asks first
    asked = page.locator(".toast-body", has_text="Confirm")
    expect(asked).to_have_count(1)
    page.keyboard.press("2")  # the answer: save it anyway
    wait_value(page, "review-status", rf"\(judgment #{jid}\); the next item is shown")
    # the answered question stayed over the Review form for its time (the reviewer's run ended with one there)
    expect(page.locator(".toast-body")).to_have_count(0)
