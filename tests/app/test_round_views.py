"""The workbench's formatting of review rounds (`reflectrm_app.ui.round_views`) and the Reviewers tab's role check,
on tables of cases; the role check over a real SQLite store."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from reflectrm_app.services.rounds import RoundService
from reflectrm_app.ui import round_views as rv
from reflectrm_app.ui.tabs.reviewers import require_adjudicator
from reflectrm_db.records import AnswerRecord, ReviewerProgress, ReviewerRecord, RoundProgress, RoundRecord
from reflectrm_db.services import JudgmentStore
from reflectrm.errors import InputError, RoleError

T = datetime(2025, 1, 2, 3, 4, tzinfo=timezone.utc)


def rnd(*, reviewers: tuple[str, ...] = (), blind: bool = True) -> RoundRecord:
    return RoundRecord(id=1, name="r1", overlap=2, blind=blind, reviewers=reviewers, selection={}, opened_by="ana",
                       items=4, created_at=T)


def who(name: str, role: str) -> ReviewerRecord:
    return ReviewerRecord(name=name, role=role, created_at=T)


def answer(reviewer: str, verdict: int | None, marks: dict[int, str] | None = None, note: str = "") -> AnswerRecord:
    return AnswerRecord(id=1, round="r1", judgment_id=7, reviewer=reviewer, verdict=verdict, marks=marks or {},
                        note=note, assigned_at=T, answered_at=T if verdict else None)


@pytest.mark.parametrize("round_, reviewer, want", [
    pytest.param(rnd(), who("ben", "reviewer"), True, id="open-to-every-reviewer"),
    pytest.param(rnd(reviewers=("ana", "ben")), who("ben", "reviewer"), True, id="named"),
    # trap: names compare as the store keeps them unique, regardless of case
    pytest.param(rnd(reviewers=("Ben",)), who("ben", "reviewer"), True, id="named-other-case"),
    pytest.param(rnd(reviewers=("ana",)), who("ben", "reviewer"), False, id="not-named"),
    pytest.param(rnd(), who("ana", "admin"), True, id="admin-reviews-too"),
    # trap: an adjudicator decides disputes but takes no items, so My rounds stays hidden for them
    pytest.param(rnd(), who("dee", "adjudicator"), False, id="adjudicator-takes-no-items"),
    pytest.param(rnd(), None, False, id="login-without-reviewer-row"),
])
def test_my_rounds_lists_the_rounds_a_reviewer_works_in(round_, reviewer, want) -> None:
    assert rv.works_in(round_, reviewer) is want


def progress(*rows: tuple[str, int, int]) -> RoundProgress:
    return RoundProgress(round=rnd(), needed=8, assigned=sum(r[1] for r in rows), answered=sum(r[2] for r in rows),
                         complete=0, agreed=0, adjudicated=0, disputed=0,
                         reviewers=tuple(ReviewerProgress(reviewer=n, assigned=a, answered=d) for n, a, d in rows))


@pytest.mark.parametrize("p, reviewer, want", [
    pytest.param(progress(("ana", 3, 2), ("ben", 2, 2)), "ana", (2, 3), id="mid-way"),
    pytest.param(progress(("ana", 3, 2)), "ben", (0, 0), id="before-taking-an-item"),
    # trap: another reviewer's figures are never a reviewer's own
    pytest.param(progress(("ben", 4, 4), ("ana", 1, 0)), "ana", (0, 1), id="others-listed-first"),
])
def test_k_of_n_answered_is_this_reviewers_own(p, reviewer, want) -> None:
    assert rv.my_progress(p, reviewer) == want
    assert rv.progress_text(p, reviewer).startswith(f"{want[0]} of {want[1]} answered by you in round 'r1'")


SCRIPT = "<script>alert(1)</script>"


@pytest.mark.parametrize("others, hidden, want", [
    pytest.param([answer("ben", 1)], True, [rv.HIDDEN], id="blind-before-answering"),
    pytest.param([answer("ben", 2, {0: "wrong", 3: "right"}, "meh")], False, ["ben"], id="revealed"),
    # trap: an assignment not yet answered is no answer to show
    pytest.param([answer("ben", None), answer("cy", 1)], False, ["cy"], id="unanswered-left-out"),
    pytest.param([], False, [], id="alone"),
])
def test_other_answers_show_only_when_the_round_allows(others, hidden, want) -> None:
    frame = rv.others_frame(others, hidden=hidden)
    assert list(frame["reviewer"]) == want
    if hidden:  # nothing of the withheld answers leaks into any cell
        assert set(frame.iloc[0, 1:]) == {""}


@pytest.mark.parametrize("answers, analyses, want", [
    pytest.param([answer("ana", 1, {0: "right"}), answer("cy", 2, {1: "wrong"}, SCRIPT)], 2,
                 [["verdict", "Response 1", "Response 2"], ["analysis #0", "right", ""], ["analysis #1", "", "wrong"],
                  ["note", "", SCRIPT]], id="two-answers"),
    # trap: a mark past the judge's analyses is not drawn as a row of its own
    pytest.param([answer("ana", 2, {5: "right"})], 1, [["verdict", "Response 2"], ["analysis #0", ""], ["note", ""]],
                 id="mark-beyond-the-analyses"),
])
def test_answers_side_by_side_are_plain_cells_one_column_per_reviewer(answers, analyses, want) -> None:
    frame = rv.answers_frame(answers, analyses=analyses)
    assert list(frame.columns) == ["", *(a.reviewer for a in answers)]
    assert frame.values.tolist() == want  # a note with markup stays the text it was


@pytest.mark.parametrize("rule, want", [
    pytest.param(None, "", id="every-active-example"),
    pytest.param({"labels": "agreed-or-adjudicated", "min_agreement": 0.0, "round": None},
                 "agreed-or-adjudicated labels of every round", id="default-rule"),
    pytest.param({"labels": "agreed", "min_agreement": 0.5, "round": "r1"}, "agreed labels of round 'r1', "
                 "agreement at least 0.5", id="one-round-with-least-agreement"),
])
def test_a_snapshots_rule_in_words(rule, want) -> None:
    assert rv.rule_text(rule) == want


@pytest.mark.parametrize("text, want", [
    pytest.param("", None, id="blank-all"),
    pytest.param(" 12 ", 12, id="spaces"),
    pytest.param("0", 0, id="zero-left-to-round-config"),
    pytest.param("ten", InputError, id="words"),
    pytest.param("1.5", InputError, id="fraction"),
])
def test_first_n_judgments_field(text, want) -> None:
    if want is InputError:
        with pytest.raises(InputError) as err:
            rv.parse_top(text)
        assert text not in str(err.value) and "\n" not in str(err.value)  # the typed value is not echoed
    else:
        assert rv.parse_top(text) == want


@pytest.mark.parametrize("text, want", [
    pytest.param("", (), id="blank"),
    pytest.param("ana, ben  cy", ("ana", "ben", "cy"), id="commas-and-spaces"),
])
def test_reviewer_names_typed_for_a_round(text, want) -> None:
    assert rv.reviewer_names(text) == want


@pytest.mark.parametrize("user, role, refused", [
    pytest.param("ana", "admin", False, id="admin"),
    pytest.param("dee", "adjudicator", False, id="adjudicator"),
    pytest.param("ben", "reviewer", True, id="plain-reviewer"),
    pytest.param("zed", None, True, id="not-a-reviewer"),
])
def test_agreement_tables_are_for_adjudicators_and_admins(tmp_path: Path, user, role, refused) -> None:
    with JudgmentStore.open(f"sqlite:///{tmp_path / 'roles.db'}") as store:
        rounds = RoundService(store)
        if role:
            rounds.set_reviewer(user, role=role)
        if refused:
            with pytest.raises(RoleError) as err:
                require_adjudicator(rounds, user)
            assert "\n" not in str(err.value) and "ask an admin" in str(err.value)
        else:
            require_adjudicator(rounds, user)
