"""Evaluation runs in the store: repository functions (take a session, never commit) and `EvalStore`,
one transaction per call over a `JudgmentStore`. Running, reporting and comparing runs is the shell's
(`reflectrm_app.evaluations.Evaluations`): the store only keeps them.

A run is keyed by what decides its results (benchmark, data, subset, limit, strategies, orders,
too-long policy, judge config, model and revision): the same command again resumes the same run and
judges only pairs not stored yet. Each batch's judgments and items are written in one transaction.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from reflectrm_db import models as m
from reflectrm_db import repository
from reflectrm_db.types import utcnow
from reflectrm.core.types import Judgment, PreferencePair
from reflectrm.errors import InputError
from reflectrm.eval.scoring import Batch, ItemResult


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalRunRecord:
    """A stored evaluation run."""

    id: int
    benchmark: str
    data: str
    partial: str
    model: str
    model_revision: str
    config: Mapping[str, Any]
    status: str
    items_total: int
    items_done: int
    metrics: Mapping[str, Any]
    error: str
    created_at: datetime
    finished_at: datetime | None


# --- repository functions --------------------------------------------------------------------------


def start_run(session: Session, *, run_key: str, values: Mapping[str, Any]) -> tuple[int, bool]:
    """The run with `run_key` (marked running again: resumed) or a new one. Returns (id, resumed)."""
    existing = session.execute(select(m.EvalRun.id).where(m.EvalRun.run_key == run_key)).scalar_one_or_none()
    if existing is not None:
        session.execute(update(m.EvalRun).where(m.EvalRun.id == existing)
                        .values(status="running", error="", updated_at=utcnow(), finished_at=None))
        return existing, True
    row = m.EvalRun(run_key=run_key, status="running", metrics={}, updated_at=utcnow(), **values)
    session.add(row)
    session.flush()
    return row.id, False


def runs_by_key(session: Session, *, run_keys: list[str]) -> dict[str, int]:
    """The ids of the runs with these keys (a key no run has is left out)."""
    rows = session.execute(select(m.EvalRun.run_key, m.EvalRun.id).where(m.EvalRun.run_key.in_(run_keys)))
    return {key: run_id for key, run_id in rows}


def done_item_ids(session: Session, *, run_id: int) -> set[str]:
    return set(session.execute(select(m.EvalItem.item_id).where(m.EvalItem.run_id == run_id).distinct()).scalars())


def add_batch(session: Session, *, run_id: int, batch: Batch) -> None:
    """Store a batch's judgments (both orders linked as twins) and every item, pointing at its judgment."""
    twins: dict[tuple[str, str], dict[bool, tuple[ItemResult, Judgment]]] = defaultdict(dict)
    for item, judgment in batch:
        if judgment is not None:
            twins[(item.item_id, item.strategy)][item.swapped] = (item, judgment)
    ids: dict[tuple[str, str, bool], int] = {}
    for (item_id, strategy), orders in twins.items():
        both = False in orders and True in orders
        ordered = [orders[s] for s in (False, True) if s in orders]
        stored = repository.add_judgments(session, judgments=[j for _, j in ordered], swapped=both)
        for (item, _), jid in zip(ordered, stored):
            ids[(item_id, strategy, item.swapped)] = jid
    rows = [_item_values(item, run_id, ids.get((item.item_id, item.strategy, item.swapped))) for item, _ in batch]
    if rows:
        session.execute(m.EvalItem.__table__.insert(), rows)
    session.execute(update(m.EvalRun).where(m.EvalRun.id == run_id).values(updated_at=utcnow()))


def _item_values(item: ItemResult, run_id: int, judgment_id: int | None) -> dict[str, Any]:
    values = {k: v for k, v in asdict(item).items() if k != "judgment_id"}
    confidence = values["anchor_confidence"]
    values["anchor_confidence"] = confidence if confidence is not None and math.isfinite(confidence) else None
    return {**values, "meta": dict(item.meta), "run_id": run_id, "judgment_id": judgment_id, "created_at": utcnow()}


def get_items(session: Session, *, run_id: int) -> list[ItemResult]:
    rows = session.execute(select(m.EvalItem.__table__).where(m.EvalItem.run_id == run_id).order_by(m.EvalItem.id))
    keep = set(ItemResult.__dataclass_fields__)
    return [ItemResult(**{k: v for k, v in row._mapping.items() if k in keep}) for row in rows]


def evaluated_pairs(session: Session) -> list[PreferencePair]:
    """Every pair some evaluation run judged (in its own order): what training must not learn from, or the
    runs that measured it would measure what was trained on."""
    stmt = (select(m.Judgment.pair_id).join(m.EvalItem, m.EvalItem.judgment_id == m.Judgment.id)
            .distinct().order_by(m.Judgment.pair_id))
    ids = list(session.scalars(stmt))
    pairs = repository.get_pairs(session, pair_ids=ids)
    return [pairs[i] for i in ids]


def mark_interrupted(session: Session, *, error: str) -> list[int]:
    """Runs still marked running (their process ended without finishing them) marked interrupted; their ids."""
    ids = list(session.scalars(select(m.EvalRun.id).where(m.EvalRun.status == "running")))
    if ids:
        session.execute(update(m.EvalRun).where(m.EvalRun.id.in_(ids))
                        .values(status="interrupted", error=error, updated_at=utcnow()))
    return ids


def finish_run(session: Session, *, run_id: int, status: str, metrics: Mapping[str, Any] | None = None,
               error: str = "") -> None:
    values: dict[str, Any] = {"status": status, "error": error, "updated_at": utcnow()}
    if metrics is not None:
        values["metrics"] = dict(metrics)
    if status == "completed":
        values["finished_at"] = utcnow()
    session.execute(update(m.EvalRun).where(m.EvalRun.id == run_id).values(**values))


def get_run(session: Session, *, run_id: int) -> EvalRunRecord:
    row = session.get(m.EvalRun, run_id)
    if row is None:
        raise InputError(f"evaluation run {run_id} does not exist: list runs with `reflectrm eval --list`")
    return _record(session, row)


def list_runs(session: Session, *, limit: int = 100) -> list[EvalRunRecord]:
    rows = session.execute(select(m.EvalRun).order_by(m.EvalRun.id.desc()).limit(limit)).scalars()
    return [_record(session, r) for r in rows]


def _record(session: Session, row: m.EvalRun) -> EvalRunRecord:
    done = len(session.execute(select(m.EvalItem.item_id, m.EvalItem.swapped).where(m.EvalItem.run_id == row.id)
                               .distinct()).all())
    return EvalRunRecord(id=row.id, benchmark=row.benchmark, data=row.data, partial=row.partial, model=row.model,
                         model_revision=row.model_revision, config=row.config, status=row.status,
                         items_total=row.items_total, items_done=done, metrics=row.metrics, error=row.error,
                         created_at=row.created_at, finished_at=row.finished_at)


class EvalStore:
    """Evaluation runs kept in a `JudgmentStore`: each method is one transaction."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def start(self, *, run_key: str, values: Mapping[str, Any]) -> tuple[int, bool]:
        """(run id, whether it already existed) for the run with this key."""
        return self.store._write(lambda s: start_run(s, run_key=run_key, values=values))

    def runs_by_key(self, run_keys: list[str]) -> dict[str, EvalRunRecord]:
        """The runs with these keys, by key (one transaction: shards of one evaluation read together)."""
        def read(session: Session) -> dict[str, EvalRunRecord]:
            ids = runs_by_key(session, run_keys=run_keys)
            return {key: get_run(session, run_id=run_id) for key, run_id in ids.items()}
        return self.store._read(read)

    def done_item_ids(self, run_id: int) -> set[str]:
        return self.store._read(lambda s: done_item_ids(s, run_id=run_id))

    def add_batch(self, run_id: int, batch: Batch) -> None:
        """A batch's judgments and items, in one transaction."""
        self.store._write(lambda s: add_batch(s, run_id=run_id, batch=batch))

    def finish(self, run_id: int, *, status: str, metrics: Mapping[str, Any] | None = None, error: str = "") -> None:
        self.store._write(lambda s: finish_run(s, run_id=run_id, status=status, metrics=metrics, error=error))

    def mark_interrupted(self, *, error: str) -> list[int]:
        """Runs left "running" by a process that ended marked "interrupted" (call once at start-up)."""
        return self.store._write(lambda s: mark_interrupted(s, error=error))

    def evaluated_pairs(self) -> list[PreferencePair]:
        """The pairs evaluation runs judged (`evaluated_pairs`)."""
        return self.store._read(evaluated_pairs)

    def get(self, run_id: int) -> EvalRunRecord:
        return self.store._read(lambda s: get_run(s, run_id=run_id))

    def runs(self, *, limit: int = 100) -> list[EvalRunRecord]:
        return self.store._read(lambda s: list_runs(s, limit=limit))

    def items(self, run_id: int) -> list[ItemResult]:
        return self.store._read(lambda s: get_items(s, run_id=run_id))
