"""The paper's recipe in the store: training examples from the judge's own judgments of labelled pairs
(`JudgmentStore.derive_from_labels`), the same examples `reflectrm build-data` makes from a benchmark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reflectrm_db.services import JudgmentStore
from reflectrm.core.config import JudgeConfig
from reflectrm.core.types import PreferencePair
from reflectrm.pipeline import judge_many
from reflectrm.training.data import DataConfig, examples_from_rollouts
from tests.conftest import response_output
from tests.db.helpers import make_pairs, scripted_rollouts

# eight samples: three right (label 1), three wrong, one unparseable, one empty: a mixed item
MIXED = [response_output(1, "a0"), response_output(1, "a1"), response_output(2, "a2"), response_output(2, "a3"),
         response_output(2, "a4"), "no verdict here", response_output(1, "a6"), ""]
ALL_RIGHT = [response_output(1, f"r{k}") for k in range(8)]
ALL_WRONG = [response_output(2, f"w{k}") for k in range(8)]


def judged(pairs: list[PreferencePair], outputs: list[str], *, strategy: str = "majority", swap: bool = False):
    expanded = [q for p in pairs for q in ((p, p.swapped()) if swap else (p,))]
    return list(judge_many(expanded, scripted_rollouts(outputs), JudgeConfig(strategy=strategy), batch_size=1))


def training_rows(store: JudgmentStore, tmp_path: Path, name: str = "rows") -> list[dict]:
    out = tmp_path / f"{name}.jsonl"
    store.export("training", fmt="jsonl", out=out)
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_labelled_judgments_give_exactly_the_examples_build_data_makes(store: JudgmentStore, tmp_path: Path) -> None:
    judgments = judged(make_pairs(3, prefix="mixed"), MIXED)
    store.record(judgments, swapped=False)
    report = store.derive_from_labels(seed=0)
    assert (report.judgments, report.easy, report.preference, report.reflection) == (3, 0, 3, 3)
    pref, refl, _ = examples_from_rollouts(judgments, config=DataConfig(judge=JudgeConfig(seed=0)))
    expected = {(json.dumps(e.to_row()["prompt"]), e.label, e.task.value) for e in pref + refl}
    rows = training_rows(store, tmp_path)
    assert {(json.dumps(r["prompt"]), r["label"], r["task"]) for r in rows} == expected
    assert {r["origin"] for r in rows} == {"label"}
    snapshot = store.snapshot("paper")
    assert (snapshot.num_preference, snapshot.num_reflection) == (3, 3)
    assert store.verify_snapshot(snapshot.id)  # the stored hashes are the hashes of the rows as rendered


def test_easy_items_give_nothing_and_all_wrong_ones_a_preference_example(store: JudgmentStore) -> None:
    store.record(judged(make_pairs(2, prefix="easy"), ALL_RIGHT), swapped=False)
    store.record(judged(make_pairs(2, prefix="hard"), ALL_WRONG), swapped=False)
    report = store.derive_from_labels()
    assert (report.judgments, report.easy, report.preference, report.reflection) == (4, 2, 2, 0)


def test_a_second_run_adds_only_what_is_new_and_keeps_exclusions(store: JudgmentStore) -> None:
    store.record(judged(make_pairs(2, prefix="first"), MIXED), swapped=False)
    first = store.derive_from_labels()
    [excluded] = [e.id for e in store.examples("reflection")][:1]
    store.exclude_examples("reflection", [excluded])
    again = store.derive_from_labels()
    assert (again.preference, again.reflection, again.already_present) == (0, 0, first.preference + first.reflection)
    assert [e.state for e in store.examples("reflection", states=None) if e.id == excluded] == ["excluded"]
    store.record(judged(make_pairs(1, prefix="later"), MIXED), swapped=False)
    later = store.derive_from_labels()
    assert (later.preference, later.reflection) == (1, 1)


def test_only_the_newest_judgment_in_the_pairs_own_order_counts(store: JudgmentStore) -> None:
    [pair] = make_pairs(1, prefix="twice")
    store.record(judged([pair], ALL_WRONG), swapped=False)
    # newest in the pair's order: every sample right, nothing to learn; its swapped twin, newer still, says
    # Response 1 where the label (seen swapped) is 2, all wrong: it would give an example if it were read
    store.record(judged([pair], ALL_RIGHT, swap=True), swapped=True)
    report = store.derive_from_labels()
    assert (report.judgments, report.easy, report.preference) == (1, 1, 0)


@pytest.mark.parametrize("strategy", ["greedy"])
def test_judgments_without_samples_and_unlabelled_pairs_are_not_read(store: JudgmentStore, strategy: str) -> None:
    store.record(judged(make_pairs(2, prefix="greedy"), MIXED, strategy=strategy), swapped=False)
    store.record(judged(make_pairs(2, prefix="unlabelled", label=None), MIXED), swapped=False)
    assert store.derive_from_labels().judgments == 0


def test_a_corrected_pair_keeps_only_its_correction(store: JudgmentStore) -> None:
    ids = store.record(judged(make_pairs(2, prefix="c"), MIXED), swapped=False)
    store.correct(ids[0], verdict=2, author="ana", seed=1)
    report = store.derive_from_labels()
    assert (report.judgments, report.corrected, report.preference) == (2, 1, 1)
    origins = {e.correction_id is None for e in store.examples("preference")}
    assert origins == {True, False}


def test_source_and_model_narrow_what_is_read(store: JudgmentStore) -> None:
    a = make_pairs(1, prefix="a")
    b = [PreferencePair.from_query("b question?", "x", "y", label=1, id="b-0", source="other")]
    store.record(judged(a + b, MIXED), swapped=False)
    assert store.derive_from_labels(source="other").judgments == 1
    assert store.derive_from_labels(model="no such model").judgments == 0
    assert store.derive_from_labels(source="tests").preference == 1
