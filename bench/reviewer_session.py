"""A reviewer's session in the workbench, by keyboard alone, timed: open the app, review and correct ten items, export.

    python bench/reviewer_session.py [--items 12] [--shots DIR] [--judge-shot PATH]

The store (a new SQLite file) is seeded with `--items` judgments by the bundled demo judge (`reflectrm judge --input
... --db`), then the real `reflectrm app` starts on it and headless Chromium (1280 x 1000) plays the reviewer. Every
step of the session is a key press (Tab, Shift+Tab, Enter, arrows, typed text, the Review tab's 1 / 2 / n keys):
no mouse click. Phases timed:

* open: from launching the app until the first Review item is on screen (server start, page load, the keys to reach
  the Review tab);
* review: ten corrections walking the queue (each the pair's known better response; a verdict the judge's samples
  all contradict asks first, and the reviewer presses the key again), with the median per item;
* export: to Curate, a snapshot of the active examples named by typing, then an export of its reflection pairs.

Then, outside the timed session, for the screenshots: the confidence plot on a fresh page (Judge tab), and an
evaluation run started in the Evaluate tab, the app killed mid-run and restarted on the same store, showing the run
as interrupted. Uses Debian's Chromium at /usr/bin/chromium. The last line printed is one JSON object.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import finish, load_line, parser, stopwatch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the launcher and the Chromium settings the browser tests use

from playwright.sync_api import Page, expect, sync_playwright  # noqa: E402

from tests.app.browser import app_env, app_process, launch_chromium  # noqa: E402

VIEWPORT = {"width": 1280, "height": 1000}
REVIEWED = 10
WAIT_MS = 600_000  # a bound on any one wait: the machine may be shared and slow (an app start took 300 s at load 12)


# --- the app and its store ---------------------------------------------------------------------------------------


def seed(db_url: str, folder: Path, *, items: int) -> None:
    """`items` demo pairs judged by the demo judge into the store, through the CLI a user would run."""
    from reflectrm.demo.tasks import make_pairs

    pairs = folder / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in make_pairs(items, seed=2028)), encoding="utf-8")
    cmd = [sys.executable, "-m", "reflectrm_app.cli", "judge", "--input", str(pairs), "--output",
           str(folder / "judged.jsonl"), "--db", db_url, "--threads", "1"]
    subprocess.run(cmd, cwd=REPO, env=app_env(db_url), check=True, stdout=subprocess.DEVNULL)


def labels(db_url: str) -> dict[int, int]:
    """Judgment id -> the pair's known better response (what the reviewer knows to be right)."""
    from reflectrm_db.services import JudgmentStore

    with JudgmentStore.open(db_url) as store:
        return {s.id: s.label for s in store.review_queue(limit=1000) if s.label is not None}


# --- the keyboard ---------------------------------------------------------------------------------------------------


class Keyboard:
    """Key presses only, counted; `tab_to` presses Tab (or Shift+Tab) until the focused element matches."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.presses = 0

    def press(self, key: str) -> None:
        self.page.keyboard.press(key)
        self.presses += 1

    def type(self, text: str) -> None:
        self.page.keyboard.type(text)
        self.presses += len(text)

    def tab_to(self, selector: str, *, back: bool = False, limit: int = 120) -> int:
        """Tab until the focused element is (or is inside) `selector`; returns the presses it took."""
        for k in range(1, limit + 1):
            self.press("Shift+Tab" if back else "Tab")
            if self.page.evaluate("(sel) => !!document.activeElement?.closest(sel)", selector):
                return k
        raise SystemExit(f"keyboard: {selector} is not reachable with {limit} Tab presses")

    def choose(self, dropdown: str, option: str) -> None:
        """Tab to a dropdown, type the option, and (once the list shows it, as a person would look) press Enter."""
        self.tab_to(dropdown)
        self.type(option)
        expect(self.page.locator(f"{dropdown} li", has_text=option).first).to_be_visible(timeout=WAIT_MS)
        self.press("Enter")
        # the typed text already reads `option`; the dropdown has taken it when it lets the focus go
        expect(self.page.locator(f"{dropdown} input")).not_to_be_focused(timeout=WAIT_MS)
        expect(self.page.locator(f"{dropdown} input")).to_have_value(option, timeout=WAIT_MS)


def header(page: Page) -> str:
    return page.locator("#review-header textarea").input_value()


def status(page: Page, elem_id: str) -> str:
    return page.locator(f"#{elem_id} textarea").input_value()


def wait_text(page: Page, elem_id: str, pattern: str) -> str:
    expect(page.locator(f"#{elem_id} textarea").first).to_have_value(re.compile(pattern), timeout=WAIT_MS)
    return status(page, elem_id)


def shown_id(text: str) -> int:
    return int(re.match(r"Judgment #(\d+)", text).group(1))


# --- the session ----------------------------------------------------------------------------------------------------


def open_review(keys: Keyboard) -> None:
    keys.tab_to("#tab-review-button")
    keys.press("Enter")
    wait_text(keys.page, "review-header", r"^Judgment #\d+")


def correct_one(keys: Keyboard, known: dict[int, int]) -> tuple[int, bool]:
    """Press the known better response's key (again when asked to confirm); (judgment id, whether it asked)."""
    page = keys.page
    before = header(page)
    jid = shown_id(before)
    key = str(known[jid])
    keys.press(key)
    status_text = wait_text(page, "review-status", rf"^(confirm: |.*\(judgment #{jid}\); the next item is shown)")
    asked = status_text.startswith("confirm: ")
    if asked:
        keys.press(key)
        wait_text(page, "review-status", rf"\(judgment #{jid}\); the next item is shown")
    return jid, asked


def export_snapshot(keys: Keyboard, name: str) -> str:
    """To Curate, a snapshot typed by name, then its reflection pairs exported; returns the export status."""
    page = keys.page
    keys.tab_to("#tab-curate-button", back=True)
    keys.press("Enter")
    wait_text(page, "curate-status", r"example\(s\) shown")
    keys.tab_to("#curate-snap-name")
    keys.type(name)
    keys.press("Enter")  # the name field submits the snapshot
    wait_text(page, "curate-status", rf"^snapshot '{name}'")
    keys.choose("#curate-export-kind", "reflection-pairs")
    keys.choose("#curate-export-snapshot", name)
    keys.tab_to("#curate-export")
    keys.press("Enter")
    text = wait_text(page, "curate-status", r"^(exported|error)")
    if not text.startswith("exported reflection-pairs"):  # at once, not after waiting for a file that is not coming
        raise SystemExit(f"the export is not the snapshot's reflection pairs: {text}")
    # the file's name is a cell of its own (the link is its size): Gradio 6 lists a file that way
    expect(page.locator("#curate-file")).to_contain_text(f"reflection-pairs-{name}", timeout=WAIT_MS)
    return text


def review_session(page: Page, url: str, *, known: dict[int, int], shots: Path | None) -> dict[str, object]:
    """The reviewer's session from the page load on (the app already answers HTTP)."""
    keys = Keyboard(page)
    clock = stopwatch()
    page.goto(url, timeout=WAIT_MS)
    page.wait_for_selector("#judge-run", timeout=WAIT_MS)
    page_ready = clock.seconds
    open_review(keys)
    first_item = clock.seconds
    per_item, asked, ids = [], 0, []
    for k in range(1, REVIEWED + 1):
        if shots and k in (1, 5, 10):
            page.screenshot(path=str(shots / f"review-item-{k:02d}.png"))
        item = stopwatch()
        jid, confirm = correct_one(keys, known)
        per_item.append(item.stop())
        ids.append(jid)
        asked += confirm
    reviewed = clock.seconds
    review_keys = keys.presses
    toasts = toasts_over_form(page)
    export_status = export_snapshot(keys, "reviewed-ten")
    exported = clock.seconds
    if shots:
        page.screenshot(path=str(shots / "curate-exported.png"))
    return {"page_ready_s": page_ready, "open_review_s": first_item, "review_s": reviewed - first_item,
            "item_median_s": statistics.median(per_item), "item_max_s": max(per_item),
            "export_s": exported - reviewed, "session_s": exported, "asked_to_confirm": asked,
            "reviewed_ids": ids, "distinct_items": len(set(ids)), "keys_to_review": review_keys,
            "keys_total": keys.presses, "export_status": export_status, **toasts}


TOASTS_JS = """() => {
  const shown = (e) => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0 && r.bottom > 0
    && r.top < innerHeight; };
  const toasts = Array.from(document.querySelectorAll('.toast-body')).filter(shown);
  const form = Array.from(document.querySelectorAll('#tab-review [id^=review-]')).filter(shown)
    .map((e) => e.getBoundingClientRect());
  const over = (t) => form.some((f) => t.left < f.right && f.left < t.right && t.top < f.bottom && f.top < t.bottom);
  return {toasts_after_review: toasts.length,
          toasts_over_form: toasts.filter((t) => over(t.getBoundingClientRect())).length,
          saved_toasts: toasts.filter((t) => /saved/i.test(t.innerText)).length};
}"""


def toasts_over_form(page: Page) -> dict[str, int]:
    """Toasts in the window right after the ten corrections: how many, how many cover part of the Review tab's
    form (its header, status, texts, analyses, buttons), and how many say "Saved" (a save has its status line)."""
    return page.evaluate(TOASTS_JS)


def plot_on_fresh_page(browser, url: str, *, shots: Path | None, judge_shot: Path | None) -> float:  # noqa: ANN001
    """A fresh page judges its first demo example: seconds until the plot has its filled bars."""
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(url, timeout=WAIT_MS)
    page.wait_for_selector("#judge-run", timeout=WAIT_MS)
    keys = Keyboard(page)
    keys.tab_to("#judge-examples")
    keys.press("Enter")  # the first example fills the form
    expect(page.locator("#judge-query textarea")).not_to_have_value("", timeout=WAIT_MS)
    clock = stopwatch()
    keys.tab_to("#judge-run")
    keys.press("Enter")
    wait_text(page, "judge-status", r"^judged and recorded as #")
    expect(page.locator("#judge-plot svg .mark-rect path").first).to_be_visible(timeout=WAIT_MS)
    seconds = clock.stop()
    if shots:
        page.locator("#judge-plot").screenshot(path=str(shots / "judge-plot-fresh-page.png"))
        page.screenshot(path=str(shots / "judge-tab.png"), full_page=True)
    page.close()
    if judge_shot:
        readme_picture(browser, url, judge_shot)
    return seconds


def readme_picture(browser, url: str, target: Path) -> None:  # noqa: ANN001
    """The Judge tab after a judgment, for the README (by mouse: the picture is of the tab, not of the keys)."""
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(url, timeout=WAIT_MS)
    page.locator("#judge-examples td").first.click()
    page.click("#judge-run")
    wait_text(page, "judge-status", r"^judged and recorded as #")
    expect(page.locator("#judge-plot svg .mark-rect path").first).to_be_visible(timeout=WAIT_MS)
    page.locator("#tab-judge").screenshot(path=str(target))
    page.close()


def interrupted_run(browser, db_url: str, folder: Path, *, shots: Path | None) -> dict[str, object]:  # noqa: ANN001
    """An evaluation run started, the app killed mid-run, restarted: the Evaluate tab says the run was interrupted."""
    from reflectrm_db.evaluation import EvalStore
    from reflectrm_db.services import JudgmentStore

    def runs() -> list:
        with JudgmentStore.open(db_url) as store:
            return EvalStore(store).runs()

    with app_process(db_url, folder / "app.log", timeout_s=WAIT_MS / 1000) as (url, proc):
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(url, timeout=WAIT_MS)
        keys = Keyboard(page)
        keys.tab_to("#tab-evaluate-button")
        keys.press("Enter")
        keys.tab_to("#eval-limit")
        keys.press("Control+A")
        keys.type("6")
        keys.tab_to("#eval-run")
        keys.press("Enter")
        deadline = time.monotonic() + WAIT_MS / 1000
        while not (runs() and runs()[0].items_done >= 1):
            if time.monotonic() > deadline:
                raise SystemExit("the evaluation run judged nothing in time")
            page.wait_for_timeout(200)
        proc.kill()  # a crash: nothing marks the run
        proc.wait()
        page.close()
    left = runs()[0]
    restart = stopwatch()
    with app_process(db_url, folder / "app.log", timeout_s=WAIT_MS / 1000) as (url, _):
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(url, timeout=WAIT_MS)
        keys = Keyboard(page)
        keys.tab_to("#tab-evaluate-button")
        keys.press("Enter")
        said = wait_text(page, "eval-status", rf"^run\(s\) {left.id} interrupted")
        seconds = restart.stop()
        if shots:
            page.screenshot(path=str(shots / "evaluate-interrupted-after-restart.png"))
        page.close()
    return {"run": left.id, "done_before_kill": left.items_done, "of": left.items_total,
            "restart_to_interrupted_shown_s": seconds, "status_after_restart": said}


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--items", type=int, default=12, help="demo-judge judgments to seed (at least 12; default 12)")
    ap.add_argument("--shots", type=Path, help="folder for the screenshots (none without it)")
    ap.add_argument("--judge-shot", type=Path, help="also save the Judge tab after a judgment here (a PNG)")
    args = ap.parse_args()
    if args.items < 12:
        ap.error("--items must be at least 12 (ten to review, and a queue that is not exhausted)")
    if args.shots:
        args.shots.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="reflectrm-reviewer-"))
    db_url = f"sqlite:///{folder / 'app.db'}"
    load_before = load_line()
    seeding = stopwatch()
    seed(db_url, folder, items=args.items)
    seed_s = seeding.stop()
    known = labels(db_url)
    with sync_playwright() as p:
        browser = launch_chromium(p)
        try:
            launched = stopwatch()
            with app_process(db_url, folder / "app.log", timeout_s=WAIT_MS / 1000) as (url, _):
                http_ready = launched.seconds
                page = browser.new_page(viewport=VIEWPORT)
                figures = review_session(page, url, known=known, shots=args.shots)
                page.close()
                plot_s = plot_on_fresh_page(browser, url, shots=args.shots, judge_shot=args.judge_shot)
            restart = interrupted_run(browser, db_url, folder, shots=args.shots)
        finally:
            browser.close()
    rounded = {k: round(v, 2) if isinstance(v, float) else v for k, v in figures.items()}
    session = http_ready + figures["session_s"]
    print(f"seeded {args.items} demo-judge judgments:  {seed_s:7.2f} s")
    print(f"app launch to HTTP 200:               {http_ready:7.2f} s")
    print(f"page load to Judge tab:               {figures['page_ready_s']:7.2f} s")
    print(f"keys to the first Review item:        {figures['open_review_s'] - figures['page_ready_s']:7.2f} s")
    print(f"ten corrections by keyboard:          {figures['review_s']:7.2f} s   "
          f"(median {figures['item_median_s']:.2f} s an item, max {figures['item_max_s']:.2f} s; "
          f"{figures['asked_to_confirm']} asked to confirm)")
    print(f"toasts on screen after the ten:       {figures['toasts_after_review']:7d}     "
          f"({figures['toasts_over_form']} over the form, {figures['saved_toasts']} saying Saved)")
    print(f"snapshot + export by keyboard:        {figures['export_s']:7.2f} s")
    print(f"whole session, launch to export:      {session:7.2f} s   ({figures['keys_total']} key presses, no clicks)")
    print(f"plot on a fresh page, Judge to bars:  {plot_s:7.2f} s")
    print(f"restart to 'interrupted' shown:       {restart['restart_to_interrupted_shown_s']:7.2f} s")
    print(f"before: {load_before}; after: {load_line()}")
    return finish({"items_seeded": args.items, "seed_s": round(seed_s, 2), "http_ready_s": round(http_ready, 2),
                   **rounded, "launch_to_export_s": round(session, 2), "plot_fresh_page_s": round(plot_s, 2),
                   "interrupted_run": {k: round(v, 2) if isinstance(v, float) else v for k, v in restart.items()},
                   "shots": str(args.shots) if args.shots else None, "load_before": load_before})


if __name__ == "__main__":
    raise SystemExit(main())
