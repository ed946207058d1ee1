"""From a correction to training data (the paper's reflection recipe with a human label), with
edits, withdrawals, exclusions and snapshots."""

from __future__ import annotations

import pytest

from reflectrm_db.curation import CorrectionExists
from reflectrm_db.derivation import Analysis, derive_reflection_pairs
from reflectrm_db.services import JudgmentStore
from reflectrm.core.types import PreferencePair
from reflectrm.errors import InputError
from reflectrm.pipeline import judge
from tests.conftest import response_output
from tests.db.helpers import make_pairs, scripted_rollouts

# Eight stage-1 outputs in sample order: three say 1, three say 2, one unparseable, one empty.
OUTPUTS = [
    response_output(1, "a0"),
    response_output(1, "a1"),
    response_output(2, "a2"),
    response_output(2, "a3"),
    response_output(2, "a4"),
    "no verdict here",
    response_output(1, "a6"),
    "",
]
SAYS_1, SAYS_2, UNPARSEABLE = {0, 1, 6}, {2, 3, 4}, 5


@pytest.fixture
def corrected_judgment(store: JudgmentStore) -> tuple[JudgmentStore, int]:
    """A stored judgment whose eight analyses are OUTPUTS; returns (store, judgment id)."""
    pair = PreferencePair.from_query("Which answer is right?", "first", "second", label=1, id="c-1")
    judgment = judge(pair, scripted_rollouts(OUTPUTS))
    assert [r.prediction for r in judgment.rollouts] == [1, 1, 2, 2, 2, None, 1, None]
    [jid] = store.record([judgment], swapped=False)
    return store, jid


def _critique_positions(store: JudgmentStore, jid: int, correction_id: int) -> list[tuple[int, int, int]]:
    """(critique 1 position, critique 2 position, label) of each active reflection pair of a correction."""
    position = {sid: k for k, sid in enumerate(store.load(jid).sample_ids)}
    return [
        (position[e.critiques[0]], position[e.critiques[1]], e.label)
        for e in store.examples("reflection", correction_id=correction_id)
    ]


@pytest.mark.parametrize(
    ("verdict", "marks", "max_pairs", "right", "wrong", "expected_pairs"),
    [
        pytest.param(1, {}, 4, SAYS_1, SAYS_2, 4, id="3x3-capped-at-4"),
        pytest.param(1, {}, 20, SAYS_1, SAYS_2, 9, id="3x3-uncapped"),
        pytest.param(2, {}, 20, SAYS_2, SAYS_1, 9, id="verdict-2-swaps-sides"),
        # a mark overrides the prediction: analysis 0 says 1 but a person marked it wrong
        pytest.param(1, {0: "wrong"}, 20, {1, 6}, {0, 2, 3, 4}, 8, id="mark-wrong-overrides"),
        # the unparseable output takes part only because it is marked
        pytest.param(1, {UNPARSEABLE: "right"}, 20, {0, 1, 5, 6}, SAYS_2, 12, id="mark-right-on-unparseable"),
        pytest.param(1, {}, 0, SAYS_1, SAYS_2, 0, id="no-reflection-pairs"),
    ],
)
def test_a_correction_derives_one_preference_example_and_reflection_pairs(
    corrected_judgment: tuple[JudgmentStore, int],
    verdict: int,
    marks: dict,
    max_pairs: int,
    right: set[int],
    wrong: set[int],
    expected_pairs: int,
) -> None:
    store, jid = corrected_judgment
    record = store.correct(jid, verdict=verdict, author="ana", marks=marks, max_pairs=max_pairs, seed=7)
    assert len(record.preference_example_ids) == 1
    [example] = store.examples("preference")
    assert (example.label, example.correction_id, example.judgment_id) == (verdict, record.id, jid)
    pairs = _critique_positions(store, jid, record.id)
    assert len(pairs) == len(record.reflection_pair_ids) == expected_pairs
    for c1, c2, label in pairs:
        good, bad = (c1, c2) if label == 1 else (c2, c1)
        assert good in right and bad in wrong
    assert len(set((min(a, b), max(a, b)) for a, b, _ in pairs)) == expected_pairs  # no pair twice
    assert record.marks == marks


def test_critique_order_is_random_but_reproducible_from_the_recorded_seed(
    corrected_judgment: tuple[JudgmentStore, int],
) -> None:
    store, jid = corrected_judgment
    record = store.correct(jid, verdict=1, author="ana", max_pairs=9, seed=12345)
    first = _critique_positions(store, jid, record.id)
    assert {label for _, _, label in first} == {1, 2}  # the correct analysis is shown first and second
    assert record.derivation_seed == 12345
    store.withdraw_correction(record.id, author="ana")
    again = store.correct(jid, verdict=1, author="ana", max_pairs=9, seed=12345)
    assert _critique_positions(store, jid, again.id) == first


def test_editing_a_correction_withdraws_what_no_longer_follows(corrected_judgment: tuple[JudgmentStore, int]) -> None:
    store, jid = corrected_judgment
    first = store.correct(jid, verdict=1, author="ana", note="looks right", seed=3)
    note_only = store.edit_correction(first.id, author="bo", note="checked twice")
    assert (note_only.preference_example_ids, note_only.reflection_pair_ids) == (
        first.preference_example_ids,
        first.reflection_pair_ids,
    )  # nothing derived changed
    assert (note_only.note, note_only.author, note_only.revision) == ("checked twice", "bo", 2)
    flipped = store.edit_correction(first.id, author="bo", verdict=2)
    assert flipped.verdict == 2 and flipped.note == "checked twice"
    assert set(flipped.preference_example_ids).isdisjoint(first.preference_example_ids)
    assert set(flipped.reflection_pair_ids).isdisjoint(first.reflection_pair_ids)
    assert [e.label for e in store.examples("preference")] == [2]
    withdrawn = store.examples("preference", states=["withdrawn"])
    assert [e.id for e in withdrawn] == list(first.preference_example_ids)
    assert len(store.examples("reflection", states=["withdrawn"])) == 4


def test_editing_marks_rederives_the_reflection_pairs(corrected_judgment: tuple[JudgmentStore, int]) -> None:
    store, jid = corrected_judgment
    record = store.correct(jid, verdict=1, author="ana", max_pairs=20, seed=3)
    assert len(record.reflection_pair_ids) == 9
    marked = store.edit_correction(record.id, author="ana", marks={0: "wrong", 2: "right"})
    # right = {1, 6, 2}, wrong = {0, 3, 4}
    assert len(marked.reflection_pair_ids) == 9 and marked.marks == {0: "wrong", 2: "right"}
    for c1, c2, label in _critique_positions(store, jid, record.id):
        good, bad = (c1, c2) if label == 1 else (c2, c1)
        assert good in {1, 2, 6} and bad in {0, 3, 4}
    cleared = store.edit_correction(record.id, author="ana", marks={})
    assert cleared.marks == {}


def test_withdrawing_a_correction_withdraws_everything_it_derived(
    corrected_judgment: tuple[JudgmentStore, int],
) -> None:
    store, jid = corrected_judgment
    record = store.correct(jid, verdict=1, author="ana", seed=3)
    gone = store.withdraw_correction(record.id, author="ana")
    assert not gone.active and gone.withdrawn_at is not None
    assert (gone.preference_example_ids, gone.reflection_pair_ids) == ((), ())
    assert store.examples("preference") == [] and store.examples("reflection") == []
    assert len(store.examples("reflection", states=["withdrawn"])) == 4
    with pytest.raises(InputError, match="withdrawn"):
        store.edit_correction(record.id, author="ana", verdict=2)
    with pytest.raises(InputError, match="withdrawn"):
        store.withdraw_correction(record.id, author="ana")
    assert store.correct(jid, verdict=2, author="ana").active  # a new correction may follow


def test_history_keeps_every_earlier_version(corrected_judgment: tuple[JudgmentStore, int]) -> None:
    store, jid = corrected_judgment
    record = store.correct(jid, verdict=1, author="ana", note="n1", marks={0: "right"}, seed=3)
    store.edit_correction(record.id, author="bo", verdict=2, note="n2")
    store.withdraw_correction(record.id, author="cy")
    out = store.corrections(judgment_id=jid)
    assert len(out) == 1 and out[0].revision == 3 and out[0].author == "cy"
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from reflectrm_db import models as m

    with Session(store.engine) as s:
        history = s.scalar(select(m.Correction.history))
    assert [(h["author"], h["verdict"], h["note"], h["marks"]) for h in history] == [
        ("ana", 1, "n1", {"0": "right"}),
        ("bo", 2, "n2", {"0": "right"}),
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"verdict": 3}, "verdict must be 1 or 2", id="bad-verdict"),
        pytest.param({"verdict": 1, "marks": {99: "right"}}, "no such analysis", id="mark-on-missing-sample"),
        pytest.param({"verdict": 1, "marks": {0: "good"}}, "'right' or 'wrong'", id="unknown-mark"),
        pytest.param({"verdict": 1, "max_pairs": -1}, "max_pairs", id="negative-max-pairs"),
    ],
)
def test_bad_corrections_are_refused_and_leave_nothing(
    corrected_judgment: tuple[JudgmentStore, int], kwargs: dict, message: str
) -> None:
    store, jid = corrected_judgment
    with pytest.raises(InputError, match=message):
        store.correct(jid, author="ana", **kwargs)
    assert store.counts()["corrections"] == 0 and store.counts()["preference_examples"] == 0


def test_one_active_correction_per_judgment(corrected_judgment: tuple[JudgmentStore, int]) -> None:
    store, jid = corrected_judgment
    first = store.correct(jid, verdict=1, author="ana")
    with pytest.raises(CorrectionExists, match=f"already has correction {first.id}") as refused:
        store.correct(jid, verdict=2, author="bo")
    assert refused.value.correction_id == first.id  # typed: a caller never parses the message
    edited = store.correct(jid, verdict=2, author="bo", edit_active=True)
    assert (edited.id, edited.verdict, edited.revision, edited.author) == (first.id, 2, 2, "bo")
    with pytest.raises(InputError, match="judgment 999 does not exist"):
        store.correct(999, verdict=2, author="bo")


def test_exclude_and_restore_examples_and_snapshots_skip_excluded(
    corrected_judgment: tuple[JudgmentStore, int],
) -> None:
    store, jid = corrected_judgment
    record = store.correct(jid, verdict=1, author="ana", seed=5)
    excluded = list(record.reflection_pair_ids[:2])
    assert store.exclude_examples("reflection", excluded) == 2
    assert store.exclude_examples("reflection", excluded) == 0  # already excluded
    snap = store.snapshot("first", note="two excluded")
    assert (snap.num_preference, snap.num_reflection) == (1, 2)
    assert store.snapshot_members(snap.id)["reflection"] == list(record.reflection_pair_ids[2:])
    assert store.restore_examples("reflection", excluded) == 2
    snap2 = store.snapshot("second")
    assert (snap2.num_preference, snap2.num_reflection) == (1, 4)
    assert snap2.content_hash != snap.content_hash
    assert store.verify_snapshot(snap.id) and store.verify_snapshot(snap2.id)
    # a snapshot is frozen: withdrawing the correction does not change what it holds
    store.withdraw_correction(record.id, author="ana")
    assert store.snapshot_members(snap.id)["reflection"] == list(record.reflection_pair_ids[2:])
    assert store.verify_snapshot(snap.id)
    with pytest.raises(InputError, match="withdrawn"):
        store.restore_examples("reflection", excluded)
    with pytest.raises(InputError, match="already exists"):
        store.snapshot("first")
    assert [s.name for s in store.snapshots()] == ["first", "second"]


def test_snapshot_hash_depends_on_contents_not_row_ids(store: JudgmentStore, judge_pairs) -> None:
    judgments = judge_pairs(make_pairs(2))
    a, b = store.record(judgments, swapped=False)
    store.correct(a, verdict=1, author="ana", seed=1)
    store.correct(b, verdict=2, author="ana", seed=1)
    one = store.snapshot("one")
    assert one.content_hash == store.snapshot("same-content").content_hash
    store.exclude_examples("preference", [store.examples("preference")[0].id])
    assert store.snapshot("less").content_hash != one.content_hash


def test_derivation_counts_repeated_analysis_texts_once() -> None:
    # Four right and four wrong outputs, but only two texts on each side: 2 x 2 distinct pairs.
    analyses = [Analysis(k, f"text {k % 4}", 1 if k % 2 == 0 else 2) for k in range(8)]
    pairs = derive_reflection_pairs(analyses, verdict=1, marks={}, max_pairs=10, seed=0)
    assert sorted((min(p.critique_1, p.critique_2), max(p.critique_1, p.critique_2)) for p in pairs) == [
        (0, 1),
        (0, 3),
        (1, 2),
        (2, 3),
    ]


def test_derivation_ignores_empty_analyses_even_when_marked() -> None:
    analyses = [Analysis(1, "good", 1), Analysis(2, "bad", 2), Analysis(3, "  ", 1)]
    pairs = derive_reflection_pairs(analyses, verdict=1, marks={3: "right"}, max_pairs=4, seed=0)
    assert {frozenset((p.critique_1, p.critique_2)) for p in pairs} == {frozenset({1, 2})}
