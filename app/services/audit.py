"""The Audit tab's service: a pair judged in both orders (twins), a data set's positional-bias audit, and two models
(before and after retraining) on the same pairs in both orders."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from reflectrm_app.evaluations import DATA_SET_PREFIX, EvalRequest, Evaluations, data_set_pairs
from reflectrm_app.records import AuditResult, BatchAuditReport, FlippedItem, JudgeResult, model_name
from reflectrm_app.services.runtime import Runtime, refuse_a_contradicting_label
from reflectrm_db.evaluation import EvalRunRecord
from reflectrm.audit import BeforeAfter, audit_sample, audit_stats, before_after
from reflectrm.core.types import Judgment, PreferencePair
from reflectrm.demo import DEMO_MODEL_DIR, MeasuredStage2, measured_stage2
from reflectrm.errors import Cancelled, InputError, ReflectRMError
from reflectrm.eval.runner import EvalPlan
from reflectrm.pipeline import Progress, ProgressCallback, Stage, judge_many
from reflectrm.training.runs import list_checkpoints

log = logging.getLogger(__name__)


@dataclass
class AuditService:
    """Audit one pair or a data set in both orders; what the judge's card says its stage 2 measured."""

    runtime: Runtime

    def audit(
        self,
        pair: PreferencePair,
        *,
        seed: int | None = None,
        cancel: threading.Event | None = None,
        progress: ProgressCallback | None = None,
    ) -> AuditResult:
        """Judge a pair in both orders and record them as twins (refused like judging when that would fork a pair)."""
        refuse_a_contradicting_label(self.runtime.store, pair)
        backend = self.runtime.backend(cancel)
        original, swapped = judge_many([pair, pair.swapped()], backend, self.runtime.judge_config(None, seed),
                                       batch_size=2, progress=progress)
        ids = self.runtime.store.record([original, swapped], swapped=True)
        return AuditResult(original=JudgeResult(judgment_id=ids[0], judgment=original, generated=backend.calls),
                           swapped=JudgeResult(judgment_id=ids[1], judgment=swapped, generated=backend.calls))

    def batch_audit(
        self,
        source: str,
        *,
        sample: int = 0,
        seed: int = 0,
        cancel: threading.Event | None = None,
        progress: ProgressCallback | None = None,
    ) -> BatchAuditReport:
        """Audit every pair of a data set (or a seeded random sample of `sample`) in both orders.

        Reproducible: the data set does not change (both orders are judgments of its pairs), so the
        same seed draws the same pairs and, with the same judge, gives the same figures.
        """
        started = time.perf_counter()
        pairs = self._audit_pairs(source, sample=sample, seed=seed)
        if progress:
            progress(_audit_event(None, done=0, total=len(pairs)))
        done: list[tuple[Judgment, Judgment]] = []
        flipped: list[FlippedItem] = []
        for results in self._audit_batches(pairs, seed=seed, cancel=cancel, progress=progress):
            done.extend((a.original.judgment, a.swapped.judgment) for a in results)
            flipped.extend(_flipped_item(a) for a in results if a.agree is False)
        return BatchAuditReport(source=source, subsets=tuple(audit_stats(done)), flipped=tuple(flipped),
                                seconds=time.perf_counter() - started)

    def measured_stage2(self) -> MeasuredStage2 | None:
        """What the active judge's demo card says its stage 2 measured on held-out pairs (None for a model
        without such a card, or an unreadable one, logged): the reference a batch audit is read against."""
        try:
            return measured_stage2(self.runtime.active_judge())
        except (ReflectRMError, OSError) as exc:
            log.warning("no measured stage-2 figures: %s", exc)
            return None

    # --- before and after retraining: two models on the same pairs in both orders ------------------------------

    def model_choices(self) -> list[tuple[str, str]]:
        """(label, model) pairs a before/after picks from: the active judge (""), then every training run's checkpoints
        and final model, newest run first (the Train tab's lists)."""
        choices = [(f"active judge: {model_name(self.runtime.active_judge())}", "")]
        for run in reversed(self.runtime.store.training_runs()):
            for c in reversed(list_checkpoints(run.run_dir)):
                kind = "final model" if c.final else "LoRA adapter" if c.lora else "checkpoint"
                choices.append((f"run #{run.id} step {c.step}: {kind} ({model_name(str(c.path))})", str(c.path)))
        return choices

    def before_after(
        self,
        data_set: str,
        *,
        before: str,
        after: str,
        limit: int | None = None,
        cancel: threading.Event | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> BeforeAfter:
        """Judge a labelled data set's pairs in both orders with two models and compare their position bias.

        `before` and `after` are models: "" for the active judge, a checkpoint from `model_choices`, or a model
        folder inside the data root. Each model's judgments are an evaluation run (kept, listed in the Evaluate
        tab, resumed on the next try after Stop, and not judged twice when asked again), made with the app's judge
        settings on the same pairs (`limit` of them at most, the same seeded draw for both), one model loaded at a
        time. `progress(done, total)` counts pairs over both runs.
        """
        models = self._two_models(before, after)
        request = self._before_after_request(data_set, limit)
        cancel = cancel or threading.Event()
        evals = Evaluations(self.runtime.store)
        runs = [self._evaluated(evals, model, request, cancel=cancel, progress=None if progress is None else (
            lambda done, total, k=k: progress(k * total + done, 2 * total))) for k, model in enumerate(models)]
        return before_after(evals.items(runs[0].id), evals.items(runs[1].id), strategy=request.plan.strategies[0],
                            before_model=model_name(models[0]), after_model=model_name(models[1]),
                            before_run=runs[0].id, after_run=runs[1].id)

    def _two_models(self, before: str, after: str) -> tuple[str, str]:
        models = self._model(before, "before"), self._model(after, "after")
        if os.path.realpath(models[0]) == os.path.realpath(models[1]):
            raise InputError(f"before and after are the same model ({model_name(models[0])}): pick two different "
                             "models, such as the active judge and a checkpoint of a training run")
        return models

    def _model(self, text: str, role: str) -> str:
        """A model a user picked or typed: "" the active judge; a listed checkpoint or the app's own models as they
        are; anything else a model folder inside the data root (refused in one line when it is not one)."""
        text = (text or "").strip()
        judge = self.runtime.active_judge()
        if not text:
            return judge
        if text in {judge, str(DEMO_MODEL_DIR), *(m for _, m in self.model_choices())}:
            return text
        path = self.runtime.user_path(text)  # confined to the data root: outside it is refused, existing or not
        if not any((path / name).is_file() for name in ("config.json", "adapter_config.json")):
            raise InputError(f"the {role} model {text[:80]!r} is not a model folder (no config.json) in the app's "
                             "data folder: pick a model from the list, or give a model's folder inside the data folder")
        return str(path)

    def _before_after_request(self, data_set: str, limit: int | None) -> EvalRequest:
        if not data_set:
            raise InputError("pick a data set of labelled pairs (import one, or add the demo pairs)")
        if data_set not in self.runtime.store.sources():
            raise InputError(f"there is no data set {data_set[:80]!r}: pick one from the list (import one, or add the "
                             "demo pairs)")
        if limit is not None and (isinstance(limit, bool) or limit != int(limit) or limit < 1):
            raise InputError(f'"Pairs at most" must be a whole number of at least 1 (leave it empty for every pair), '
                             f"got {limit!r}")
        plan = EvalPlan(strategies=(self.runtime.judge_config().strategy,), both_orders=True, too_long="skip",
                        batch_size=self.runtime.settings.app.audit_batch_size)
        return EvalRequest(benchmark=DATA_SET_PREFIX + data_set, limit=None if limit is None else int(limit),
                           plan=plan, pairs=data_set_pairs(self.runtime.store, data_set))

    def _evaluated(self, evals: Evaluations, model: str, request: EvalRequest, *, cancel: threading.Event,
                   progress: Callable[[int, int], None] | None) -> EvalRunRecord:
        """`model`'s run of `request` (resumed or reused when stored), its engine released when it returns."""
        judge = model == self.runtime.active_judge()
        backend = self.runtime.backend(cancel) if judge else self.runtime.model_backend(model, cancel)
        stopped = Cancelled("stopped: the pairs judged so far are kept as an evaluation run (Evaluate tab) and the "
                            "next Run goes on from them")
        try:
            run = evals.run(request, backend=backend, config=self.runtime.judge_config(), should_stop=cancel.is_set,
                            progress=progress, stopped_by=(KeyboardInterrupt, Cancelled))
        except Cancelled:
            raise stopped from None
        if cancel.is_set() or run.status != "completed":
            raise stopped
        return run

    def _audit_pairs(self, source: str, *, sample: int, seed: int) -> list[PreferencePair]:
        if not source:
            raise InputError("pick a data set to audit (import one, or add the demo pairs)")
        if sample < 0:
            raise InputError(f"the random sample must be 0 (all pairs) or a positive count, got {sample}")
        ids = self.runtime.store.pair_ids(source)
        if not ids:
            raise InputError(f"data set {source!r} has no pairs: import some first")
        return self.runtime.store.pairs_by_id([ids[k] for k in audit_sample(len(ids), sample=sample, seed=seed)])

    def _audit_batches(
        self, pairs: Sequence[PreferencePair], *, seed: int, cancel: threading.Event | None,
        progress: ProgressCallback | None,
    ) -> Iterator[list[AuditResult]]:
        """Judge and record both orders batch by batch (Stop ends the batch in flight at its next decode step)."""
        size = self.runtime.settings.app.audit_batch_size
        config = self.runtime.judge_config(None, seed)
        for start in range(0, len(pairs), size):
            chunk = pairs[start : start + size]
            backend = self.runtime.backend(cancel)
            both = [p for pair in chunk for p in (pair, pair.swapped())]
            report = None if progress is None else (
                lambda e, start=start: progress(_audit_event(e, done=start, total=len(pairs))))
            judgments = list(judge_many(both, backend, config, batch_size=len(both), progress=report))
            ids = self.runtime.store.record(judgments, swapped=True)
            yield [
                AuditResult(original=JudgeResult(judgment_id=ids[k], judgment=judgments[k]),
                            swapped=JudgeResult(judgment_id=ids[k + 1], judgment=judgments[k + 1]))
                for k in range(0, len(judgments), 2)
            ]


def _flipped_item(a: AuditResult) -> FlippedItem:
    o, s = a.original.judgment, a.swapped.judgment
    back = None if s.verdict is None else 3 - s.verdict  # the swapped order's pick, in the original numbering
    return FlippedItem(judgment_id=a.original.judgment_id, twin_id=a.swapped.judgment_id, subset=o.pair.subset,
                       query=o.pair.query, verdict=o.verdict, swapped_verdict=back, label=o.pair.label,
                       response_1=o.pair.response_1, response_2=o.pair.response_2)


def _audit_event(event: Progress | None, *, done: int, total: int) -> Progress:
    """A batch's pipeline event as the whole audit's: each audited pair is two judgments (its two orders).

    `done` pairs were audited before the batch; `event` None is the audit's start. A DECIDED event
    counts audited pairs (`done` of `total`); the others keep their stage's outputs and tokens.
    """
    if event is None:
        return Progress(stage=Stage.DECIDED, done=0, total=total, pairs_done=0, pairs_total=2 * total)
    rebased = replace(event, pairs_done=2 * done + event.pairs_done, pairs_total=2 * total)
    if event.stage is Stage.DECIDED:
        return replace(rebased, done=done + event.done // 2, total=total)
    return rebased
