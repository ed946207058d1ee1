"""Training runs in the store: recorded on a snapshot, updated as the app watches them, refused when malformed."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from sqlalchemy.exc import IntegrityError

from reflectrm_db.services import JudgmentStore
from reflectrm.errors import InputError


def test_a_run_is_recorded_on_its_snapshot_and_follows_its_folder(store: JudgmentStore) -> None:
    snap = store.snapshot("empty-but-named")
    run = store.add_training_run(snapshot_id=snap.id, base_model="demo", run_dir="/runs/r1",
                                 config={"max_steps": 3, "lora": False})
    assert (run.status, run.step, run.total_steps, run.snapshot_name, run.output_model) == (
        "starting", 0, None, "empty-but-named", "")
    assert run.active
    ended = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
    done = store.update_training_run(run.id, status="failed", step=2, total_steps=3, error="RuntimeError: boom",
                                     log_tail="Traceback ...\nRuntimeError: boom\n", metrics={"loss": 0.5},
                                     finished_at=ended)
    assert (done.status, done.step, done.total_steps, done.error, done.metrics) == (
        "failed", 2, 3, "RuntimeError: boom", {"loss": 0.5})
    assert done.finished_at == ended and not done.active
    assert done.updated_at >= run.updated_at
    assert store.training_run(run.id) == done
    assert [r.id for r in store.training_runs(statuses=["failed"])] == [run.id]
    assert store.training_runs(statuses=["running"]) == []


@pytest.mark.parametrize(
    "changes, fragment",
    [
        # what a run trains on, and where its folder is, never change after it started
        pytest.param({"run_dir": "/elsewhere"}, "cannot change", id="run-dir-fixed"),
        pytest.param({"base_model": "other"}, "cannot change", id="base-model-fixed"),
        # a status the app does not know would never leave the list of active runs
        pytest.param({"status": "paused"}, "must be one of", id="unknown-status"),
    ],
)
def test_updates_that_are_refused(store: JudgmentStore, changes: dict, fragment: str) -> None:
    run = store.add_training_run(snapshot_id=None, base_model="demo", run_dir="/runs/r2", config={})
    with pytest.raises(InputError, match=fragment):
        store.update_training_run(run.id, **changes)
    assert store.training_run(run.id) == run


def test_one_row_per_run_folder_and_unknown_runs_say_so(store: JudgmentStore) -> None:
    store.add_training_run(snapshot_id=None, base_model="demo", run_dir="/runs/same", config={})
    with pytest.raises(InputError, match="already recorded"):
        store.add_training_run(snapshot_id=None, base_model="demo", run_dir="/runs/same", config={})
    with pytest.raises(InputError, match="does not exist"):
        store.training_run(999)


def test_the_database_refuses_an_unknown_status_written_behind_the_store(store: JudgmentStore) -> None:
    from sqlalchemy import text

    run = store.add_training_run(snapshot_id=None, base_model="demo", run_dir="/runs/r3", config={})
    with pytest.raises(IntegrityError), store.engine.begin() as c:
        c.execute(text("UPDATE training_runs SET status = 'paused' WHERE id = :id"), {"id": run.id})
