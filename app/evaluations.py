"""Evaluation runs kept in the store: what to evaluate (`EvalRequest`), and `Evaluations`, which runs, resumes,
reports and compares them over a `JudgmentStore`.

    evals = Evaluations(store)
    run = evals.run(EvalRequest(benchmark="judgebench", data=Path("data")), backend=backend, config=JudgeConfig())
    evals.report(run.id); evals.compare(run_a, run_b)

Not a room: `reflectrm eval` and `compare` call it, and so do the rooms that evaluate (the Evaluate and Train tabs'
`EvaluationService`, the Audit tab's before/after), each with the backend it loads.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from reflectrm_db.evaluation import EvalRunRecord, EvalStore
from reflectrm.core.config import JudgeConfig
from reflectrm.core.types import PreferencePair
from reflectrm.errors import InputError
from reflectrm.eval.benchmarks import Benchmark, load_benchmark
from reflectrm.eval.benchmarks import select as select_pairs
from reflectrm.eval.compare import compare_items
from reflectrm.eval.report import json_safe
from reflectrm.eval.runner import EvalPlan, evaluate
from reflectrm.eval.scoring import ItemResult, build_report
from reflectrm.eval.shards import Shard
from reflectrm.files.readers import load_pairs

__all__ = ("DATA_SET_PREFIX", "EvalRequest", "Evaluations", "UNFINISHED", "data_set_pairs", "incomplete",
           "pairs_fingerprint", "shard_key")

DATA_SET_PREFIX = "data set: "
"""A stored data set named as an evaluation's benchmark ("data set: demo-arith"): its runs resume and compare."""


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
        seed: the draw for `limit` (`--sample-seed`), apart from the judge's own seed.
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
    skip_invalid: bool = False  # benchmark "file": skip invalid rows (reported by `load`'s caller) instead of failing
    shard: Shard | None = None  # judge only this shard's pairs, as its own run (`merged_report` joins the shards)

    def load(self) -> Benchmark:
        if self.pairs:
            bench = Benchmark(name=self.benchmark, pairs=self.pairs, source=self.benchmark)
        elif self.benchmark == "file":
            if self.data is None:
                raise InputError("--benchmark file needs --data PATH: the labelled file to evaluate on")
            read = load_pairs(self.data, mapping=self.mapping, labels=self.labels, skip_invalid=self.skip_invalid)
            bench = Benchmark(name=f"file:{self.data.name}", pairs=tuple(read.pairs), source=str(self.data),
                              dropped=len(read.skipped),
                              dropped_reason="; ".join(f"row {n}: {why}" for n, why in read.skipped[:20]))
        else:
            bench = load_benchmark(self.benchmark, self.data)
        return select_pairs(bench, subset=self.subset, limit=self.limit, seed=self.seed)

    def to_dict(self) -> dict[str, Any]:
        return {"benchmark": self.benchmark, "data": str(self.data.resolve()) if self.data else "", "subset": self.subset or "",
                "limit": self.limit, "mapping": dict(self.mapping), "labels": self.labels, "seed": self.seed,
                "strategies": list(self.plan.strategies), "both_orders": self.plan.both_orders,
                "too_long": self.plan.too_long, **({"skip_invalid": True} if self.skip_invalid else {})}


class Evaluations:
    """Evaluation runs over a `JudgmentStore` (one transaction per user action or per batch)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.kept = EvalStore(store)

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
        settings["pairs_fingerprint"] = pairs_fingerprint(bench.pairs)  # for `compare`; not in the key (resumes)
        pairs = bench.pairs
        if request.shard is not None:  # its own run, keyed by the whole evaluation's key and (K, N)
            pairs = tuple(p for p in bench.pairs if request.shard.holds(p.id))
            settings["shard"] = {"index": request.shard.index, "count": request.shard.count, "evaluation": key,
                                 "pairs_fingerprint": settings["pairs_fingerprint"]}
            settings["pairs_fingerprint"] = pairs_fingerprint(pairs)  # what this run judged, for `compare`
            key = shard_key(key, request.shard)
        values = {"model": backend.model_id, "model_revision": backend.model_revision, "benchmark": bench.name,
                  "data": bench.source, "partial": bench.partial, "config": settings,
                  "items_total": len(pairs) * (2 if request.plan.both_orders else 1)}
        _check_resumable(self.kept.runs_by_key([key]).get(key), settings)
        run_id, _ = self.kept.start(run_key=key, values=values)
        done = self.kept.done_item_ids(run_id)
        try:
            for batch in evaluate(pairs, backend, config, plan=request.plan, done=done, meta=bench.meta,
                                  should_stop=should_stop, progress=progress):
                self.kept.add_batch(run_id, batch)
        except BaseException as exc:
            status, error = ("stopped" if isinstance(exc, stopped_by) else "failed"), str(exc)[:2000]
            self.kept.finish(run_id, status=status, error=error)
            raise
        stopped = should_stop()
        metrics = self.report(run_id, bench=bench)
        metrics.pop("incomplete")  # read while the run still says running; `report` tells it from the stored status
        # stored as strict JSON: PostgreSQL's JSON refuses NaN, and so do the app's clients
        self.kept.finish(run_id, status="stopped" if stopped else "completed", metrics=json_safe(metrics))
        return self.get(run_id)

    def get(self, run_id: int) -> EvalRunRecord:
        return self.kept.get(run_id)

    def runs(self, *, limit: int = 100) -> list[EvalRunRecord]:
        return self.kept.runs(limit=limit)

    def items(self, run_id: int) -> list[ItemResult]:
        return self.kept.items(run_id)

    def report(self, run_id: int, *, bench: Benchmark | None = None) -> dict[str, Any]:
        """The report of what the run has stored so far."""
        run = self.get(run_id)
        scoring = bench.scoring if bench else str(run.config.get("scoring", "micro"))
        report = build_report(self.items(run_id), benchmark=run.benchmark, scoring=scoring, partial=run.partial,
                              config=run.config, seed=int(run.config.get("seed", 0)))
        report.update(run_id=run_id, model=run.model, model_revision=run.model_revision, status=run.status,
                      items_total=run.items_total, incomplete=incomplete(run))
        return report

    def merged_report(self, run_id: int) -> dict[str, Any]:
        """The report of the whole sharded evaluation that shard run `run_id` belongs to, from every shard's items:
        the report one process would have written for the same evaluation (but its run ids).

        Raises:
            InputError: the run is not a shard, or a shard has not run, is unfinished or judged other data.
        """
        first = self.get(run_id)
        info = first.config.get("shard")
        if not isinstance(info, Mapping):
            raise InputError(f"run {run_id} is not a shard (it ran without --shard): its report is its own, "
                             "`reflectrm eval` with the same flags prints it")
        shards = self.shards(first)
        _check_shards(shards, info)
        items = [item for run in shards.values() for item in self.items(run.id)]
        config = {k: v for k, v in first.config.items() if k != "shard"}
        config["pairs_fingerprint"] = info["pairs_fingerprint"]  # the whole evaluation's pairs
        report = build_report(items, benchmark=first.benchmark, scoring=str(config.get("scoring", "micro")),
                              partial=first.partial, config=config, seed=int(config.get("seed", 0)))
        report.update(run_id=None, shards={str(Shard(k, int(info["count"]))): run.id for k, run in shards.items()},
                      model=first.model, model_revision=first.model_revision, status="completed",
                      items_total=sum(run.items_total for run in shards.values()), incomplete=None)
        return report

    def shards(self, run: EvalRunRecord) -> dict[int, EvalRunRecord | None]:
        """Every shard of the sharded evaluation `run` is a shard of, by its number (None: not run yet)."""
        info = run.config["shard"]
        keys = {k: shard_key(str(info["evaluation"]), Shard(k, int(info["count"]))) for k in range(1, info["count"] + 1)}
        found = self.kept.runs_by_key(list(keys.values()))
        return {k: found.get(key) for k, key in keys.items()}

    def compare(self, run_a: int, run_b: int, *, strategy: str | None = None,
                strategy_b: str | None = None) -> dict[str, Any]:
        """Paired per-item comparison of two runs: McNemar exact and a paired bootstrap of B - A, per subset.

        With `strategy_b`, run A's `strategy` is compared with run B's `strategy_b` (the same run may be
        given twice: "does reflectrm beat majority@15 on the same pairs?").
        """
        a, b = self.get(run_a), self.get(run_b)
        check_same_pairs(a, b)
        items_a, items_b = self.items(run_a), self.items(run_b)
        if strategy_b is not None:
            if strategy is None:
                raise InputError("--strategy-b compares against --strategy: give both")
            name = f"{strategy} vs {strategy_b}"
            items_a = [replace(i, strategy=name) for i in items_a if i.strategy == strategy]
            items_b = [replace(i, strategy=name) for i in items_b if i.strategy == strategy_b]
            strategy = name
        result = compare_items(items_a, items_b, strategy=strategy, run_a=run_a, run_b=run_b)
        # an unfinished run is compared on the items both judged: said at the top, never passed off as whole
        result["incomplete"] = {str(r.id): incomplete(r) for r in (a, b) if incomplete(r) is not None}
        return result


UNFINISHED = MappingProxyType({"stopped": "stopped by the user (Stop, Ctrl-C or SIGTERM)", "failed": "failed part way",
                               "interrupted": "interrupted (its process ended while it ran)",
                               "running": "still running"})
"""Why a run's report covers only part of its pairs, by the run's status."""


def incomplete(run: EvalRunRecord) -> dict[str, Any] | None:
    """What a report of an unfinished run must say at its top (the `incomplete` field); None for a completed run."""
    if run.status == "completed":
        return None
    return {"status": run.status, "why": UNFINISHED.get(run.status, run.status), "judged": run.items_done,
            "total": run.items_total, "unit": "pair-orders"}


def pairs_fingerprint(pairs: Sequence[PreferencePair]) -> str:
    """A sha256 of the pairs a run judges: each id with its content, label and tie, in id order.

    Ids alone do not tell two files apart (both number their rows 0, 1, 2, ...): the content does.
    """
    rows = sorted([p.id, p.fingerprint(), p.label, p.tie] for p in pairs)
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def check_same_pairs(a: EvalRunRecord, b: EvalRunRecord) -> None:
    fa, fb = a.config.get("pairs_fingerprint", "shard_key"), b.config.get("pairs_fingerprint", "shard_key")
    if fa and fb and fa != fb:
        raise InputError(f"runs {a.id} and {b.id} judged different pairs (data fingerprints {fa[:12]} and {fb[:12]}): "
                         "compare runs over the same data, --subset, --limit and --sample-seed")


def shard_key(evaluation_key: str, shard: Shard) -> str:
    """The run key of one shard of the evaluation whose (unsharded) run key is `evaluation_key`."""
    return hashlib.sha256(json.dumps([evaluation_key, shard.index, shard.count]).encode()).hexdigest()


def _check_resumable(run: EvalRunRecord | None, settings: Mapping[str, Any]) -> None:
    """A stored run with this key resumes only over the pairs it started on: a file changed under the same path
    would mix two data sets' judgments in one report."""
    if run is None:
        return
    stored = (run.config.get("pairs_fingerprint"), (run.config.get("shard") or {}).get("pairs_fingerprint"))
    now = (settings.get("pairs_fingerprint"), (settings.get("shard") or {}).get("pairs_fingerprint"))
    if stored != now:
        raise InputError(f"evaluation run {run.id} was started on other pairs than the data holds now (data "
                         f"fingerprint {str(stored[1] or stored[0])[:12]}, now {str(now[1] or now[0])[:12]}): restore "
                         "the data to resume it, or evaluate the changed data from another path")


def _check_shards(shards: Mapping[int, EvalRunRecord | None], info: Mapping[str, Any]) -> None:
    """Every shard run, completed, over the same whole benchmark: else one line naming the shard and what to run."""
    count = int(info["count"])
    for k, run in shards.items():
        name = Shard(k, count)
        if run is None:
            raise InputError(f"shard {name} of this evaluation has not run (with this benchmark, data, settings, model "
                             f"and revision): run the same `reflectrm eval` command with --shard {name}, then merge")
        if run.status != "completed":
            raise InputError(f"shard {name} (run {run.id}) is {run.status}, {run.items_done} of {run.items_total} "
                             f"pair-orders judged: rerun its `reflectrm eval ... --shard {name}` command to finish it")
        if run.config["shard"]["pairs_fingerprint"] != info["pairs_fingerprint"]:
            raise InputError(f"shard {name} (run {run.id}) judged other data than the others (data fingerprint "
                             f"{run.config['shard']['pairs_fingerprint'][:12]}, not {info['pairs_fingerprint'][:12]}): "
                             f"rerun every shard on the same data")


def _run_key(settings: Mapping[str, Any], backend: Any) -> str:
    payload = json.dumps([settings, backend.name, backend.model_id, backend.model_revision], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def data_set_pairs(store: Any, name: str) -> tuple[PreferencePair, ...]:
    """Every pair of the store's data set `name`; refused in one line when none of them has a label."""
    pairs = tuple(p.pair for p in store.list_pairs(source=name or None, limit=100_000))
    if not any(p.label is not None for p in pairs):
        raise InputError(f"{DATA_SET_PREFIX}{name} has no labelled pairs: evaluation needs labels")
    return pairs
