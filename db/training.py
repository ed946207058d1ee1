"""Repository functions for training runs: `(session, *, ...)`, `select()`-based; they flush, never commit.

A run's folder (`reflectrm.training.runs`) is its live record; these rows are what the app copies
from it (state, step, closing figures, the log of a run that ended) so that runs can be listed,
and found again after a restart, without reading every folder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from reflectrm_db import models as m
from reflectrm_db.records import TrainingRunRecord
from reflectrm_db.types import utcnow
from reflectrm.errors import InputError

UPDATABLE = frozenset({"status", "step", "total_steps", "metrics", "error", "log_tail", "output_model", "config",
                       "finished_at"})
"""What a run's row may change after it is added (what it trains on and where its folder is stay)."""


def add_training_run(
    session: Session,
    *,
    snapshot_id: int | None,
    base_model: str,
    run_dir: str,
    config: Mapping[str, Any],
    status: str = "starting",
) -> int:
    """Insert a run; returns its id."""
    _check_status(status)
    if session.scalar(select(m.TrainingRun.id).where(m.TrainingRun.run_dir == run_dir)) is not None:
        raise InputError(f"a run in {run_dir} is already recorded: pick another run folder")
    now = utcnow()
    row = m.TrainingRun(snapshot_id=snapshot_id, base_model=base_model, output_model="", run_dir=run_dir,
                        config=dict(config), status=status, step=0, total_steps=None, metrics={}, error="",
                        log_tail="", created_at=now, updated_at=now, finished_at=None)
    session.add(row)
    session.flush()
    return row.id


def update_training_run(session: Session, *, run_id: int, changes: Mapping[str, Any]) -> None:
    """Change the `UPDATABLE` fields of a run (and its `updated_at`)."""
    unknown = sorted(set(changes) - UPDATABLE)
    if unknown:
        raise InputError(f"training run field {unknown[0]!r} cannot change: updatable fields are {sorted(UPDATABLE)}")
    if "status" in changes:
        _check_status(changes["status"])
    row = session.get(m.TrainingRun, run_id)
    if row is None:
        raise InputError(f"training run {run_id} does not exist: pick one from the list")
    for name, value in changes.items():
        setattr(row, name, dict(value) if name in ("metrics", "config") else value)
    row.updated_at = utcnow()
    session.flush()


def get_training_runs(
    session: Session, *, run_ids: Sequence[int] | None = None, statuses: Sequence[str] | None = None
) -> list[TrainingRunRecord]:
    """Runs by id (all when `run_ids` is None), optionally only those in `statuses`, oldest first."""
    stmt = (
        select(m.TrainingRun, m.DatasetSnapshot.name)
        .outerjoin(m.DatasetSnapshot, m.DatasetSnapshot.id == m.TrainingRun.snapshot_id)
        .order_by(m.TrainingRun.id)
    )
    if run_ids is not None:
        stmt = stmt.where(m.TrainingRun.id.in_(list(run_ids)))
    if statuses is not None:
        stmt = stmt.where(m.TrainingRun.status.in_(list(statuses)))
    return [_record(row, name) for row, name in session.execute(stmt)]


def _check_status(status: str) -> None:
    if status not in m.TRAINING_STATES:
        raise InputError(f"training run status must be one of {', '.join(m.TRAINING_STATES)}, got {status!r}")


def _record(row: m.TrainingRun, snapshot_name: str | None) -> TrainingRunRecord:
    return TrainingRunRecord(
        id=row.id, snapshot_id=row.snapshot_id, snapshot_name=snapshot_name or "", base_model=row.base_model,
        output_model=row.output_model, run_dir=row.run_dir, config=dict(row.config or {}), status=row.status,
        step=row.step, total_steps=row.total_steps, metrics=dict(row.metrics or {}), error=row.error,
        log_tail=row.log_tail, created_at=row.created_at, updated_at=row.updated_at, finished_at=row.finished_at,
    )
