"""End to end in Chromium: three reviewers logged in at once work one blind review round with overlap 2.

The real `reflectrm app` (with logins) runs over a seeded store; an admin adds the reviewers and opens the round
in the Reviewers tab, each reviewer walks "My rounds" in the Review tab in turn, the admin adjudicates a
disagreement and reads the agreement table. Checked against the store: no item handed out beyond its overlap,
every answer saved as given, a blind item showed nobody else's answer before its reviewer answered, and the
agreement table equals `reflectrm.agreement` on the stored answers. First on one app over SQLite, then on two app
processes over one PostgreSQL store (the reviewers' contexts split across them).
"""

from __future__ import annotations

import re
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytest.importorskip("playwright.sync_api")
from playwright.sync_api import Browser, Page, expect  # noqa: E402

from reflectrm.agreement import Answer, agreement_report  # noqa: E402
from reflectrm_app.ui.round_views import HIDDEN  # noqa: E402
from reflectrm_db.services import JudgmentStore  # noqa: E402
from tests.app.browser import CHROMIUM, running_app  # noqa: E402
from tests.app.test_e2e import _seed, open_tab, table, value, wait_value  # noqa: E402
from tests.db.conftest import _pg_database, pg_server, pg_template  # noqa: E402,F401

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"needs Debian's Chromium at {CHROMIUM}"),
]

ROUND, ITEMS, OVERLAP = "team-1", 4, 2
LOGINS = {"ana": "pw-a", "ben": "pw-b", "cy": "pw-c"}
AUTH = ",".join(f"{u}:{p}" for u, p in LOGINS.items())
VERDICTS = {"ana": 1, "ben": 1, "cy": 2}  # cy disagrees with whoever shares an item with them
ENV = {"REFLECTRM_AUTH": AUTH, "REFLECTRM_WARM_UP": "false"}  # no judging here: the model need not load


def logged_in(browser: Browser, url: str, user: str) -> Page:
    """A new browser context (its own session) logged in as `user`."""
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    page.set_default_timeout(60_000)
    page.goto(url)
    page.locator("input[type=password]").wait_for()
    page.locator("input:not([type=password])").first.fill(user)
    page.locator("input[type=password]").fill(LOGINS[user])
    page.get_by_role("button", name="Login").click()
    page.wait_for_selector("#judge-run")
    return page


def add_reviewer_and_open_round(admin: Page) -> None:
    open_tab(admin, "Reviewers")
    wait_value(admin, "reviewers-who", r"^ana \(admin\)$")
    for name in ("ben", "cy"):
        admin.fill("#reviewers-name textarea", name)
        admin.click("#reviewers-set")
        wait_value(admin, "reviewers-status", rf"^added {name} as reviewer$")
    admin.fill("#round-name textarea", ROUND)
    admin.fill("#round-top textarea", str(ITEMS))
    admin.click("#round-open")
    wait_value(admin, "reviewers-status", rf"^opened round '{ROUND}': {ITEMS} judgment\(s\), each to {OVERLAP} "
                                          r"reviewer\(s\), blind$")


def plain_reviewer_sees_no_admin_controls(page: Page) -> None:
    open_tab(page, "Reviewers")
    wait_value(page, "reviewers-who", r"^ben \(reviewer\)$")
    expect(page.locator("#reviewers-admin")).to_be_hidden()
    expect(page.locator("#reviewers-adjudicator")).to_be_hidden()
    expect(page.locator("#reviewers-rounds")).to_contain_text(ROUND)  # progress is for everyone


@dataclass
class Walk:
    """What the browsers saw: each saved answer, and blind items shown while another's answer was in the store."""

    saved: dict[tuple[int, str], int] = field(default_factory=dict)
    hidden_with_others_in: int = 0


def header_id(page: Page) -> int | None:
    found = re.match(r"Judgment #(\d+)", value(page, "myround-header"))
    return int(found.group(1)) if found else None


def take_next(page: Page, previous: str) -> int | None:
    """Next item of the round; its judgment id, or None when nothing is left for this reviewer."""
    page.click("#myround-next")
    expect(page.locator("#myround-header textarea")).not_to_have_value(previous)
    return header_id(page)


def answer_one(page: Page, user: str, db_url: str, walk: Walk) -> bool:
    """Take and answer one item in `page`'s round; False when the reviewer has nothing left."""
    jid = take_next(page, value(page, "myround-header"))
    if jid is None:
        assert value(page, "myround-header") == "nothing left for you in this round"
        return False
    with JudgmentStore.open(db_url) as store:
        others_in = [a.reviewer for a in store.round_answers(ROUND, judgment_id=jid) if a.reviewer != user]
    # blind: before answering, nobody else's answer and no label, even when one is in the store
    expect(page.locator("#myround-others")).to_contain_text(HIDDEN)
    assert value(page, "myround-label") == HIDDEN
    assert not any(name in page.locator("#myround-others").inner_text() for name in others_in)
    walk.hidden_with_others_in += bool(others_in)
    if user == "ana":
        page.locator("#myround-right label").first.click()  # a mark on analysis #0
    page.click(f"#myround-r{VERDICTS[user]}")
    wait_value(page, "myround-status", rf"^saved your answer to judgment #{jid}: Response {VERDICTS[user]}")
    walk.saved[(jid, user)] = VERDICTS[user]
    shown = {row["reviewer"] for row in table(page, "myround-others")}
    assert shown == set(others_in), (shown, others_in)  # answered: the others' answers show now
    return True


def work_the_round(pages: dict[str, Page], db_url: str) -> Walk:
    """Each reviewer opens My rounds; then they take and answer items in turn until nobody has any left."""
    walk = Walk()
    for user, page in pages.items():
        open_tab(page, "Review queue")
        expect(page.locator("#myround")).to_be_visible()
        expect(page.locator("#myround-pick input")).to_have_value(re.compile(rf"^{ROUND} \(4 items, overlap 2, blind\)"))
    busy = dict.fromkeys(pages, True)
    while any(busy.values()):
        for user, page in pages.items():
            if busy[user]:
                busy[user] = answer_one(page, user, db_url, walk)
    return walk


def check_store(db_url: str, walk: Walk) -> list[Answer]:
    with JudgmentStore.open(db_url) as store:
        given = store.round_answers(ROUND, answered_only=False)
        labels = {lab.judgment_id: lab for lab in store.round_labels(ROUND)}
    per_item: dict[int, list[str]] = {}
    for a in given:
        per_item.setdefault(a.judgment_id, []).append(a.reviewer)
    assert len(per_item) == ITEMS and all(len(set(r)) == len(r) == OVERLAP for r in per_item.values()), per_item
    assert {(a.judgment_id, a.reviewer): a.verdict for a in given} == walk.saved  # nothing lost, nothing extra
    assert walk.hidden_with_others_in >= 1  # trap: the blind check ran on an item another had answered
    agreed = {j for j, names in per_item.items() if "cy" not in names}
    assert {j for j, lab in labels.items() if lab.kind == "agreed"} == agreed
    return [Answer(item=a.judgment_id, reviewer=a.reviewer, verdict="AB"[a.verdict - 1], marks=a.marks) for a in given]


def adjudicate_one(admin: Page, db_url: str) -> int:
    open_tab(admin, "Reviewers")
    admin.click("#reviewers-refresh")
    wait_value(admin, "reviewers-who", r"^ana \(admin\)$")
    admin.click("#reviewers-queue")
    waiting = wait_value(admin, "reviewers-status", r"^\d+ item\(s\) waiting")
    assert int(waiting.split()[0]) >= 1
    jid = int(admin.locator("#adjudicate-item input").input_value().lstrip("#"))
    expect(admin.locator("#adjudicate-answers")).to_contain_text("cy")
    columns = set(table(admin, "adjudicate-answers")[0])
    assert "cy" in columns and len(columns) == 1 + OVERLAP, columns  # every answer side by side
    admin.locator("#adjudicate-verdict label", has_text="Response 1").click()
    admin.click("#adjudicate-decide")
    wait_value(admin, "reviewers-status", rf"^judgment #{jid}: Response 1, decided by ana \(1 answer\(s\) overruled\)")
    with JudgmentStore.open(db_url) as store:
        label = store.round_label(ROUND, jid)
    assert label is not None and (label.kind, label.decided_by, label.verdict) == ("adjudicated", "ana", 1)
    return jid


def agreement_matches_reference(admin: Page, answers: list[Answer]) -> None:
    admin.click("#reviewers-agree")
    wait_value(admin, "reviewers-status", rf"^agreement of round '{ROUND}': {ITEMS} item\(s\), 3 reviewer\(s\)")
    want = agreement_report(answers, resamples=2000, seed=0).rows()["overall"]
    expect(admin.locator("#agree-overall [role=row]")).to_have_count(len(want) + 1)  # and the header row
    shown = table(admin, "agree-overall")
    assert len(shown) == len(want)
    for got, row in zip(shown, want):
        assert (got["level"], got["figure"]) == (row["level"], row["figure"])
        for key in ("value", "low", "high"):
            assert (got[key] == "") if row[key] == "" else float(got[key]) == pytest.approx(row[key], abs=5e-4), \
                (key, got, row)


def run_the_round(urls: dict[str, str], db_url: str, browser: Browser) -> None:
    """The whole scenario, each reviewer in their own context on the app `urls` names for them."""
    with JudgmentStore.open(db_url) as store:
        store.set_reviewer("ana", role="admin")  # the first admin, as `reflectrm reviewers add` makes one
    pages = {user: logged_in(browser, url, user) for user, url in urls.items()}
    try:
        add_reviewer_and_open_round(pages["ana"])
        plain_reviewer_sees_no_admin_controls(pages["ben"])
        walk = work_the_round(pages, db_url)
        answers = check_store(db_url, walk)
        adjudicate_one(pages["ana"], db_url)
        agreement_matches_reference(pages["ana"], answers)
    finally:
        for page in pages.values():
            page.context.close()


def test_three_reviewers_work_one_blind_round_on_one_app_over_sqlite(browser: Browser, tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'rounds.db'}"
    _seed(db_url)
    with running_app(db_url, log=tmp_path / "app.log", **ENV) as url:
        run_the_round(dict.fromkeys(LOGINS, url), db_url, browser)


def test_three_reviewers_on_two_app_processes_over_one_postgresql_store(browser: Browser, tmp_path: Path,
                                                                        pg_server: str, pg_template: str) -> None:
    with _pg_database(pg_server, pg_template) as db_url, ExitStack() as apps:
        _seed(db_url)
        first = apps.enter_context(running_app(db_url, log=tmp_path / "app-1.log", **ENV))
        second = apps.enter_context(running_app(db_url, log=tmp_path / "app-2.log", **ENV))
        run_the_round({"ana": first, "ben": second, "cy": first}, db_url, browser)
