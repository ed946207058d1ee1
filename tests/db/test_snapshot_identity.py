"""A snapshot's identity is the hash of its rows exactly as trained on (the library's recipe renders them).

The trap: a hash over abstract example contents ignores the prompt template, so after a change to
`reflectrm/core/prompts.py` the same hash names rows that now render differently.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reflectrm_db.services import JudgmentStore
from reflectrm.core import prompts
from reflectrm.core.types import PreferencePair
from reflectrm.pipeline import judge
from reflectrm.training import recipe
from reflectrm.training.data import read_examples, snapshot_hash
from tests.conftest import response_output
from tests.db.helpers import scripted_rollouts

OUTPUTS = [response_output(1, "a0"), response_output(2, "a1"), response_output(1, "a2"), response_output(2, "a3")]


@pytest.fixture
def corrected(store: JudgmentStore) -> JudgmentStore:
    pair = PreferencePair.from_query("Which answer is right?", "first", "second", label=1, id="c-1")
    [jid] = store.record([judge(pair, scripted_rollouts(OUTPUTS))], swapped=False)
    store.correct(jid, verdict=1, author="ana", seed=3)
    return store


def changed_template(monkeypatch: pytest.MonkeyPatch) -> None:
    """The prompt builder as a maintainer might change it: other instructions, everything else equal."""
    original = prompts.build_prompt

    def build_prompt(condition, candidates, *, task, control_suffix=prompts.DEFAULT_CONTROL_SUFFIX):
        messages = original(condition, candidates, task=task, control_suffix=control_suffix)
        return [prompts.ChatMessage(m.role, "Be brief. " + m.content) for m in messages]

    monkeypatch.setattr(prompts, "build_prompt", build_prompt)


def test_a_template_change_gives_a_new_snapshot_identity(corrected: JudgmentStore, monkeypatch, tmp_path: Path):
    before = corrected.snapshot("before")
    assert corrected.snapshot("again").content_hash == before.content_hash  # same rows, same identity
    changed_template(monkeypatch)
    after = corrected.snapshot("after")
    assert (after.num_preference, after.num_reflection) == (before.num_preference, before.num_reflection)
    assert after.content_hash != before.content_hash
    # the old snapshot no longer renders to what it froze; the new one does
    assert not corrected.verify_snapshot(before.id) and corrected.verify_snapshot(after.id)
    corrected.export("training", fmt="hf", out=tmp_path / "after", snapshot="after")
    assert all(e.prompt[0].content.startswith("Be brief. ") for e in read_examples(tmp_path / "after"))


def test_the_store_hash_is_the_hash_of_the_exported_rows(corrected: JudgmentStore, tmp_path: Path):
    """One hash: the store's snapshot id equals the hash of its `training` export computed from the files."""
    snap = corrected.snapshot("s")
    corrected.export("training", fmt="hf", out=tmp_path / "hf", snapshot="s")
    corrected.export("training", fmt="jsonl", out=tmp_path / "rows.jsonl", snapshot="s")
    assert snapshot_hash(tmp_path / "hf") == snap.content_hash
    rows = [e.to_row() for e in read_examples(tmp_path / "rows.jsonl")]
    assert recipe.rows_hash(rows) == snap.content_hash
    assert {r["task"] for r in rows} == {"response", "analysis"}


def test_store_examples_are_the_recipes_examples(corrected: JudgmentStore, tmp_path: Path):
    """The store derives with the recipe: its rows equal the recipe's rendering of the same analyses."""
    corrected.export("training", fmt="jsonl", out=tmp_path / "rows.jsonl")
    stored = read_examples(tmp_path / "rows.jsonl")
    pair = PreferencePair.from_query("Which answer is right?", "first", "second", label=1, id="c-1")
    analyses = [recipe.Analysis(k, f"a{k}", 1 if k % 2 == 0 else 2) for k in range(4)]
    derived = recipe.derive_examples(pair, analyses, verdict=1, max_pairs=4, seed=3,
                                     origins=("correction", "correction"))
    # the stored judgment has 8 samples (the 4 outputs twice): repeated texts count once, so the same pairs
    assert stored == [derived.preference, *(e for _, e in derived.reflection)]
    assert len(derived.reflection) == 4
