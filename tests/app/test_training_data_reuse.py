"""The Train tab trains on a snapshot's rows as rendered now: an export is reused only when its rows are the same.

The trap: reusing an exported folder named by a hash that ignores the prompt template trains on stale
prompts, without a word, after a change to `reflectrm/core/prompts.py`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reflectrm_app.services import Services
from reflectrm_app.services.training import DATA_FOLDER
from reflectrm.core import prompts
from reflectrm.demo.tasks import make_pairs
from reflectrm.training.data import read_examples, snapshot_hash
from tests.app.test_training import open_services


@pytest.fixture
def services(tmp_path: Path):
    services = open_services(f"sqlite:///{tmp_path / 'app.db'}", tmp_path / "runs")
    for p in make_pairs(2, seed=7, source="demo-arith"):
        result = services.judging.judge(p)
        services.review.correct(result.judgment_id, verdict=p.label, author="tester")
    services.curation.snapshot("s1")
    yield services
    services.close()


def test_an_export_is_reused_only_while_its_rows_are_the_same(services: Services, monkeypatch):
    training = services.training
    snapshot = {s.name: s for s in services.curation.snapshots()}["s1"]
    first = training._snapshot_data(snapshot)
    assert snapshot_hash(first) == snapshot.content_hash and first.name.endswith(snapshot.content_hash[:12])
    assert training._snapshot_data(snapshot) == first  # same rows: the folder is reused
    original = prompts.build_prompt
    monkeypatch.setattr(prompts, "build_prompt", lambda *a, **k: [
        prompts.ChatMessage(m.role, "Be brief. " + m.content) for m in original(*a, **k)])
    second = training._snapshot_data(snapshot)
    assert second != first and snapshot_hash(second) != snapshot.content_hash
    assert all(e.prompt[0].content.startswith("Be brief. ") for e in read_examples(second))
    assert not any(e.prompt[0].content.startswith("Be brief. ") for e in read_examples(first))
    # no half-written export is left behind
    assert sorted(p.name for p in (first.parent).iterdir()) == sorted([first.name, second.name])
    assert first.parent.name == DATA_FOLDER
