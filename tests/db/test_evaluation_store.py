"""Evaluation runs and items on SQLite and PostgreSQL: what is stored comes back, ties included."""

from __future__ import annotations

import json
from pathlib import Path

from reflectrm_app.services.evaluation import EvalRequest, Evaluations
from reflectrm_db.services import JudgmentStore
from reflectrm.backends.scripted import ScriptedBackend
from reflectrm.eval.runner import EvalPlan
from tests.eval.test_runner import CONFIG, _truthful


def test_items_round_trip_with_ties_skips_and_twins(store: JudgmentStore, tmp_path: Path) -> None:
    rows = [{"id": "a", "query": "q a", "response_1": "GOOD a", "response_2": "BAD a", "label": "A"},
            {"id": "t", "query": "q t", "response_1": "GOOD t", "response_2": "GOOD t too", "label": "tie"},
            {"id": "long", "query": "q long", "response_1": "GOOD " + "x" * 3000, "response_2": "BAD", "label": 1}]
    path = tmp_path / "d.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    evals = Evaluations(store)
    run = evals.run(EvalRequest(benchmark="file", data=path, plan=EvalPlan(strategies=("reflectrm",),
                                                                           both_orders=True)),
                    backend=ScriptedBackend(_truthful, max_context_chars=2000), config=CONFIG)
    items = {(i.item_id, i.swapped): i for i in evals.items(run.id)}
    assert set(items) == {(k, s) for k in ("a", "t", "long") for s in (False, True)}
    assert items[("t", False)].tie and items[("t", False)].label is None and items[("t", False)].correct is None
    assert items[("long", True)].skipped.startswith("too-long") and items[("long", True)].judgment_id is None
    assert (items[("a", False)].label, items[("a", True)].label) == (1, 2)
    assert items[("a", False)].anchor_confidence is not None and items[("a", False)].samples == CONFIG.n
    assert store.load(items[("a", False)].judgment_id).twin_id == items[("a", True)].judgment_id
    assert store.load(items[("t", False)].judgment_id).judgment.pair.tie  # the stored pair keeps its tie
    (listed,) = evals.runs()
    assert (listed.status, listed.items_done, listed.items_total, listed.metrics["ties"]) == ("completed", 6, 6, 1)
