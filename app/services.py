"""What the app's handlers call: one `AppServices` object built at start-up, shared by every user.

It owns the shared resources (the store, the model, cancel tokens, review leases: `app.resources`);
per-user state stays in the UI's `gr.State`. Every method handles one user action and returns
values (`reflectrm` and `db` types, or `app.records`), never UI components.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any

from db.derivation import Mark
from db.records import CorrectionRecord, ExampleKind, ImportReport, JudgmentSummary, SnapshotRecord, StoredJudgment
from db.services import JudgmentStore
from reflectrm.backends.base import Backend
from reflectrm.core.config import JudgeConfig
from reflectrm.core.types import Choice, Judgment, PreferencePair
from reflectrm.errors import InputError
from reflectrm.demo import DEMO_MODEL_DIR
from reflectrm.pipeline import judge_many, orders_agree, rejudge

from app.records import (
    AuditResult,
    BatchAuditReport,
    ExampleFilter,
    ExampleRow,
    FlippedItem,
    JudgeResult,
    Mix,
    ReviewItem,
    SubsetStats,
)
from app.resources import CancelTokens, GuardedBackend, ModelHolder, Progress, ReviewLeases, warm_up_generation
from app.settings import AppSettings
from app.training import TrainingService, default_runs_dir

log = logging.getLogger(__name__)

_SOURCE_SCAN_LIMIT = 20_000  # pairs scanned to list data-set names (the store has no distinct-sources query)


# --- pure helpers ---------------------------------------------------------------------------------------------


def build_pair(
    *,
    query: str,
    messages: str,
    response_1: str,
    response_2: str,
    label: Choice | None = None,
    base: Mapping[str, Any] | None = None,
) -> PreferencePair:
    """The pair the Judge form describes.

    Args:
        messages: a JSON list of {role, content} turns ending in a user turn; overrides `query` when given.
        base: the data-set pair the form was filled from; its id, source and subset are kept while the
            texts are unchanged.
    """
    fields: dict[str, Any] = {"response_1": response_1, "response_2": response_2, "label": label}
    if messages.strip():
        try:
            fields["messages"] = json.loads(messages)
        except json.JSONDecodeError as exc:
            raise InputError(f"the conversation is not valid JSON ({exc.msg}): give a list of "
                             '{"role": ..., "content": ...} turns ending in a user turn') from exc
    else:
        fields["query"] = query
    pair = PreferencePair.from_dict(fields)
    if base and PreferencePair.from_dict(base).fingerprint() == pair.fingerprint():
        pair = replace(pair, id=base.get("id") or pair.id, source=base.get("source") or "", subset=base.get("subset") or "")
    elif not pair.source:
        pair = replace(pair, source="manual")
    return pair


def audit_stats(judgments: Sequence[tuple[Judgment, Judgment]]) -> list[SubsetStats]:
    """Per-subset figures over (original, swapped) judgments, sorted by subset, then "all"."""
    totals: dict[str, dict[str, int]] = {}
    for original, swapped in judgments:
        for key in (original.pair.subset or "(none)", "all"):
            t = totals.setdefault(key, dict.fromkeys(("pairs", "labelled", "both_correct", "flipped", "compared",
                                                      "first_wins", "verdicts"), 0))
            _count(t, original, swapped)
    order = sorted(k for k in totals if k != "all") + (["all"] if totals else [])
    return [SubsetStats(subset=k, **totals[k]) for k in order]


def _count(t: dict[str, int], original: Judgment, swapped: Judgment) -> None:
    t["pairs"] += 1
    if original.pair.label is not None:
        t["labelled"] += 1
        t["both_correct"] += bool(original.correct and swapped.correct)
    agree = orders_agree(original, swapped)
    if agree is not None:
        t["compared"] += 1
        t["flipped"] += not agree
    for j in (original, swapped):
        if j.verdict is not None:
            t["verdicts"] += 1
            t["first_wins"] += j.verdict == 1


def parse_marks(right: Sequence[int], wrong: Sequence[int]) -> dict[int, Mark]:
    """Marks keyed by rollout position from the two checkbox groups; one analysis cannot be both."""
    both = sorted(set(right) & set(wrong))
    if both:
        raise InputError(f"analysis #{both[0]} is marked both right and wrong: untick one of them")
    return {**{int(i): "right" for i in right}, **{int(i): "wrong" for i in wrong}}


def parse_ids(text: str) -> list[int]:
    """"3, 5 7" -> [3, 5, 7]."""
    try:
        return [int(t) for t in text.replace(",", " ").split()]
    except ValueError as exc:
        raise InputError(f"example ids must be whole numbers separated by commas, got {text!r}") from exc


def parse_day(text: str, what: str) -> date | None:
    if not text.strip():
        return None
    try:
        return date.fromisoformat(text.strip())
    except ValueError as exc:
        raise InputError(f"{what} must be a date like 2026-11-30, got {text!r}") from exc


# --- the services ---------------------------------------------------------------------------------------------


@dataclass
class AppServices:
    """The app's shared resources and the one service per user action.

    Args:
        store: the judgment store.
        settings: the app settings.
        model: loads the backend (once).
    """

    store: JudgmentStore
    settings: AppSettings
    model: ModelHolder
    cancels: CancelTokens = field(default_factory=CancelTokens)
    leases: ReviewLeases = field(default_factory=ReviewLeases)
    training: TrainingService | None = None  # None: built over `store` and `settings`
    _generation_lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if self.training is None:
            url = self.store.engine.url.render_as_string(hide_password=False)
            runs_dir = Path(self.settings.runs_dir or default_runs_dir(url)).resolve()  # the app may restart elsewhere
            self.training = TrainingService(store=self.store, settings=self.settings, runs_dir=runs_dir,
                                            active_judge=lambda: self.model.name)
            self.training.reconcile()  # runs that were going when the app last stopped: now interrupted

    @classmethod
    def start(cls, settings: AppSettings, *, backend: Backend | None = None) -> AppServices:
        """Open the store and (in the background) the model the settings name."""
        store = JudgmentStore.open(settings.database_url)
        if backend is not None:
            holder = ModelHolder(lambda: backend, name=backend.model_id)
        else:
            holder = ModelHolder(lambda: _load_backend(settings), warm=warm_up_generation if settings.warm_up else None,
                                 name=settings.model or str(DEMO_MODEL_DIR))
            if settings.warm_up:
                holder.warm_up()
        return cls(store=store, settings=settings, model=holder)

    def close(self) -> None:
        self.store.close()

    def active_judge(self) -> str:
        """The model the app judges with now (a path or Hugging Face id)."""
        return self.model.name or self.settings.model or str(DEMO_MODEL_DIR)

    def use_judge(self, run_id: int, checkpoint: str) -> str:
        """Make a training run's checkpoint the judge every later judgment uses; returns its path.

        The checkpoint loads while the current judge keeps serving; judgments under way finish on it.
        """
        found = self.training.checkpoint(run_id, checkpoint)
        path = str(found.path)
        self.model.switch(lambda: _load_backend(self.settings, model=path), name=path)
        return path

    def _backend(self, cancel: threading.Event | None = None, progress: Progress | None = None) -> GuardedBackend:
        return GuardedBackend(self.model.get(), self._generation_lock, cancel, progress)

    # --- data sets ---------------------------------------------------------------------------------------

    def sources(self) -> list[str]:
        """Names of the data sets (pair sources) in the store."""
        found: set[str] = set()
        for offset in range(0, _SOURCE_SCAN_LIMIT, 1000):
            page = self.store.list_pairs(limit=1000, offset=offset)
            found.update(p.pair.source for p in page)
            if len(page) < 1000:
                break
        return sorted(found)

    def pairs(self, source: str, *, limit: int = 500) -> list[tuple[int, PreferencePair]]:
        return [(p.id, p.pair) for p in self.store.list_pairs(source=source or None, limit=limit)]

    def import_file(self, path: Path, *, source: str | None = None) -> ImportReport:
        return self.store.import_pairs(Path(path), source=source or None)

    def add_demo_pairs(self, count: int, *, seed: int = 0) -> ImportReport:
        """Labelled demo arithmetic pairs (source "demo-arith"), the demo judge's domain."""
        from reflectrm.demo.tasks import make_pairs

        return self.store.add_pairs(make_pairs(count, seed=seed))

    # --- judge -------------------------------------------------------------------------------------------

    def judge(
        self,
        pair: PreferencePair,
        *,
        strategy: str | None = None,
        seed: int | None = None,
        cancel: threading.Event | None = None,
        progress: Progress | None = None,
    ) -> JudgeResult:
        """Judge one pair and record it."""
        config = self._config(strategy, seed)
        backend = self._backend(cancel, progress)
        [judgment] = list(judge_many([pair], backend, config))
        [jid] = self.store.record([judgment], swapped=False)
        return JudgeResult(judgment_id=jid, judgment=judgment, generated=backend.calls)

    def reaggregate(self, judgment_id: int, strategy: str, *, cancel: threading.Event | None = None) -> JudgeResult:
        """A stored judgment's rollouts aggregated with `strategy` (the record itself is unchanged).

        Generates only what the strategy needs and the record lacks (a greedy output, more samples,
        reflections against another anchor); `generated` says how many generation calls that took.
        """
        stored = self.store.load(judgment_id)
        if strategy == stored.judgment.strategy:
            return JudgeResult(judgment_id=judgment_id, judgment=stored.judgment)
        backend = self._backend(cancel)
        judgment = rejudge(stored.judgment, strategy, backend)
        if not backend.calls:
            judgment = replace(judgment, model=stored.judgment.model, model_revision=stored.judgment.model_revision,
                               backend=stored.judgment.backend, timings=stored.judgment.timings)
        return JudgeResult(judgment_id=judgment_id, judgment=judgment, reaggregated=True, generated=backend.calls,
                           recorded_strategy=stored.judgment.strategy)

    def open(self, judgment_id: int) -> StoredJudgment:
        """A stored judgment exactly as recorded."""
        return self.store.load(int(judgment_id))

    def _config(self, strategy: str | None, seed: int | None) -> JudgeConfig:
        changes: dict[str, Any] = {}
        if strategy:
            changes["strategy"] = strategy
        if seed is not None:
            changes["seed"] = int(seed)
        return self.settings.judge_config(**changes)

    # --- audit -------------------------------------------------------------------------------------------

    def audit(
        self,
        pair: PreferencePair,
        *,
        seed: int | None = None,
        cancel: threading.Event | None = None,
        progress: Progress | None = None,
    ) -> AuditResult:
        """Judge a pair in both orders and record them as twins."""
        backend = self._backend(cancel, progress)
        original, swapped = judge_many([pair, pair.swapped()], backend, self._config(None, seed), batch_size=2)
        ids = self.store.record([original, swapped], swapped=True)
        return AuditResult(original=JudgeResult(judgment_id=ids[0], judgment=original, generated=backend.calls),
                           swapped=JudgeResult(judgment_id=ids[1], judgment=swapped, generated=backend.calls))

    def batch_audit(
        self,
        source: str,
        *,
        sample: int = 0,
        seed: int = 0,
        cancel: threading.Event | None = None,
        progress: Progress | None = None,
    ) -> BatchAuditReport:
        """Audit every pair of a data set (or a seeded random sample of `sample`) in both orders."""
        started = time.perf_counter()
        pairs = self._audit_pairs(source, sample=sample, seed=seed)
        done: list[tuple[Judgment, Judgment]] = []
        flipped: list[FlippedItem] = []
        for batch_done, results in self._audit_batches(pairs, seed=seed, cancel=cancel):
            done.extend((a.original.judgment, a.swapped.judgment) for a in results)
            flipped.extend(_flipped_item(a) for a in results if a.agree is False)
            if progress:
                progress(batch_done / len(pairs), f"audited {batch_done} of {len(pairs)} pairs")
        return BatchAuditReport(source=source, subsets=tuple(audit_stats(done)), flipped=tuple(flipped),
                                seconds=time.perf_counter() - started)

    def _audit_pairs(self, source: str, *, sample: int, seed: int) -> list[PreferencePair]:
        if not source:
            raise InputError("pick a data set to audit (import one, or add the demo pairs)")
        pairs = [p for _, p in self.pairs(source, limit=_SOURCE_SCAN_LIMIT)]
        if not pairs:
            raise InputError(f"data set {source!r} has no pairs: import some first")
        if 0 < sample < len(pairs):
            pairs = random.Random(seed).sample(pairs, sample)
        return pairs

    def _audit_batches(
        self, pairs: Sequence[PreferencePair], *, seed: int, cancel: threading.Event | None
    ) -> Iterator[tuple[int, list[AuditResult]]]:
        """Judge and record both orders batch by batch (Stop takes effect between generation calls)."""
        size = self.settings.audit_batch_size
        config = self._config(None, seed)
        for start in range(0, len(pairs), size):
            chunk = pairs[start : start + size]
            backend = self._backend(cancel)
            both = [p for pair in chunk for p in (pair, pair.swapped())]
            judgments = list(judge_many(both, backend, config, batch_size=len(both)))
            ids = self.store.record(judgments, swapped=True)
            results = [
                AuditResult(original=JudgeResult(judgment_id=ids[k], judgment=judgments[k]),
                            swapped=JudgeResult(judgment_id=ids[k + 1], judgment=judgments[k + 1]))
                for k in range(0, len(judgments), 2)
            ]
            yield start + len(chunk), results

    # --- review ------------------------------------------------------------------------------------------

    def next_for_review(self, *, reviewer: str, skip: Sequence[int] = (), source: str = "") -> ReviewItem | None:
        """The first uncorrected judgment in the queue that this reviewer has not skipped and nobody else holds."""
        queue = self.store.review_queue(limit=200, source=source or None)
        candidates = [s for s in queue if s.id not in set(skip)]
        for k, summary in enumerate(candidates):
            if self.leases.take(summary.id, reviewer):
                return self._review_item(summary, remaining=len(candidates) - k)
        return None

    def review_item(self, judgment_id: int, *, reviewer: str) -> ReviewItem:
        """One judgment for review, by id (also an already corrected one)."""
        stored = self.store.load(int(judgment_id))
        summary = next(s for s in self.history(limit=1 << 30) if s.id == stored.id)
        self.leases.take(stored.id, reviewer)
        return self._review_item(summary, remaining=0, stored=stored)

    def _review_item(self, summary: JudgmentSummary, *, remaining: int, stored: StoredJudgment | None = None) -> ReviewItem:
        stored = stored or self.store.load(summary.id)
        active = self.store.corrections(judgment_id=summary.id, include_withdrawn=False)
        return ReviewItem(stored=stored, summary=summary, remaining=remaining, correction=active[0] if active else None)

    def correct(
        self,
        judgment_id: int,
        *,
        verdict: Choice,
        author: str,
        note: str = "",
        marks: Mapping[int, Mark] | None = None,
    ) -> CorrectionRecord:
        """Save a person's verdict (a new correction, or an edit of the judgment's active one)."""
        if verdict not in (1, 2):
            raise InputError(f"verdict must be 1 or 2 (the better response), got {verdict!r}")
        author = author.strip() or self.settings.author
        active = self.store.corrections(judgment_id=int(judgment_id), include_withdrawn=False)
        if active:
            return self.store.edit_correction(active[0].id, author=author, verdict=verdict, note=note,
                                              marks=dict(marks or {}))
        return self.store.correct(int(judgment_id), verdict=verdict, author=author, note=note, marks=marks)

    def release(self, reviewer: str) -> None:
        self.leases.release(reviewer)

    # --- curate ------------------------------------------------------------------------------------------

    def browse(self, kind: ExampleKind, filters: ExampleFilter = ExampleFilter(), *, limit: int = 500) -> list[ExampleRow]:
        """Derived examples of one kind with their texts, newest first, filtered."""
        records = self.store.examples(kind, states=filters.states or None, limit=None)
        stored = {s.id: s for s in self.store.load_many(sorted({r.judgment_id for r in records if r.judgment_id}))}
        verdicts = {c.id: c.verdict for c in self.store.corrections()}
        rows = [_example_row(r, stored.get(r.judgment_id or -1), verdicts.get(r.correction_id or -1)) for r in records]
        kept = [row for row in reversed(rows) if filters.keeps(row)]
        return kept[:limit]

    def set_excluded(self, kind: ExampleKind, ids: Sequence[int], *, excluded: bool) -> int:
        if not ids:
            raise InputError("no examples given: select rows or type their ids")
        if excluded:
            return self.store.exclude_examples(kind, ids)
        return self.store.restore_examples(kind, ids)

    def mix(self) -> Mix:
        return Mix(preference=len(self.store.examples("preference", limit=None)),
                   reflection=len(self.store.examples("reflection", limit=None)))

    def snapshot(self, name: str, *, note: str = "") -> SnapshotRecord:
        return self.store.snapshot(name.strip(), note=note)

    def snapshots(self) -> list[SnapshotRecord]:
        return self.store.snapshots()

    def export(self, kind: str, *, fmt: str, snapshot: str = "", include_inactive: bool = False) -> Path:
        """Export to a new temporary file (a .zip for the `hf` folder format) and return its path."""
        folder = Path(tempfile.mkdtemp(prefix="reflectrm-export-"))
        suffix = {"jsonl": ".jsonl", "parquet": ".parquet", "hf": ""}[fmt]
        out = folder / f"{kind}{'-' + snapshot if snapshot else ''}{suffix}"
        self.store.export(kind, fmt=fmt, out=out, include_inactive=include_inactive, snapshot=snapshot or None)
        if fmt == "hf":
            return Path(shutil.make_archive(str(out), "zip", root_dir=out))
        return out

    # --- history -----------------------------------------------------------------------------------------

    def history(self, *, search: str = "", limit: int = 200) -> list[JudgmentSummary]:
        """Stored judgments, newest first."""
        total = self.store.counts().get("judgments", 0)
        rows = self.store.review_queue(limit=max(total, 1), include_corrected=True)
        rows.sort(key=lambda s: s.id, reverse=True)
        if search.strip():
            needle = search.strip().casefold()
            rows = [s for s in rows if needle in s.query.casefold() or needle in s.source.casefold()]
        return rows[:limit]


def _flipped_item(a: AuditResult) -> FlippedItem:
    o, s = a.original.judgment, a.swapped.judgment
    return FlippedItem(judgment_id=a.original.judgment_id, twin_id=a.swapped.judgment_id, subset=o.pair.subset,
                       query=o.pair.query, verdict=o.verdict, swapped_verdict=s.verdict, label=o.pair.label)


def _example_row(record: Any, stored: StoredJudgment | None, human: Choice | None) -> ExampleRow:
    texts: dict[int, str] = {}
    pair = None
    judge_verdict = None
    if stored is not None:
        pair, judge_verdict = stored.judgment.pair, stored.judgment.verdict
        texts = {sid: r.analysis for sid, r in zip(stored.sample_ids, stored.judgment.rollouts)}
    critiques = [texts.get(c, f"(sample {c})") for c in record.critiques] + ["", ""]
    return ExampleRow(
        kind=record.kind, id=record.id, state=record.state,
        source=pair.source if pair else "", subset=pair.subset if pair else "",
        query=pair.query if pair else "", response_1=pair.response_1 if pair else "",
        response_2=pair.response_2 if pair else "", label=record.label,
        judge_verdict=judge_verdict, human_verdict=human, critique_1=critiques[0], critique_2=critiques[1],
        judgment_id=record.judgment_id, correction_id=record.correction_id, created_at=record.created_at,
    )




def _load_backend(settings: AppSettings, *, model: str | None = None) -> Backend:
    from reflectrm.backends import load_backend

    threads = settings.torch_threads()
    if threads is not None:
        import torch  # the transformers backend's dependency; set before the first generation

        torch.set_num_threads(threads)

    return load_backend(model or settings.model, backend=settings.backend, device=settings.device, **settings.engine)
