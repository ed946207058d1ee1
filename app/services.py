"""What the app's handlers call: one `AppServices` object built at start-up, shared by every user.

It owns the shared resources (the store, the model, cancel tokens, review leases: `reflectrm_app.resources`);
per-user state stays in the UI's `gr.State`. Every method handles one user action and returns
values (`reflectrm` and `db` types, or `reflectrm_app.records`), never UI components.
"""

from __future__ import annotations

import functools
import json
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any

from reflectrm_app.records import (
    AuditResult,
    BatchAuditReport,
    ExampleFilter,
    ExampleRow,
    FlippedItem,
    JudgeResult,
    Mix,
    ReviewItem,
    contest_reason,
    model_name,
)
from reflectrm_app.resources import CancelTokens, GuardedBackend, ModelHolder, ReviewLeases, warm_up_generation
from reflectrm_app.settings import AppSettings
from reflectrm_app.training import TrainingService, default_runs_dir
from reflectrm_db.derivation import Mark
from reflectrm_db.records import (
    CorrectionRecord, ExampleKind, ImportReport, JudgmentSummary, LabelledDerivation, SnapshotRecord, StoredJudgment,
)
from reflectrm_db.services import JudgmentStore
from reflectrm.audit import audit_sample, audit_stats
from reflectrm.backends.base import Backend
from reflectrm.core.config import JudgeConfig
from reflectrm.core.types import Choice, Judgment, PreferencePair
from reflectrm.demo import DEMO_MODEL_DIR, Domain, MeasuredStage2, demo_domain, judge_domain, measured_stage2
from reflectrm.errors import ConfigError, InputError, ReflectRMError
from reflectrm.inputs import confine, unique_keys
from reflectrm.pipeline import Progress, ProgressCallback, Stage, judge_many, rejudge

log = logging.getLogger(__name__)

MAX_INPUT_CHARS = 100_000
"""Characters a pair from the form or the API may hold in all (checked before any tokenising)."""


BROWSE_SCAN_PAGES = 20
REVIEW_WINDOW = 5_000  # judgments of the review queue that Next walks through (in the queue's order)
"""Pages Curate reads at most to fill one page under a text or agreement filter (those need the texts)."""


class NeedsConfirmation(ReflectRMError):
    """A correction contradicts the known label or the judge's unanimous samples: ask before saving it."""


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
    size = len(query) + len(messages) + len(response_1) + len(response_2)
    if size > MAX_INPUT_CHARS:
        raise InputError(f"the pair holds {size:,} characters, over the app's limit of {MAX_INPUT_CHARS:,}: "
                         "shorten the texts (or judge long pairs with `reflectrm judge --input`)")
    fields: dict[str, Any] = {"response_1": response_1, "response_2": response_2, "label": label}
    if messages.strip():
        try:
            fields["messages"] = json.loads(messages, object_pairs_hook=unique_keys)  # a key given twice: refused
        except json.JSONDecodeError as exc:
            raise InputError(f"the conversation is not valid JSON ({exc.msg}): give a list of "
                             '{"role": ..., "content": ...} turns ending in a user turn') from exc
    else:
        fields["query"] = query
    pair = PreferencePair.from_dict(fields)
    if base and PreferencePair.from_dict(base).fingerprint() == pair.fingerprint():
        _refuse_a_relabelled_copy(PreferencePair.from_dict(base), label)
        pair = replace(pair, id=base.get("id") or pair.id, source=base.get("source") or "", subset=base.get("subset") or "")
    elif not pair.source:
        pair = replace(pair, source="manual")
    return pair


@functools.lru_cache(maxsize=32)
def judge_label(model: str) -> str:
    """A model path or Hub id as people name it: "demo judge", a run's "run/checkpoint-40", or the Hub id, with
    the revision of its weights (a short sha256 of a local folder's weight files; a Hub snapshot id)."""
    from reflectrm.backends.transformers_backend import weights_revision  # stdlib and our code only: cheap

    if not Path(model).is_dir():
        return model
    name = model_name(model)
    revision = weights_revision(model)
    return f"{name} · {revision[:19]}" if revision else name


def _refuse_a_relabelled_copy(picked: PreferencePair, label: Choice | None) -> None:
    """Judging a picked pair under another known label would store a second copy of it with that label."""
    if label != picked.label:
        known = "unknown" if picked.label is None else f"Response {picked.label}"
        raise InputError(f"pair {picked.id or '(no id)'} of data set {picked.source or '(none)'} is labelled {known} "
                         f"there; judging it as another label would add a second copy: set Known better response "
                         f"back to {known} (to say the label is wrong, judge it and correct it in the Review queue)")


def marks_against_outcome(judgment: Judgment, verdict: Choice, marks: Mapping[int, Mark]) -> str:
    """What marks that override the outcome rule (an analysis is right when it predicts the verdict) will teach
    ("" when none do): a reflection pair takes a "right" analysis as its better side."""
    said = []
    for k, mark in sorted(marks.items()):
        predicted = judgment.rollouts[k].prediction if 0 <= k < len(judgment.rollouts) else None
        if mark == "right" and predicted != verdict:
            said.append(f"analysis #{k} predicted {_named(predicted)}, not your Response {verdict}, yet is marked "
                        "right: reflection pairs will teach it as the better analysis")
        elif mark == "wrong" and predicted == verdict:
            said.append(f"analysis #{k} predicted your Response {verdict}, yet is marked wrong: reflection pairs "
                        "will teach it as the worse analysis")
    return "; ".join(said)


def _named(choice: Choice | None) -> str:
    return "nothing (unparseable)" if choice is None else f"Response {choice}"


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

DATA_ROOT_FIX = "ask whoever runs the app to move it (reflectrm app --data-root, or REFLECTRM_DATA_ROOT)"
"""How the data root moves, for the refusals of a path outside it."""


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
    data_root: Path | None = None  # the folder users may name files in; None: the settings' (`ServeSettings.data_root`)
    _generation_lock: threading.Lock = field(default_factory=threading.Lock)
    _exports: ExportFolders = field(default_factory=lambda: ExportFolders())

    def __post_init__(self) -> None:
        url = self.store.engine.url.render_as_string(hide_password=False)
        if self.data_root is None:
            self.data_root = Path(self.settings.app.data_root or default_runs_dir(url, name="data")).resolve()
        if self.training is None:
            runs_dir = Path(self.settings.app.runs_dir or default_runs_dir(url)).resolve()  # the app may restart elsewhere
            self.training = TrainingService(store=self.store, settings=self.settings, runs_dir=runs_dir,
                                            active_judge=lambda: self.model.name, data_root=self.data_root,
                                            data_root_fix=DATA_ROOT_FIX)
            self.training.reconcile()  # runs that were going when the app last stopped: now interrupted

    @classmethod
    def start(cls, settings: AppSettings, *, backend: Backend | None = None) -> AppServices:
        """Open the store and (in the background) the model the settings name."""
        store = JudgmentStore.open(settings=settings.store)
        if backend is not None:
            holder = ModelHolder(lambda: backend, name=backend.model_id)
        else:
            holder = ModelHolder(lambda: _load_backend(settings), warm=warm_up_generation if settings.app.warm_up else None,
                                 name=settings.generation.model or str(DEMO_MODEL_DIR))
            if settings.app.warm_up:
                holder.warm_up()
        return cls(store=store, settings=settings, model=holder)

    def close(self) -> None:
        self._exports.remove_all()
        self.store.close()

    def user_path(self, text: str) -> Path:
        """A file or folder a user named, resolved inside the data root; refused in one line when it is not.

        Every path the app reads on a user's behalf passes here (`reflectrm.inputs.confine`): a `..`, an
        absolute path elsewhere or a link out of the root is refused alike, whether or not it exists.
        """
        return confine(text, root=self.data_root, setting=DATA_ROOT_FIX)

    def active_judge(self) -> str:
        """The model the app judges with now (a path or Hugging Face id)."""
        return self.model.name or self.settings.generation.model or str(DEMO_MODEL_DIR)

    def active_judge_label(self) -> str:
        """The active judge as the header shows it: its name and weights revision, not the host's absolute path;
        and, when it failed to load (damaged weights, found in the background at start-up), why."""
        label = judge_label(self.active_judge())
        return f"{label} · failed to load: {self.model.error}" if self.model.error else label

    def use_judge(self, run_id: int, checkpoint: str) -> str:
        """Make a training run's checkpoint the judge every later judgment uses; returns its path.

        The checkpoint loads while the current judge keeps serving; judgments under way finish on it.
        """
        found = self.training.checkpoint(run_id, checkpoint)
        path = str(found.path)
        self.model.switch(lambda: _load_backend(self.settings, model=path), name=path)
        return path

    def _backend(self, cancel: threading.Event | None = None) -> GuardedBackend:
        return GuardedBackend(self.model.get(), self._generation_lock, cancel)

    def model_backend(self, model: str, cancel: threading.Event | None = None) -> GuardedBackend:
        """Another model (a checkpoint) on the app's backend settings, sharing its generation lock and Stop."""
        return GuardedBackend(_load_backend(self.settings, model=model), self._generation_lock, cancel)

    # --- data sets ---------------------------------------------------------------------------------------

    def sources(self) -> list[str]:
        """Names of the data sets (pair sources) in the store."""
        return self.store.sources()

    def pairs(self, source: str, *, limit: int = 500) -> list[tuple[int, PreferencePair]]:
        return [(p.id, p.pair) for p in self.store.list_pairs(source=source or None, limit=limit)]

    def import_file(self, path: Path, *, source: str | None = None) -> ImportReport:
        return self.store.import_pairs(Path(path), source=source or None)

    def demo_domain(self) -> Domain:
        """The demo task domain the app offers: the active judge's when it is a demo judge, else the shipped one's."""
        return judge_domain(self.active_judge()) or demo_domain()

    def demo_source(self) -> str:
        """The data set `add_demo_pairs` adds to ("demo-arith", "demo-steps": `demo_domain`'s)."""
        return self.demo_domain().source

    def add_demo_pairs(self, count: int, *, seed: int = 0) -> ImportReport:
        """Labelled pairs of the demo domain (`demo_domain`; data set `demo_source()`): checkable problems."""
        domain = self.demo_domain()
        return self.store.add_pairs(domain.make_pairs(count, seed=seed, source=domain.source))

    def judge_examples(self) -> tuple[tuple[str, str, str], ...]:
        """(query, response 1, response 2) examples for the Judge tab: the active judge's domain's when it is a
        demo judge, none for any other model (or a demo card naming an unknown domain, logged)."""
        try:
            domain = judge_domain(self.active_judge())
        except ReflectRMError as exc:
            log.warning("no judge examples: %s", exc)
            return ()
        return domain.examples if domain is not None else ()

    def measured_stage2(self) -> MeasuredStage2 | None:
        """What the active judge's demo card says its stage 2 measured on held-out pairs (None for a model
        without such a card, or an unreadable one, logged): the reference a batch audit is read against."""
        try:
            return measured_stage2(self.active_judge())
        except (ReflectRMError, OSError) as exc:
            log.warning("no measured stage-2 figures: %s", exc)
            return None

    # --- judge -------------------------------------------------------------------------------------------

    def judge(
        self,
        pair: PreferencePair,
        *,
        strategy: str | None = None,
        seed: int | None = None,
        cancel: threading.Event | None = None,
        progress: ProgressCallback | None = None,
    ) -> JudgeResult:
        """Judge one pair and record it (refused, before any generation, when its texts are stored already under
        the other known label: `refuse_a_contradicting_label`)."""
        self.refuse_a_contradicting_label(pair)
        config = self._config(strategy, seed)
        backend = self._backend(cancel)
        [judgment] = list(judge_many([pair], backend, config, progress=progress))
        [jid] = self.store.record([judgment], swapped=False)
        return JudgeResult(judgment_id=jid, judgment=judgment, generated=backend.calls)

    def refuse_a_contradicting_label(self, pair: PreferencePair) -> None:
        """Refuse a pair whose texts are stored already (in either order) with the other known label.

        Recording it would store a second pair with the same texts and the opposite label (a pair's identity is its
        content and its label: `repository.pair_key`), and both would feed training. A label is corrected by a person's verdict in the Review tab.
        """
        if pair.label is None:
            return
        flipped = pair.swapped()
        for stored in self.store.pairs_with_content([pair.fingerprint(), flipped.fingerprint()]):
            same_order = stored.pair.fingerprint() == pair.fingerprint()
            known, asked = stored.pair.label, pair.label if same_order else flipped.label
            if known is not None and known != asked:
                order = "" if same_order else " with the responses in the other order"
                stored_as = known if same_order else 3 - known  # the stored label in this form's order
                raise InputError(
                    f"these texts are stored already as pair {stored.id}{order}, where Response {stored_as} is the "
                    f"known better one: judging them as Response {pair.label} would add a second copy with the "
                    f"opposite label; judge them as Response {stored_as} and, if that label is wrong, correct it "
                    "in the Review tab (save your verdict on the judgment)")

    def reaggregate(self, judgment_id: int, strategy: str, *, cancel: threading.Event | None = None) -> JudgeResult:
        """A stored judgment's rollouts aggregated with `strategy` (the record itself is unchanged).

        Generates only what the strategy needs and the record lacks (a greedy output, more samples,
        reflections against another anchor); `generated` says how many generation calls that took.
        """
        stored = self.store.load(judgment_id)
        if strategy == stored.judgment.strategy:
            return JudgeResult(judgment_id=judgment_id, judgment=stored.judgment)
        try:  # the library keeps the record's model when nothing has to be generated (no model is loaded)
            judgment, calls = rejudge(stored.judgment, strategy), 0
        except ConfigError:  # the strategy needs outputs the record lacks: generate just those
            backend = self._backend(cancel)
            judgment, calls = rejudge(stored.judgment, strategy, backend), backend.calls
        return JudgeResult(judgment_id=judgment_id, judgment=judgment, reaggregated=True, generated=calls,
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
        progress: ProgressCallback | None = None,
    ) -> AuditResult:
        """Judge a pair in both orders and record them as twins (refused like `judge` when that would fork a pair)."""
        self.refuse_a_contradicting_label(pair)
        backend = self._backend(cancel)
        original, swapped = judge_many([pair, pair.swapped()], backend, self._config(None, seed), batch_size=2,
                                       progress=progress)
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

    def _audit_pairs(self, source: str, *, sample: int, seed: int) -> list[PreferencePair]:
        if not source:
            raise InputError("pick a data set to audit (import one, or add the demo pairs)")
        if sample < 0:
            raise InputError(f"the random sample must be 0 (all pairs) or a positive count, got {sample}")
        ids = self.store.pair_ids(source)
        if not ids:
            raise InputError(f"data set {source!r} has no pairs: import some first")
        return self.store.pairs_by_id([ids[k] for k in audit_sample(len(ids), sample=sample, seed=seed)])

    def _audit_batches(
        self, pairs: Sequence[PreferencePair], *, seed: int, cancel: threading.Event | None,
        progress: ProgressCallback | None,
    ) -> Iterator[list[AuditResult]]:
        """Judge and record both orders batch by batch (Stop ends the batch in flight at its next decode step)."""
        size = self.settings.app.audit_batch_size
        config = self._config(None, seed)
        for start in range(0, len(pairs), size):
            chunk = pairs[start : start + size]
            backend = self._backend(cancel)
            both = [p for pair in chunk for p in (pair, pair.swapped())]
            report = None if progress is None else (
                lambda e, start=start: progress(_audit_event(e, done=start, total=len(pairs))))
            judgments = list(judge_many(both, backend, config, batch_size=len(both), progress=report))
            ids = self.store.record(judgments, swapped=True)
            yield [
                AuditResult(original=JudgeResult(judgment_id=ids[k], judgment=judgments[k]),
                            swapped=JudgeResult(judgment_id=ids[k + 1], judgment=judgments[k + 1]))
                for k in range(0, len(judgments), 2)
            ]

    # --- review ------------------------------------------------------------------------------------------

    def next_for_review(
        self, *, reviewer: str, skip: Sequence[int] = (), after: int | None = None, source: str = ""
    ) -> ReviewItem | None:
        """The uncorrected judgment that follows `after` in the queue's order (Next walks the whole queue and
        wraps to its start, saying so; `after` itself comes last), leaving out what this reviewer skipped and
        what somebody else holds.

        The queue's order is kept by reading it with the corrected judgments in it: `after` may just have been
        corrected (and left the queue) and the walk still goes on from where it was.
        """
        leave_out = set(skip)
        queue = self.store.review_queue(limit=REVIEW_WINDOW, source=source or None, include_corrected=True)
        ids = [s.id for s in queue]
        start = ids.index(after) + 1 if after in ids else 0
        walk = [(k >= start, s) for k, s in enumerate(queue)]
        candidates = [(ahead, s) for ahead, s in walk[start:] + walk[:start]
                      if s.correction_id is None and s.id not in leave_out]
        self.leases.release(reviewer)
        open_ids = [s.id for _, s in walk if s.correction_id is None and s.id not in leave_out]
        for ahead, summary in candidates:
            if self.leases.take(summary.id, reviewer):  # remaining: this item and those after it, up to the end
                remaining = len(open_ids) - open_ids.index(summary.id)
                return self._review_item(summary, remaining=remaining, wrapped=start > 0 and not ahead)
        return None

    def review_item(self, judgment_id: int, *, reviewer: str) -> ReviewItem:
        """One judgment for review, by id (also an already corrected one)."""
        summary = self.store.summary(int(judgment_id))
        self.leases.take(summary.id, reviewer)
        return self._review_item(summary, remaining=0)

    def _review_item(self, summary: JudgmentSummary, *, remaining: int, wrapped: bool = False) -> ReviewItem:
        stored = self.store.load(summary.id)
        active = self.store.corrections(judgment_id=summary.id, include_withdrawn=False)
        return ReviewItem(stored=stored, summary=summary, remaining=remaining, wrapped=wrapped,
                          correction=active[0] if active else None)

    def correct(
        self,
        judgment_id: int,
        *,
        verdict: Choice,
        author: str,
        note: str = "",
        marks: Mapping[int, Mark] | None = None,
        confirmed: bool = True,
        on_screen: int | None = None,
    ) -> CorrectionRecord:
        """Save a person's verdict (a new correction, or an edit with history of the judgment's active one).

        With `confirmed=False`, a verdict that contradicts the pair's known label or every one of the
        judge's parseable samples raises `NeedsConfirmation` instead (the UI asks; the API saves).
        With `on_screen` (the item the Review tab's session shows now), a verdict for another judgment is refused:
        a key pressed on one item that lands after the next one replaced it must not save either of them.
        """
        if verdict not in (1, 2):
            raise InputError(f"verdict must be 1 or 2 (the better response), got {verdict!r}")
        if on_screen is not None and int(on_screen) != int(judgment_id):
            raise InputError(f"nothing saved: judgment #{int(judgment_id)} is no longer the item on your screen "
                             f"(#{int(on_screen)} is shown now): read it, then press the key again")
        if not confirmed:
            judgment = self.store.load(int(judgment_id)).judgment
            reason = contest_reason(judgment, verdict)
            clash = marks_against_outcome(judgment, verdict, marks or {})
            # one question names everything the answer saves: a contested verdict and marks against the outcome
            if reason and clash:
                raise NeedsConfirmation(f"Response {verdict} contradicts what is known ({reason}; it is marked "
                                        f"contested in Curate), and {clash}: press the same key again to save both")
            if reason:
                raise NeedsConfirmation(f"Response {verdict} contradicts what is known ({reason}): press the same "
                                        "key again to save it anyway (it is marked contested in Curate)")
            if clash:
                raise NeedsConfirmation(f"{clash}: press the same key again to save the marks anyway")
        author = author.strip() or self.settings.app.author
        return self.store.correct(int(judgment_id), verdict=verdict, author=author, note=note,
                                  marks=dict(marks or {}), edit_active=True)

    def withdraw(self, judgment_id: int, *, author: str) -> CorrectionRecord:
        """Withdraw the judgment's active correction (its examples are withdrawn with it).

        Returns the correction as it stood before (what was withdrawn: its examples' ids)."""
        active = self.store.corrections(judgment_id=int(judgment_id), include_withdrawn=False)
        if not active:
            raise InputError(f"judgment {judgment_id} has no correction to withdraw")
        self.store.withdraw_correction(active[0].id, author=author.strip() or self.settings.app.author)
        return active[0]

    def release(self, reviewer: str) -> None:
        self.leases.release(reviewer)

    # --- curate ------------------------------------------------------------------------------------------

    def browse(
        self, kind: ExampleKind, filters: ExampleFilter = ExampleFilter(), *, limit: int = 500
    ) -> list[ExampleRow]:
        """Derived examples of one kind with their texts, newest first, filtered.

        State, source and days filter in SQL; the agreement and text filters need the judgments' texts, so
        pages of `limit` are read until `limit` rows are kept (at most `BROWSE_SCAN_PAGES` pages).
        """
        kept: list[ExampleRow] = []
        for page in range(BROWSE_SCAN_PAGES):
            records = self.store.examples(kind, states=filters.states or None, source=filters.source or None,
                                          since=filters.since, until=filters.until, newest_first=True,
                                          limit=limit, offset=page * limit)
            kept.extend(row for row in self._example_rows(records) if filters.keeps(row))
            if len(kept) >= limit or len(records) < limit:
                break
        return kept[:limit]

    def _example_rows(self, records: Sequence[Any]) -> list[ExampleRow]:
        stored = {s.id: s for s in self.store.load_many(sorted({r.judgment_id for r in records if r.judgment_id}))}
        wanted = sorted({r.correction_id for r in records if r.correction_id})
        verdicts = {c.id: c.verdict for c in self.store.corrections(correction_ids=wanted)} if wanted else {}
        return [_example_row(r, stored.get(r.judgment_id or -1), verdicts.get(r.correction_id or -1))
                for r in records]

    def derive_from_labels(self, source: str, *, seed: int = 0) -> LabelledDerivation:
        """The paper's training data from the active judge's own judgments of a labelled data set's pairs (judge them
        first: Evaluate the data set, or audit it): a preference example per pair the judge's samples did not all
        get right, and one reflection pair (a right against a wrong analysis) where they disagree. Pairs a person
        corrected keep only their correction's examples; a second run adds only what is new."""
        if not source:
            raise InputError("pick a labelled data set whose judgments to learn from (Evaluate it first)")
        if source not in self.store.sources():
            raise InputError(f"data set {source!r} does not exist: pick one from the list")
        report = self.store.derive_from_labels(source=source, model=self._backend().model_id, seed=seed)
        if not report.judgments:
            raise InputError(f"data set {source!r} has no labelled pairs judged with samples by the active judge "
                             f"({self.active_judge_label()}): evaluate it with the reflectrm or majority strategy first")
        return report

    def set_excluded(self, kind: ExampleKind, ids: Sequence[int], *, excluded: bool) -> int:
        if not ids:
            raise InputError("no examples given: select rows or type their ids")
        if excluded:
            return self.store.exclude_examples(kind, ids)
        return self.store.restore_examples(kind, ids)

    def mix(self) -> Mix:
        counts = self.store.example_counts()
        return Mix(preference=counts["preference"], reflection=counts["reflection"])

    def snapshot(self, name: str, *, note: str = "") -> SnapshotRecord:
        return self.store.snapshot(name.strip(), note=note)

    def snapshots(self) -> list[SnapshotRecord]:
        return self.store.snapshots()

    def export(self, kind: str, *, fmt: str, snapshot: str = "", include_inactive: bool = False) -> Path:
        """Export to a new temporary file (a .zip for the `hf` folder format) and return its path."""
        self._exports.prune()
        folder = self._exports.new_folder()
        suffix = {"jsonl": ".jsonl", "parquet": ".parquet", "hf": ""}.get(fmt, "")
        out = folder / f"{kind}{'-' + snapshot if snapshot else ''}{suffix}"
        try:
            self.store.export(kind, fmt=fmt, out=out, include_inactive=include_inactive, snapshot=snapshot or None)
            if fmt == "hf":
                archive = Path(shutil.make_archive(str(out), "zip", root_dir=out))
                shutil.rmtree(out)  # the zip is what is downloaded
                return archive
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return out

    # --- history -----------------------------------------------------------------------------------------

    def history(self, *, search: str = "", limit: int = 200) -> list[JudgmentSummary]:
        """Stored judgments, newest first (filtered and limited in SQL)."""
        return self.store.history(search=search, limit=limit)


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
        known_label=pair.label if pair else None,
        contested=contest_reason(stored.judgment, human) if stored is not None and human else "",
    )




def _load_backend(settings: AppSettings, *, model: str | None = None) -> Backend:
    from reflectrm.backends import load_backend

    return load_backend(*settings.backend_configs(model=model))  # torch's CPU threads: `BackendConfig.threads`


class ExportFolders:
    """Where exports are written for download: one temporary folder per app, removed at close; an
    export's own folder is removed once it is older than `keep_s` (the browser has fetched it by then)."""

    def __init__(self, keep_s: float = 600.0) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="reflectrm-exports-"))
        self.keep_s = keep_s

    def new_folder(self) -> Path:
        return Path(tempfile.mkdtemp(dir=self.root))

    def prune(self) -> None:
        cutoff = time.time() - self.keep_s
        for folder in self.root.iterdir():
            if folder.stat().st_mtime < cutoff:
                shutil.rmtree(folder, ignore_errors=True)

    def remove_all(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
