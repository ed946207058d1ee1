"""Judgments come back from the store exactly as they were recorded, and the review queue orders them."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from reflectrm_db.services import JudgmentStore
from reflectrm.core.types import ParseStatus, PreferencePair, Rollout
from reflectrm.errors import InputError
from reflectrm.pipeline import rejudge
from tests.db.helpers import JudgeFn, make_pairs


@pytest.mark.parametrize(
    "strategy",
    ["reflectrm", "greedy", "majority", "majority@15", "confidence-weighted", "random-anchor", "random-winners"],
)
def test_a_recorded_judgment_loads_back_equal(store: JudgmentStore, judge_pairs: JudgeFn, strategy: str) -> None:
    judgments = judge_pairs(make_pairs(6), strategy=strategy)
    ids = store.record(judgments, swapped=False)
    loaded = store.load_many(ids)
    assert [s.judgment for s in loaded] == judgments
    assert [len(s.sample_ids) for s in loaded] == [len(j.rollouts) for j in judgments]


def test_round_trip_keeps_every_sample_confidence_and_reflection(store: JudgmentStore, judge_pairs: JudgeFn) -> None:
    judgments = judge_pairs(make_pairs(12))
    ids = store.record(judgments, swapped=False)
    for jid, original in zip(ids, judgments):
        back = store.load(jid).judgment
        assert back == original
        # the scripted judge makes empty outputs (confidence -inf), unparseable ones and reflections
        assert [r.confidence for r in back.rollouts] == [r.confidence for r in original.rollouts]
        assert back.reflections == original.reflections
    statuses = {r.status for j in judgments for r in j.rollouts}
    assert {ParseStatus.OK, ParseStatus.EMPTY, ParseStatus.NO_RESULT} <= statuses
    assert any(r.confidence == -math.inf for j in judgments for r in j.rollouts)
    assert any(j.reflections for j in judgments)
    counts = store.counts()
    assert counts["samples"] == sum(len(j.rollouts) for j in judgments)
    assert counts["reflections"] == sum(len(j.reflections) for j in judgments)


def test_a_rejudged_record_with_greedy_and_sampled_rollouts_keeps_their_order(
    store: JudgmentStore, judge_pairs: JudgeFn, scripted_backend
) -> None:
    # Greedy first, then 8 samples: indices 0 repeat (greedy 0 and sample 0), so order is by position.
    [greedy] = judge_pairs(make_pairs(1), strategy="greedy")
    both = rejudge(greedy, "reflectrm", scripted_backend)
    assert [r.index for r in both.rollouts].count(0) == 2
    [jid] = store.record([both], swapped=False)
    assert store.load(jid).judgment == both


def test_an_abstention_round_trips(store: JudgmentStore) -> None:
    pair = make_pairs(1)[0]
    rollout = Rollout(
        index=0,
        text="",
        analysis="",
        prediction=None,
        status=ParseStatus.EMPTY,
        confidence=-math.inf,
        num_tokens=0,
        finish_reason="length",
    )
    from reflectrm.core.types import Judgment

    judgment = Judgment(
        pair=pair,
        strategy="majority",
        rollouts=(rollout,),
        verdict=None,
        abstain_reason="no parseable output",
        config={"seed": 3},
        seed=3,
    )
    [jid] = store.record([judgment], swapped=False)
    assert store.load(jid).judgment == judgment


def test_swapped_judgments_are_linked_both_ways(store: JudgmentStore, judge_pairs: JudgeFn) -> None:
    judgments = judge_pairs(make_pairs(3), swap=True)
    ids = store.record(judgments, swapped=True)
    for k in range(0, 6, 2):
        original, swapped = store.load(ids[k]), store.load(ids[k + 1])
        assert (original.twin_id, swapped.twin_id) == (ids[k + 1], ids[k])
        assert (original.swapped, swapped.swapped) == (False, True)
        assert swapped.judgment.pair == original.judgment.pair.swapped()


def test_swapped_record_rejects_judgments_that_are_not_two_orders(store: JudgmentStore, judge_pairs: JudgeFn) -> None:
    judgments = judge_pairs(make_pairs(2))
    with pytest.raises(InputError, match="not the two orders"):
        store.record(judgments, swapped=True)
    with pytest.raises(InputError, match="pairs"):
        store.record(judgments[:1], swapped=True)
    assert store.counts()["judgments"] == 0


def test_identical_pairs_are_stored_once_and_different_labels_are_kept_apart(
    store: JudgmentStore, judge_pairs: JudgeFn
) -> None:
    pair = make_pairs(1)[0]
    unlabelled = replace(pair, label=None, id="", source="")  # the same pair, knowing less about it
    relabelled = replace(pair, label=2)
    judgments = judge_pairs([pair, pair, unlabelled, relabelled])
    ids = store.record(judgments, swapped=False)
    loaded = store.load_many(ids)
    assert loaded[0].pair_id == loaded[1].pair_id == loaded[2].pair_id != loaded[3].pair_id
    assert [loaded[k].judgment.pair.label for k in (2, 3)] == [1, 2]  # the stored pair's label, and the other one
    assert store.counts()["pairs"] == 2


def test_load_of_a_missing_judgment_names_it(store: JudgmentStore) -> None:
    with pytest.raises(InputError, match="judgment 999 does not exist"):
        store.load(999)


def test_review_queue_puts_disagreements_first_then_low_confidence(store: JudgmentStore, judge_pairs: JudgeFn) -> None:
    pairs = make_pairs(10, label=1) + make_pairs(10, prefix="q", label=2)
    judgments = judge_pairs(pairs, swap=True)
    ids = store.record(judgments, swapped=True)
    queue = store.review_queue(limit=100)
    assert sorted(s.id for s in queue) == sorted(ids)
    scores = [len(s.flags) for s in queue]
    assert scores == sorted(scores, reverse=True)
    assert scores[0] > 0 and scores[-1] < scores[0]
    by_id = {s.id: s for s in queue}
    for jid, j in zip(ids, judgments):
        s = by_id[jid]
        assert ("label_disagrees" in s.flags) == (j.verdict is not None and j.verdict != j.pair.label)
        assert ("abstained" in s.flags) == (j.verdict is None)
    for k in range(0, len(ids), 2):  # a flipped audit flags both orders
        a, b = judgments[k], judgments[k + 1]
        flipped = a.verdict is not None and b.verdict is not None and a.verdict == b.verdict
        assert ("flipped" in by_id[ids[k]].flags) == flipped == ("flipped" in by_id[ids[k + 1]].flags)
    for score in set(scores):  # within a score, lowest anchor confidence first (None = -inf first)
        conf = [
            -math.inf if s.anchor_confidence is None else s.anchor_confidence for s in queue if len(s.flags) == score
        ]
        assert conf == sorted(conf)


def test_review_queue_leaves_out_corrected_judgments_unless_asked(store: JudgmentStore, judge_pairs: JudgeFn) -> None:
    ids = store.record(judge_pairs(make_pairs(3)), swapped=False)
    correction = store.correct(ids[0], verdict=1, author="ana", seed=1)
    assert [s.id for s in store.review_queue()].count(ids[0]) == 0
    everything = {s.id: s for s in store.review_queue(include_corrected=True)}
    assert everything[ids[0]].correction_id == correction.id
    assert everything[ids[1]].correction_id is None


def test_pairs_list_returns_stored_pairs(store: JudgmentStore) -> None:
    pairs = make_pairs(3)
    report = store.add_pairs(pairs)
    assert (report.added, report.already_present) == (3, 0)
    assert [p.pair for p in store.list_pairs(source="tests")] == pairs
    again = store.add_pairs([*pairs, PreferencePair.from_query("new?", "a", "b")])
    assert (again.added, again.already_present) == (1, 3)
