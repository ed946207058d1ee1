"""Evaluation runs in the store: repository functions (take a session, never commit) and `Evaluations`,
the service that runs, resumes, reports and compares them over a `JudgmentStore`.

    evals = Evaluations(store)
    run = evals.run(EvalRequest(benchmark="judgebench", data=Path("data"), strategies=("reflectrm", "greedy")),
                    backend=backend, config=JudgeConfig())
    evals.report(run.id); evals.compare(run_a, run_b)

A run is keyed by what decides its results (benchmark, data, subset, limit, strategies, orders,
too-long policy, judge config, model and revision): the same command again resumes the same run and
judges only pairs not stored yet. Each batch's judgments and items are written in one transaction.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from db import models as m
from db import repository
from db.types import utcnow
from reflectrm.core.config import JudgeConfig
from reflectrm.core.types import Judgment, PreferencePair
from reflectrm.errors import InputError
from reflectrm.eval.benchmarks import Benchmark, load_benchmark
from reflectrm.eval.benchmarks import select as select_pairs
from reflectrm.eval.metrics import mcnemar_exact, paired_bootstrap
from reflectrm.eval.readers import read_pairs
from reflectrm.eval.runner import Batch, EvalPlan, evaluate
from reflectrm.eval.scoring import ItemResult, build_report


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


# --- the service -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalRequest:
    """What to evaluate (everything but the model and judge config).

    Attributes:
        benchmark: a `BENCHMARKS` name, or "file" for any labelled file (`data`, `mapping`, `labels`).
        data: local file or folder; None reads the Hub copy.
        subset: keep one subset (or a prefix ending in '/').
        limit: at most this many units (pairs, or best-of-N groups), drawn with `seed`.
        mapping / labels: the generic reader's column mapping and label scheme (benchmark "file").
        plan: strategies, orders, too-long policy, batch size.
        seed: the draw for `limit` (and the bootstrap).
    """

    benchmark: str
    data: Path | None = None
    subset: str | None = None
    limit: int | None = None
    mapping: Mapping[str, str] = field(default_factory=dict)
    labels: str = "auto"
    plan: EvalPlan = field(default_factory=EvalPlan)
    seed: int = 0
    pairs: tuple[PreferencePair, ...] = ()  # given pairs (a stored data set) instead of reading `data`

    def load(self) -> Benchmark:
        if self.pairs:
            bench = Benchmark(name=self.benchmark, pairs=self.pairs, source=self.benchmark)
        elif self.benchmark == "file":
            if self.data is None:
                raise InputError("--benchmark file needs --data PATH: the labelled file to evaluate on")
            pairs = read_pairs(self.data, mapping=self.mapping, labels=self.labels)
            bench = Benchmark(name=f"file:{self.data.name}", pairs=tuple(pairs), source=str(self.data))
        else:
            bench = load_benchmark(self.benchmark, self.data)
        return select_pairs(bench, subset=self.subset, limit=self.limit, seed=self.seed)

    def to_dict(self) -> dict[str, Any]:
        return {"benchmark": self.benchmark, "data": str(self.data.resolve()) if self.data else "", "subset": self.subset or "",
                "limit": self.limit, "mapping": dict(self.mapping), "labels": self.labels, "seed": self.seed,
                "strategies": list(self.plan.strategies), "both_orders": self.plan.both_orders,
                "too_long": self.plan.too_long}


class Evaluations:
    """Evaluation runs over a `JudgmentStore` (one transaction per user action or per batch)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def run(self, request: EvalRequest, *, backend: Any, config: JudgeConfig,
            should_stop: Callable[[], bool] = lambda: False,
            progress: Callable[[int, int], None] | None = None,
            stopped_by: tuple[type[BaseException], ...] = (KeyboardInterrupt,)) -> EvalRunRecord:
        """Run (or resume) an evaluation; stopped runs keep what was stored and resume on the same request.

        An exception of a `stopped_by` type (Ctrl-C, the app's Stop) marks the run stopped, any other failed;
        either is raised again after the batches already stored are kept.
        """
        bench = request.load()
        settings = {**request.to_dict(), "scoring": bench.scoring, "judge": config.to_dict()}
        key = _run_key(settings, backend)
        values = {"model": backend.model_id, "model_revision": backend.model_revision, "benchmark": bench.name,
                  "data": bench.source, "partial": bench.partial, "config": settings,
                  "items_total": len(bench.pairs) * (2 if request.plan.both_orders else 1)}
        run_id, _ = self.store._write(lambda s: start_run(s, run_key=key, values=values))
        done = self.store._read(lambda s: done_item_ids(s, run_id=run_id))
        try:
            for batch in evaluate(bench.pairs, backend, config, plan=request.plan, done=done, meta=bench.meta,
                                  should_stop=should_stop, progress=progress):
                self.store._write(lambda s, b=batch: add_batch(s, run_id=run_id, batch=b))
        except BaseException as exc:
            status, error = ("stopped" if isinstance(exc, stopped_by) else "failed"), str(exc)[:2000]
            self.store._write(lambda s: finish_run(s, run_id=run_id, status=status, error=error))
            raise
        stopped = should_stop()
        metrics = self.report(run_id, bench=bench)
        self.store._write(lambda s: finish_run(s, run_id=run_id, status="stopped" if stopped else "completed",
                                               metrics=metrics))
        return self.get(run_id)

    def get(self, run_id: int) -> EvalRunRecord:
        return self.store._read(lambda s: get_run(s, run_id=run_id))

    def runs(self, *, limit: int = 100) -> list[EvalRunRecord]:
        return self.store._read(lambda s: list_runs(s, limit=limit))

    def items(self, run_id: int) -> list[ItemResult]:
        return self.store._read(lambda s: get_items(s, run_id=run_id))

    def report(self, run_id: int, *, bench: Benchmark | None = None) -> dict[str, Any]:
        """The report of what the run has stored so far."""
        run = self.get(run_id)
        scoring = bench.scoring if bench else str(run.config.get("scoring", "micro"))
        report = build_report(self.items(run_id), benchmark=run.benchmark, scoring=scoring, partial=run.partial,
                              config=run.config, seed=int(run.config.get("seed", 0)))
        report.update(run_id=run_id, model=run.model, model_revision=run.model_revision, status=run.status,
                      items_total=run.items_total)
        return report

    def compare(self, run_a: int, run_b: int, *, strategy: str | None = None,
                strategy_b: str | None = None) -> dict[str, Any]:
        """Paired per-item comparison of two runs: McNemar exact and a paired bootstrap of B - A, per subset.

        With `strategy_b`, run A's `strategy` is compared with run B's `strategy_b` (the same run may be
        given twice: "does reflectrm beat majority@15 on the same pairs?").
        """
        items_a, items_b = self.items(run_a), self.items(run_b)
        if strategy_b is not None:
            if strategy is None:
                raise InputError("--strategy-b compares against --strategy: give both")
            name = f"{strategy} vs {strategy_b}"
            items_a = [replace(i, strategy=name) for i in items_a if i.strategy == strategy]
            items_b = [replace(i, strategy=name) for i in items_b if i.strategy == strategy_b]
            strategy = name
        return compare_items(items_a, items_b, strategy=strategy, run_a=run_a, run_b=run_b)


def _run_key(settings: Mapping[str, Any], backend: Any) -> str:
    payload = json.dumps([settings, backend.name, backend.model_id, backend.model_revision], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def compare_items(items_a: Iterable[ItemResult], items_b: Iterable[ItemResult], *, strategy: str | None,
                  run_a: int, run_b: int) -> dict[str, Any]:
    """Per strategy and subset: pairs both runs scored, accuracies, discordant counts, McNemar p, B - A interval.

    The unit is a pair (its two orders are not independent items): "overall" and the subsets use the order
    as given; "both orders" (when both runs judged both) counts a pair right only if right in both.
    """
    a, b = _outcomes(items_a), _outcomes(items_b)
    shared = sorted(k for k in a.keys() & b.keys() if strategy is None or k[0] == strategy)
    if not shared:
        raise InputError(f"runs {run_a} and {run_b} share no scored items: compare runs on the same benchmark")
    out: dict[str, Any] = {"run_a": run_a, "run_b": run_b, "strategies": {}}
    for name in sorted({k[0] for k in shared}):
        keys = [k for k in shared if k[0] == name]
        groups: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for k in keys:
            groups["overall"].append(k)
            groups[a[k][0]].append(k)
        result = {g: _paired([a[k][1] for k in ks], [b[k][1] for k in ks]) for g, ks in groups.items()}
        both = [k for k in keys if a[k][2] is not None and b[k][2] is not None]
        if both:
            result["both orders"] = _paired([a[k][2] for k in both], [b[k][2] for k in both])
        out["strategies"][name] = result
    return out


def _outcomes(items: Iterable[ItemResult]) -> dict[tuple[str, str], tuple[str, float, float | None]]:
    """(strategy, pair id) -> (subset, right as given, right in both orders or None without the swap)."""
    given: dict[tuple[str, str], ItemResult] = {}
    swapped: dict[tuple[str, str], ItemResult] = {}
    for i in items:
        if i.scored:
            (swapped if i.swapped else given)[(i.strategy, i.item_id)] = i
    out = {}
    for key, item in given.items():
        twin = swapped.get(key)
        both = None if twin is None else float(bool(item.correct and twin.correct))
        out[key] = (item.subset, float(bool(item.correct)), both)
    return out


def _paired(xa: Sequence[float], xb: Sequence[float]) -> dict[str, Any]:
    only_a = sum(1 for x, y in zip(xa, xb) if x > y)
    only_b = sum(1 for x, y in zip(xa, xb) if y > x)
    return {"n": len(xa), "accuracy_a": sum(xa) / len(xa), "accuracy_b": sum(xb) / len(xb),
            "only_a": only_a, "only_b": only_b, "mcnemar_p": mcnemar_exact(only_a, only_b),
            "difference": paired_bootstrap(xa, xb).to_dict()}
