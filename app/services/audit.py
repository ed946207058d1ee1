"""The Audit tab's service: a pair judged in both orders (twins), and a data set's positional-bias audit."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from reflectrm_app.records import AuditResult, BatchAuditReport, FlippedItem, JudgeResult
from reflectrm_app.services.runtime import Runtime, refuse_a_contradicting_label
from reflectrm.audit import audit_sample, audit_stats
from reflectrm.core.types import Judgment, PreferencePair
from reflectrm.demo import MeasuredStage2, measured_stage2
from reflectrm.errors import InputError, ReflectRMError
from reflectrm.pipeline import Progress, ProgressCallback, Stage, judge_many

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
