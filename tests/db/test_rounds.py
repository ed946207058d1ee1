"""Review rounds on real SQLite files and PostgreSQL: assignment (overlap, even spread, never twice to one reviewer,
the round's reviewer list, roles), blind visibility enforced by the service, labels by agreement and by an
adjudicator written as corrections, and snapshots by rule."""

from __future__ import annotations

import pytest

from reflectrm_app.services.rounds import RoundService
from reflectrm_db.rounds import RoundConfig, SnapshotRule
from reflectrm_db.services import JudgmentStore
from reflectrm.errors import ConfigError, InputError, RoleError
from tests.db.helpers import make_pairs

TEAM = {"ana": "reviewer", "ben": "reviewer", "cy": "reviewer", "dee": "adjudicator", "root": "admin"}


@pytest.fixture
def team(store: JudgmentStore, judge_pairs) -> tuple[JudgmentStore, list[int]]:
    """A store with six judgments (the queue's order) and the TEAM."""
    store.record(judge_pairs(make_pairs(6, prefix="rd")), swapped=False)
    for name, role in TEAM.items():
        store.set_reviewer(name, role=role)
    return store, [s.id for s in store.review_queue(limit=100)]


def _drain(store: JudgmentStore, name: str, reviewer: str, verdict: int = 1) -> list[int]:
    got = []
    while (j := store.take_round_item(name, reviewer=reviewer)) is not None:
        got.append(j)
        store.answer_round_item(name, j, reviewer=reviewer, verdict=verdict)
    return got


def test_each_reviewer_takes_every_item_once_and_no_item_goes_beyond_its_overlap(team):
    store, queue = team
    store.open_round(RoundConfig(name="r", overlap=2), opened_by="t")
    got = {who: _drain(store, "r", who) for who in ("ana", "ben", "cy")}
    assert got["ana"] == queue  # the first reviewer walks the queue's order
    assert sorted(got["ben"]) == sorted(queue) and got["cy"] == []  # two answers each: nothing left for a third
    assert store.round_progress("r").agreed == len(queue)


def test_the_spread_is_even_fewest_assignments_first(team):
    store, queue = team
    store.open_round(RoundConfig(name="r", overlap=2), opened_by="t")
    first = [store.take_round_item("r", reviewer=who) for who in ("ana", "ben", "cy")]
    assert first == queue[:3]  # three reviewers start on three different items, not all on the first


def test_an_unanswered_item_comes_back_to_its_reviewer_first(team):
    store, queue = team
    store.open_round(RoundConfig(name="r", overlap=1), opened_by="t")
    assert store.take_round_item("r", reviewer="ana") == store.take_round_item("r", reviewer="ana") == queue[0]
    assert store.round_progress("r").assigned == 1


def test_a_released_item_goes_to_the_next_reviewer(team):
    store, queue = team
    store.open_round(RoundConfig(name="r", overlap=1), opened_by="t")
    store.take_round_item("r", reviewer="ana")
    assert store.release_round_items("r", reviewer="ana") == [queue[0]]
    assert store.take_round_item("r", reviewer="ben") == queue[0]
    moved = store.reassign_round_item("r", queue[0], reviewer="ben", to="cy")
    assert (moved.reviewer, store.take_round_item("r", reviewer="cy")) == ("cy", queue[0])


@pytest.mark.parametrize(("who", "config", "error"), [
    # traps: a login with no reviewer row, an adjudicator (decides, does not answer), a name outside the round's list
    pytest.param("zed", {}, "'zed' is not a reviewer in this store", id="unknown-name"),
    pytest.param("dee", {}, "'dee' is adjudicator, and only a reviewer or admin may review", id="adjudicator"),
    pytest.param("cy", {"reviewers": ("ana", "ben")}, "round 'r' is for ana, ben only", id="not-on-the-list"),
])
def test_who_may_not_take_items_is_refused_in_one_line(team, who, config, error):
    store, _ = team
    store.open_round(RoundConfig(name="r", overlap=2, **config), opened_by="t")
    with pytest.raises(RoleError) as caught:
        store.take_round_item("r", reviewer=who)
    assert str(caught.value).startswith(error) and "\n" not in str(caught.value)
    assert store.round_progress("r").assigned == 0  # refused before anything was handed out


@pytest.mark.parametrize(("config", "error"), [
    pytest.param({"overlap": 0}, "overlap must be a whole number", id="overlap-zero"),
    pytest.param({"overlap": 3, "reviewers": ("ana", "ben")}, "overlap 3 needs at least 3 reviewers", id="few-named"),
    pytest.param({"reviewers": ("ana", "Ana")}, "reviewers lists a name twice", id="named-twice"),
    pytest.param({"top": 0}, "top must be a number of judgments", id="top-zero"),
    pytest.param({"snapshot": "s", "source": "tests"}, "a round takes a snapshot's judgments", id="two-selections"),
    pytest.param({"name": "  "}, "a round needs a name", id="blank-name"),
])
def test_a_round_that_cannot_be_worked_is_refused_when_made(config, error):
    with pytest.raises((ConfigError, InputError), match=error):
        RoundConfig(**{"name": "r", **config})


@pytest.mark.parametrize(("config", "error"), [
    pytest.param({"overlap": 6}, "overlap 6 needs 6 reviewers, the store has 4", id="more-than-the-team"),
    pytest.param({"source": "nowhere"}, "the review queue of source 'nowhere' holds no judgment", id="empty"),
    pytest.param({"reviewers": ("ana", "dee")}, "'dee' is adjudicator", id="adjudicator-listed"),
])
def test_opening_a_round_checks_the_store_before_writing(team, config, error):
    store, _ = team
    with pytest.raises(InputError, match=error):
        store.open_round(RoundConfig(name="r", **config), opened_by="t")
    assert store.rounds() == []


def test_a_blind_round_hides_others_answers_and_earlier_corrections_until_one_answers(team):
    store, queue = team
    service = RoundService(store)
    store.correct(queue[0], verdict=2, author="earlier")
    service.open_round(RoundConfig(name="b", overlap=2, blind=True, include_corrected=True, top=1), by="root")
    first = service.next_item("b", reviewer="ana")
    service.answer("b", first.stored.id, reviewer="ana", verdict=1)
    seen = service.next_item("b", reviewer="ben")
    assert seen.stored.id == first.stored.id
    assert (seen.hidden, seen.others, seen.corrections) == (True, (), ())  # ana's answer and the correction withheld
    service.answer("b", seen.stored.id, reviewer="ben", verdict=1)
    after = service.item("b", seen.stored.id, reviewer="ben")
    assert not after.hidden and [a.reviewer for a in after.others] == ["ana"] and after.corrections
    with pytest.raises(RoleError, match="is not assigned to 'cy'"):  # nor can another reviewer look it up by id
        service.item("b", seen.stored.id, reviewer="cy")


@pytest.mark.parametrize(("verdicts", "marks", "kind"), [
    # traps: the same verdict with a mark right against wrong is no agreement; a mark only one gave is not agreed
    pytest.param((1, 1), ({0: "right"}, {0: "right", 1: "wrong"}), "agreed", id="agree"),
    pytest.param((1, 2), ({}, {}), None, id="verdicts-differ"),
    pytest.param((2, 2), ({0: "right"}, {0: "wrong"}), None, id="marks-clash"),
])
def test_an_item_is_labelled_by_agreement_or_waits_for_an_adjudicator(team, verdicts, marks, kind):
    store, queue = team
    store.open_round(RoundConfig(name="r", overlap=2, top=1), opened_by="t")
    labels = []
    for who, verdict, mark in zip(("ana", "ben"), verdicts, marks):
        store.take_round_item("r", reviewer=who)
        labels.append(store.answer_round_item("r", queue[0], reviewer=who, verdict=verdict, marks=mark)[1])
    assert labels[0] is None and (labels[1] and labels[1].kind) == kind
    if kind:
        [correction] = store.corrections(judgment_id=queue[0])
        assert (correction.author, correction.marks) == ("round r: agreed by ana,ben", {0: "right"})
        assert store.disputed_items("r") == []
    else:
        assert store.disputed_items("r") == [queue[0]] and store.corrections(judgment_id=queue[0]) == []


@pytest.mark.parametrize(("by", "error"), [
    pytest.param("ana", "'ana' is reviewer, and only a adjudicator or admin may adjudicate", id="reviewer"),
    pytest.param("zed", "'zed' is not a reviewer in this store", id="unknown"),
])
def test_only_an_adjudicator_decides(team, by, error):
    store, queue = team
    store.open_round(RoundConfig(name="r", overlap=2, top=1), opened_by="t")
    for who, verdict in (("ana", 1), ("ben", 2)):
        store.take_round_item("r", reviewer=who)
        store.answer_round_item("r", queue[0], reviewer=who, verdict=verdict)
    with pytest.raises(RoleError, match=error):
        store.adjudicate("r", queue[0], by=by, verdict=2)
    with pytest.raises(RoleError, match="only an adjudicator or admin may see"):
        RoundService(store).adjudication_queue("r", by=by)
    [disputed] = RoundService(store).adjudication_queue("r", by="dee")
    assert [a.verdict for a in disputed.answers] == [1, 2]
    decided = store.adjudicate("r", queue[0], by="dee", verdict=2, marks={0: "wrong"})
    ana = next(a for a in disputed.answers if a.reviewer == "ana")
    assert (decided.kind, decided.decided_by, decided.overruled, decided.agreement) == ("adjudicated", "dee",
                                                                                         (ana.id,), 0.0)
    [correction] = store.corrections(judgment_id=queue[0])
    assert (correction.verdict, correction.author, correction.marks) == (2, "dee", {0: "wrong"})
    with pytest.raises(InputError, match="is not waiting for an adjudicator: it is labelled already"):
        store.adjudicate("r", queue[0], by="dee", verdict=1)


@pytest.mark.parametrize(("rule", "items"), [
    # item 0 agreed by both (agreement 1.0), item 1 adjudicated (0.0), item 2 disputed (no label: never frozen)
    pytest.param(SnapshotRule(), {0, 1}, id="agreed-or-adjudicated"),
    pytest.param(SnapshotRule(labels="agreed"), {0}, id="agreed-only"),
    pytest.param(SnapshotRule(labels="adjudicated"), {1}, id="adjudicated-only"),
    pytest.param(SnapshotRule(min_agreement=0.5), {0}, id="min-agreement"),
])
def test_a_snapshot_by_rule_freezes_only_what_the_rule_takes_and_records_it(team, rule, items):
    store, queue = team
    store.correct(queue[5], verdict=1, author="outside the round")  # a plain correction: never taken by a rule
    store.open_round(RoundConfig(name="r", overlap=2, top=3), opened_by="t")
    for who, verdicts in (("ana", (1, 1, 1)), ("ben", (1, 2, 2))):
        for k in range(3):
            store.take_round_item("r", reviewer=who)
            store.answer_round_item("r", queue[k], reviewer=who, verdict=verdicts[k])
    store.adjudicate("r", queue[1], by="root", verdict=2)
    snap = store.snapshot_by_rule("s", rule=rule)
    members = store.snapshot_members(snap.id)
    judged = {e.judgment_id for e in store.examples("preference", limit=None) if e.id in members["preference"]}
    assert judged == {queue[k] for k in items}
    assert snap.rule == rule.to_dict() and store.verify_snapshot(snap.id)


@pytest.mark.parametrize(("rule", "error"), [
    pytest.param({"labels": "most"}, "labels must be one of", id="unknown-labels"),
    pytest.param({"min_agreement": 1.5}, "min_agreement must be a share from 0 to 1", id="share-above-one"),
    pytest.param({"min_agreement": float("nan")}, "min_agreement must be a share", id="nan"),
])
def test_a_bad_snapshot_rule_is_refused_when_made(rule, error):
    with pytest.raises(ConfigError, match=error):
        SnapshotRule(**rule)
