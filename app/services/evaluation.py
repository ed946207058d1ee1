"""The Evaluate tab's room: evaluation over the app's active judge (and the Train tab's checkpoint against it).

    service = EvaluationService(runtime)    # the Evaluate and Train tabs: the app's judge, Stop, resume, views
    service.run(service.request("demo", limit=50), cancel=threading.Event())

The stored, resumable runs are `reflectrm_app.evaluations.Evaluations` (what `reflectrm eval` and `compare` call);
`EvaluationService` runs them over the app's runtime (`reflectrm_app.services.runtime`): its guarded backend and
settings, a checkpoint against the active judge, the promotion gate, and the tab's tables and reports (its handlers
call these and format nothing themselves).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from reflectrm_app.evaluations import (  # the stored runs; named here too, where their callers import them
    DATA_SET_PREFIX, EvalRequest, Evaluations, check_same_pairs, data_set_pairs, pairs_fingerprint,
)
from reflectrm_app.records import model_name
from reflectrm_app.resources import Cancelled
from reflectrm_app.services.runtime import Runtime
from reflectrm_db.evaluation import EvalRunRecord
from reflectrm_db.records import PromotionRecord
from reflectrm.errors import InputError, ReflectRMError
from reflectrm.eval.benchmarks import BENCHMARKS, BOTH_ORDERS_BY_DEFAULT, DataError, DataWords
from reflectrm.eval.compare import GateVerdict, gate
from reflectrm.eval.report import compare_markdown, markdown, svg_plot
from reflectrm.eval.runner import EvalPlan
from reflectrm.eval.flips import Keys, SharedKeys, flipped_items, pair_keys

__all__ = ("DATA_SET_PREFIX", "ITEM_COLUMNS", "NOT_GATED", "PROMOTION_COLUMNS", "RUN_COLUMNS", "CheckpointComparison",
           "EvalRequest", "EvaluationService", "Evaluations", "EvalReportView", "FlippedPair", "Flips", "NeedsOverride",
           "Promoted", "RelatedCorrection", "RelatedCorrections",
           "both_orders_by_default", "pairs_fingerprint")


# --- the Evaluate tab's service: the app's active judge --------------------------------------------------------

TAB_WORDS = DataWords(data='"Local file or folder"', drop_data='leave "Local file or folder" empty',
                      file_benchmark='the benchmark "file"', pairs_file='pick the benchmark "file"')
"""How the Evaluate tab's messages name where the data is given: its form's fields, not the CLI's flags."""
RUN_COLUMNS = ("run", "benchmark", "status", "done", "of", "model", "strategies", "both orders", "partial")
ITEM_COLUMNS = ("judgment", "item", "subset", "strategy", "order", "label", "verdict", "why")


def both_orders_by_default(benchmark: str | None) -> bool:
    """Whether a benchmark's official protocol judges both orders (JudgeBench): the tab's checkbox follows it."""
    return benchmark in BOTH_ORDERS_BY_DEFAULT


@dataclass(frozen=True, slots=True)
class EvalReportView:
    """An evaluation run's report as the Evaluate tab shows it (a training run's view is `records.TrainingRunView`)."""

    run_id: int
    markdown: str
    plot_svg: str


@dataclass(frozen=True, slots=True)
class CheckpointComparison:
    """A checkpoint evaluated against the active judge: the two stored runs and their paired comparison."""

    judge_run: int
    checkpoint_run: int
    markdown: str


NOT_GATED = "not gated"
"""A promotion's verdict when the checkpoint was never compared with the judge it replaced."""
PROMOTION_COLUMNS = ("when", "who", "model", "previous judge", "verdict", "overridden")


class NeedsOverride(InputError):
    """The promotion gate found the checkpoint significantly worse than the active judge: promoting it anyway
    takes an explicit override with the reviewer's name (recorded). `lines`: the gate's summary and sets."""

    def __init__(self, message: str, *, lines: Sequence[str] = (), runs: tuple[int, int] | None = None) -> None:
        super().__init__(message)
        self.lines = tuple(lines)
        self.runs = runs  # (the judge's run, the checkpoint's run) the gate compared


@dataclass(frozen=True, slots=True)
class Promoted:
    """A checkpoint made the judge: the recorded promotion (its verdict and the gate's lines)."""

    record: PromotionRecord
    path: str


FLIPS_SHOWN = 300
"""Flipped pairs, and corrections sharing a problem or template with them, shown at most (the newest corrections
first); a view that cuts says so."""
CORRECTIONS_PAGE = 500
"""Active corrections read per query while looking for the ones that share a problem or template with flipped pairs."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FlippedPair:
    """A pair (one strategy, one order) one of two compared runs got right and the other wrong.

    Attributes:
        direction: "fixed" (the checkpoint right, the judge wrong) or "broken" (the other way).
        judge_judgment / checkpoint_judgment: the stored judgments, each one opens in the anatomy.
        query: the pair's user query, flattened and cut short (plain text: data, never markup).
        keys: its problem and template (`reflectrm.eval.flips.pair_keys`); None when no judgment was kept.
    """

    item_id: str
    strategy: str
    swapped: bool
    direction: str
    judge_judgment: int | None
    checkpoint_judgment: int | None
    query: str
    keys: Keys | None


@dataclass(frozen=True, slots=True, kw_only=True)
class RelatedCorrection:
    """An active correction whose pair shares a problem or a template with flipped pairs (`with_items`)."""

    correction_id: int
    judgment_id: int
    author: str
    verdict: int
    shares: str  # "problem" or "template"
    with_items: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RelatedCorrections:
    """The corrections found, newest first; `cut`: more shared something than `rows` holds."""

    rows: tuple[RelatedCorrection, ...]
    cut: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Flips:
    """What the Train tab shows under a comparison: its flipped pairs and the corrections related to them."""

    judge_run: int
    checkpoint_run: int
    flipped: tuple[FlippedPair, ...]
    related: RelatedCorrections


class EvaluationService:
    """The Evaluate tab's service, one per app, over the app's `Runtime` (its store, judge and generation lock)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.evals = Evaluations(runtime.store)

    def choices(self) -> list[str]:
        """Benchmarks, then the store's data sets (imported files, demo pairs)."""
        return [*BENCHMARKS, "file", *(DATA_SET_PREFIX + s for s in self.runtime.store.sources())]

    def request(self, benchmark: str, *, data: str = "", subset: str = "", limit: int | None = None,
                strategies: Sequence[str] = ("reflectrm",), both_orders: bool = False, seed: int = 0) -> EvalRequest:
        if not benchmark:
            raise InputError("pick a benchmark or a data set to evaluate on")
        if benchmark == "file" and not data.strip():
            raise InputError('the benchmark "file" reads a labelled file: give its path in "Local file or folder" '
                             "(inside the app's data folder)")
        if limit is not None and (limit != int(limit) or limit < 1):
            raise InputError(f'"Pairs at most" must be a whole number of at least 1 (leave it empty for every pair), '
                             f"got {limit:g}")
        plan = EvalPlan(strategies=tuple(strategies) or ("reflectrm",), both_orders=both_orders,
                        too_long="skip", batch_size=self.runtime.settings.app.audit_batch_size)
        pairs: tuple = ()
        if benchmark.startswith(DATA_SET_PREFIX):
            pairs = data_set_pairs(self.runtime.store, benchmark.removeprefix(DATA_SET_PREFIX))
        # the path a user typed, confined to the app's data root (a stored run's, on resume, passes here again)
        path = self.runtime.user_path(data) if data.strip() else None
        return EvalRequest(benchmark=benchmark, data=path, subset=subset or None,
                           limit=None if limit is None else int(limit), plan=plan, seed=seed, pairs=pairs)

    def run(self, request: EvalRequest, *, cancel: threading.Event,
            progress: Callable[[int, int], None] | None = None) -> EvalRunRecord:
        """Run (or resume) with the active judge; Stop ends it after the current generation call."""
        backend = self.runtime.backend(cancel)  # the app's guarded backend: its lock, its Stop
        try:
            return self._run_with(backend, request, cancel=cancel, progress=progress)
        except Cancelled:
            return self.evals.runs(limit=1)[0]

    def _run_with(self, backend: Any, request: EvalRequest, *, cancel: threading.Event,
                  progress: Callable[[int, int], None] | None) -> EvalRunRecord:
        """`request` judged by `backend` with the app's judge settings; Stop (or Ctrl-C) marks the run stopped."""
        try:
            return self.evals.run(request, backend=backend, config=self.runtime.settings.judge_config(),
                                  should_stop=cancel.is_set, progress=progress,
                                  stopped_by=(KeyboardInterrupt, Cancelled))
        except DataError as exc:  # said in the tab's words, the path as the user gave it (inside the data folder)
            raise InputError(exc.said(TAB_WORDS, path=repr(self._shown_path(exc.path)))) from None

    def _shown_path(self, path: Path | None) -> str:
        """A path as the tab shows it: relative to the app's data folder (never the host's absolute path)."""
        if path is None:
            return ""
        try:
            return str(Path(path).relative_to(self.runtime.data_root)) or "."
        except ValueError:
            return Path(path).name

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
        judge_run = self.run(request, cancel=cancel, progress=progress)
        if cancel.is_set():
            raise Cancelled("stopped: the active judge's run is kept and resumes on the next try")
        checkpoint_run = self._run_with(self.runtime.model_backend(checkpoint, cancel), request, cancel=cancel,
                                        progress=progress)
        comparison = compare_markdown(self.evals.compare(judge_run.id, checkpoint_run.id))
        return CheckpointComparison(judge_run=judge_run.id, checkpoint_run=checkpoint_run.id, markdown=comparison)

    def runs_table(self) -> list[list[Any]]:
        return [[r.id, r.benchmark, r.status, r.items_done, r.items_total, model_name(r.model),
                 ",".join(r.config.get("strategies", [])), bool(r.config.get("both_orders")), r.partial]
                for r in self.evals.runs()]

    def view(self, run_id: int) -> EvalReportView:
        run = self._get(run_id)
        report = self.evals.report(int(run.id))  # an unfinished run's report says so at its top (`incomplete`)
        report["model"] = model_name(report["model"])  # a run's or the demo judge's name, not the host's path
        return EvalReportView(run_id=int(run_id), markdown=markdown(report), plot_svg=svg_plot(report))

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

    # --- what a comparison changed: the flipped pairs, and corrections sharing a problem or template -------------

    def flips(self, judge_run: int, checkpoint_run: int, *, limit: int = FLIPS_SHOWN) -> Flips:
        """The comparison's flipped pairs and the corrections related to them (`related_corrections`)."""
        flipped = self.flipped_pairs(judge_run, checkpoint_run)
        return Flips(judge_run=int(judge_run), checkpoint_run=int(checkpoint_run), flipped=tuple(flipped),
                     related=self.related_corrections(flipped, limit=limit))

    def flipped_pairs(self, judge_run: int, checkpoint_run: int) -> list[FlippedPair]:
        """Every pair both runs scored (the same pair, strategy and order) that one got right and the other wrong.

        "fixed": the checkpoint's run (`checkpoint_run`) right where the judge's was wrong; "broken": the other way.
        Each carries both runs' judgment ids (to open in the anatomy), its short query and its problem and template.
        """
        a, b = self._get(judge_run), self._get(checkpoint_run)
        check_same_pairs(a, b)
        flips = flipped_items(self.evals.items(a.id), self.evals.items(b.id))
        shown = {f.item_id: f.judgment_b if f.judgment_b is not None else f.judgment_a for f in flips}
        pairs = self.runtime.store.judgment_pairs([j for j in shown.values() if j is not None])
        out = []
        for f in flips:
            pair = pairs.get(shown[f.item_id])  # type: ignore[arg-type]
            out.append(FlippedPair(item_id=f.item_id, strategy=f.strategy, swapped=f.swapped, direction=f.direction,
                                   judge_judgment=f.judgment_a, checkpoint_judgment=f.judgment_b,
                                   query=_short(pair.query) if pair else "",
                                   keys=pair_keys(pair) if pair else None))
        return out

    def related_corrections(self, flipped: Sequence[FlippedPair], *, limit: int = FLIPS_SHOWN) -> RelatedCorrections:
        """Active corrections whose pair shares the problem (the same conversation) or the template (the same
        conversation, numbers masked) with a flipped pair; newest first, at most `limit` (`cut` says there are more).

        Every active correction is looked at, a page at a time: the keys are the library's (`reflectrm.eval.flips`),
        not columns SQL could filter on.
        """
        keys = {f.item_id: f.keys for f in flipped if f.keys is not None}
        if not keys:  # nothing flipped: nothing to relate, no corrections read
            return RelatedCorrections((), cut=False)
        index, rows = SharedKeys(keys), list[RelatedCorrection]()
        before: int | None = None
        while True:
            page = self.runtime.store.corrected_pairs(limit=CORRECTIONS_PAGE, before=before)
            for c in page:
                if (shared := index.relate(pair_keys(c.pair))) is None:
                    continue
                if len(rows) == limit:
                    return RelatedCorrections(tuple(rows), cut=True)
                rows.append(RelatedCorrection(correction_id=c.id, judgment_id=c.judgment_id, author=c.author,
                                              verdict=c.verdict, shares=shared.shares, with_items=shared.with_items))
            if len(page) < CORRECTIONS_PAGE:
                return RelatedCorrections(tuple(rows), cut=False)
            before = page[-1].id

    # --- the promotion gate: a checkpoint made the judge only if it is not significantly worse ---------------

    def promote(self, checkpoint: str, *, by: str = "", override: bool = False, alpha: float = 0.05) -> Promoted:
        """Make `checkpoint` the judge, gated on its latest comparison with the active judge; record it.

        The gate (`reflectrm.eval.compare.gate`, judge = A, checkpoint = B) runs on the latest pair of completed
        runs `checkpoint_against_judge` stored for the two models. WORSE is refused (`NeedsOverride`) unless
        `override` is given with `by`, the reviewer's name; a checkpoint never compared is promoted as NOT_GATED.
        Every promotion is recorded: who (`by`), which model over which, the verdict and lines, overridden or not.
        """
        who = " ".join(by.split())
        if override and not who:
            raise InputError("an override needs the reviewer's name: type it in \"Your name\" (it is recorded)")
        previous = self._judge_model()
        runs = self._latest_comparison(str(checkpoint), previous)
        verdict, lines = self._gate(runs, alpha=alpha)
        worse = verdict is not None and not verdict.passed
        if worse and not override:
            raise NeedsOverride(f"not promoted: the checkpoint is significantly worse than the active judge on "
                                f"{', '.join(verdict.worse_sets)} (runs {runs[0].id} and {runs[1].id}); to use it anyway tick "
                                "\"Override: use it anyway\", give your name and press Use as judge again", lines=lines,
                                runs=(runs[0].id, runs[1].id))
        path = self.runtime.use_judge(checkpoint)
        record = self.runtime.store.record_promotion(
            model=path, previous=previous, promoted_by=who or "unnamed", overridden=worse,
            verdict=verdict.verdict if verdict is not None else NOT_GATED, lines=lines,
            judge_run_id=runs[0].id if runs else None, checkpoint_run_id=runs[1].id if runs else None)
        return Promoted(record=record, path=path)

    def promotions_table(self, *, limit: int = 50) -> list[list[Any]]:
        """Recorded promotions, newest first: `PROMOTION_COLUMNS`."""
        return [[p.created_at.strftime("%Y-%m-%d %H:%M:%S"), p.promoted_by, model_name(p.model),
                 model_name(p.previous), p.verdict, p.overridden]
                for p in self.runtime.store.promotions(limit=limit)]

    def _judge_model(self) -> str:
        """The active judge as its evaluation runs name it (the loaded backend's model id)."""
        try:
            return self.runtime.model.get().model_id
        except ReflectRMError:  # a judge that failed to load has no runs to gate on: its configured name
            return self.runtime.active_judge()

    def _latest_comparison(self, checkpoint: str, judge: str) -> tuple[EvalRunRecord, EvalRunRecord] | None:
        """(the judge's run, the checkpoint's run) of the newest checkpoint run that has a judge run on the same
        pairs with the same strategies and orders; None when the checkpoint was never compared with this judge."""
        runs = self.evals.runs(limit=1000)
        for mine in (r for r in runs if r.model == checkpoint):
            for theirs in (r for r in runs if r.model == judge and r.id != mine.id):
                if _same_comparison(theirs, mine):
                    return theirs, mine
        return None

    def _gate(self, runs: tuple[EvalRunRecord, EvalRunRecord] | None, *,
              alpha: float) -> tuple[GateVerdict | None, list[str]]:
        if runs is None:
            return None, ["not gated: this checkpoint was never evaluated against the active judge "
                          "(Evaluate against the judge compares them)"]
        if unfinished := [r for r in runs if r.status != "completed"]:
            said = " and ".join(f"run {r.id} ({r.status})" for r in unfinished)
            raise InputError(f"not promoted: the comparison with the active judge did not finish ({said}); press "
                             "Evaluate against the judge again to finish it, then Use as judge")
        verdict = gate(self.evals.compare(runs[0].id, runs[1].id), alpha=alpha)
        return verdict, [verdict.summary(), *(s.summary() for s in verdict.sets)]


def _short(text: str, width: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _same_comparison(judge: EvalRunRecord, checkpoint: EvalRunRecord) -> bool:
    """Two runs `checkpoint_against_judge` made together: the same pairs, strategies and orders."""
    keys = ("pairs_fingerprint", "strategies", "both_orders", "benchmark", "subset", "limit", "seed")
    return all(judge.config.get(k) == checkpoint.config.get(k) for k in keys)
