"""The Evaluate tab's services: run an evaluation with the active judge, list runs, show a report,
compare two runs, list the items worth a look (wrong or flipped) with their judgment ids.

Thin over `reflectrm_app.eval_runs.Evaluations`; the tab's handlers call these and format nothing themselves.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from reflectrm_app.resources import Cancelled
from reflectrm_app.eval_runs import EvalRequest, Evaluations
from reflectrm_db.evaluation import EvalRunRecord
from reflectrm.errors import InputError
from reflectrm.eval.benchmarks import BENCHMARKS, BOTH_ORDERS_BY_DEFAULT
from reflectrm.eval.report import compare_markdown, markdown, svg_plot
from reflectrm.eval.runner import EvalPlan

DATA_SET_PREFIX = "data set: "
RUN_COLUMNS = ("run", "benchmark", "status", "done", "of", "model", "strategies", "both orders", "partial")
ITEM_COLUMNS = ("judgment", "item", "subset", "strategy", "order", "label", "verdict", "why")


def both_orders_by_default(benchmark: str | None) -> bool:
    """Whether a benchmark's official protocol judges both orders (JudgeBench): the tab's checkbox follows it."""
    return benchmark in BOTH_ORDERS_BY_DEFAULT


@dataclass(frozen=True, slots=True)
class RunView:
    """A run's report as the tab shows it."""

    run_id: int
    markdown: str
    plot_svg: str


@dataclass(frozen=True, slots=True)
class CheckpointComparison:
    """A checkpoint evaluated against the active judge: the two stored runs and their paired comparison."""

    judge_run: int
    checkpoint_run: int
    markdown: str


class EvaluationService:
    """One per app (shares the app's store, model and generation lock)."""

    def __init__(self, services: Any) -> None:
        self.services = services
        self.evals = Evaluations(services.store)

    def choices(self) -> list[str]:
        """Benchmarks, then the store's data sets (imported files, demo pairs)."""
        return [*BENCHMARKS, "file", *(DATA_SET_PREFIX + s for s in self.services.sources())]

    def request(self, benchmark: str, *, data: str = "", subset: str = "", limit: int | None = None,
                strategies: Sequence[str] = ("reflectrm",), both_orders: bool = False, seed: int = 0) -> EvalRequest:
        if not benchmark:
            raise InputError("pick a benchmark or a data set to evaluate on")
        if benchmark == "file" and not data.strip():
            raise InputError('the benchmark "file" reads a labelled file: give its path in "Local file or folder"')
        if limit is not None and (limit != int(limit) or limit < 1):
            raise InputError(f'"Pairs at most" must be a whole number of at least 1 (leave it empty for every pair), '
                             f"got {limit:g}")
        plan = EvalPlan(strategies=tuple(strategies) or ("reflectrm",), both_orders=both_orders,
                        too_long="skip", batch_size=self.services.settings.app.audit_batch_size)
        pairs: tuple = ()
        if benchmark.startswith(DATA_SET_PREFIX):
            pairs = tuple(p for _, p in self.services.pairs(benchmark.removeprefix(DATA_SET_PREFIX), limit=100_000))
            if not any(p.label is not None for p in pairs):
                raise InputError(f"{benchmark} has no labelled pairs: evaluation needs labels")
        return EvalRequest(benchmark=benchmark, data=Path(data) if data.strip() else None, subset=subset or None,
                           limit=None if limit is None else int(limit), plan=plan, seed=seed, pairs=pairs)

    def run(self, request: EvalRequest, *, cancel: threading.Event,
            progress: Callable[[int, int], None] | None = None) -> EvalRunRecord:
        """Run (or resume) with the active judge; Stop ends it after the current generation call."""
        backend = self.services._backend(cancel)  # the app's guarded backend: its lock, its Stop
        config = self.services.settings.judge_config()
        try:
            return self.evals.run(request, backend=backend, config=config, should_stop=cancel.is_set,
                                  progress=progress, stopped_by=(KeyboardInterrupt, Cancelled))
        except Cancelled:
            return self.evals.runs(limit=1)[0]

    def mark_interrupted(self) -> list[int]:
        """At start-up: runs still marked running were cut off when the app last stopped; say so (and how to go on)."""
        return self.evals.kept.mark_interrupted(
            error="interrupted: the app stopped while it ran; Resume goes on from the pairs already judged")

    def resume(self, run_id: int, *, cancel: threading.Event,
               progress: Callable[[int, int], None] | None = None) -> EvalRunRecord:
        """Run a stopped, failed or interrupted run again with its own settings: it goes on from what it kept."""
        run = self._get(run_id)
        if run.status in ("completed", "running"):
            raise InputError(f"run {run.id} is {run.status}: only a stopped, failed or interrupted run resumes")
        c = run.config
        request = self.request(str(c.get("benchmark", "")), data=str(c.get("data") or ""),
                               subset=str(c.get("subset") or ""), limit=c.get("limit"),
                               strategies=tuple(c.get("strategies") or ("reflectrm",)),
                               both_orders=bool(c.get("both_orders")), seed=int(c.get("seed", 0)))
        request = replace(request, mapping=dict(c.get("mapping") or {}), labels=str(c.get("labels") or "auto"))
        resumed = self.run(request, cancel=cancel, progress=progress)
        if resumed.id != run.id:
            raise InputError(f"run {run.id} cannot resume with the active judge (it was made with {run.model}); "
                             f"its settings started run {resumed.id} instead")
        return resumed

    def checkpoint_against_judge(self, checkpoint: str, *, benchmark: str = "demo", limit: int | None = 50,
                                 cancel: threading.Event,
                                 progress: Callable[[int, int], None] | None = None) -> CheckpointComparison:
        """Evaluate the active judge and `checkpoint` on the same pairs (reflectrm and greedy), then compare them.

        Both runs are stored (and resume) like any other; the comparison is paired per item (McNemar exact and
        a paired bootstrap of checkpoint - judge), so "the checkpoint is better" is a tested claim.
        """
        request = self.request(benchmark, limit=limit, strategies=("reflectrm", "greedy"))
        config = self.services.settings.judge_config()
        judge_run = self.run(request, cancel=cancel, progress=progress)
        if cancel.is_set():
            raise Cancelled("stopped: the active judge's run is kept and resumes on the next try")
        backend = self.services.model_backend(checkpoint, cancel)
        checkpoint_run = self.evals.run(request, backend=backend, config=config, should_stop=cancel.is_set,
                                        progress=progress, stopped_by=(KeyboardInterrupt, Cancelled))
        comparison = compare_markdown(self.evals.compare(judge_run.id, checkpoint_run.id))
        return CheckpointComparison(judge_run=judge_run.id, checkpoint_run=checkpoint_run.id, markdown=comparison)

    def runs_table(self) -> list[list[Any]]:
        return [[r.id, r.benchmark, r.status, r.items_done, r.items_total, r.model,
                 ",".join(r.config.get("strategies", [])), bool(r.config.get("both_orders")), r.partial]
                for r in self.evals.runs()]

    def view(self, run_id: int) -> RunView:
        run = self._get(run_id)
        report = self.evals.report(int(run_id))
        text = markdown(report)
        if run.status != "completed":  # the figures of what was judged so far: never shown as a finished run's
            text = (f"**Unfinished run ({run.status}): {run.items_done} of {run.items_total} pair-orders judged.** "
                    f"These figures cover only those.\n\n{text}")
        return RunView(run_id=int(run_id), markdown=text, plot_svg=svg_plot(report))

    def compare(self, run_a: int, run_b: int) -> str:
        self._get(run_a), self._get(run_b)
        return compare_markdown(self.evals.compare(int(run_a), int(run_b)))

    def _get(self, run_id: int) -> EvalRunRecord:
        """A run by id; a missing one is said in the tab's words (the store's message names the CLI)."""
        try:
            return self.evals.get(int(run_id))
        except InputError:
            raise InputError(f"run {run_id} does not exist: click a run in Runs (Refresh runs lists new ones)") \
                from None

    def items_to_check(self, run_id: int, *, limit: int = 200) -> list[list[Any]]:
        """Wrong, abstained and flipped items with their judgment ids (to open in the Judge view)."""
        items = self.evals.items(int(run_id))
        by_twin = {(i.item_id, i.strategy, i.swapped): i for i in items}
        rows = []
        for i in items:
            if not i.scored or i.judgment_id is None:
                continue
            twin = by_twin.get((i.item_id, i.strategy, not i.swapped))
            flipped = twin is not None and twin.verdict is not None and i.verdict is not None \
                and i.verdict != 3 - twin.verdict
            why = "flipped" if flipped else ("abstained" if i.verdict is None else "wrong" if not i.correct else "")
            if why:
                rows.append([i.judgment_id, i.item_id, i.subset, i.strategy, "swapped" if i.swapped else "as given",
                             i.label, i.verdict, why])
        return rows[:limit]
