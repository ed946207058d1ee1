"""The positional-bias audit's figures: both orders of each pair, counted per subset (pure; no I/O).

    stats = audit_stats([(original, swapped), ...])     # one row per subset, then "all"
    picked = audit_sample(len(pairs), sample=20, seed=0)  # which pairs a seeded audit judges
    change = before_after(items_before, items_after, strategy="reflectrm")  # two models on the same pairs

Both-orders accuracy follows the paper's Table 5 protocol (right in both orders); the flip rate is
over pairs where neither order abstained; the first-position win rate over every verdict given.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reflectrm.core.types import Judgment
from reflectrm.eval.compare import paired_difference, shift
from reflectrm.eval.metrics import Estimate, wilson_interval
from reflectrm.eval.report import json_safe
from reflectrm.eval.scoring import ItemResult
from reflectrm.pipeline import orders_agree


@dataclass(frozen=True, slots=True, kw_only=True)
class SubsetStats:
    """Batch-audit figures for one subset (or "all").

    Attributes:
        pairs: pairs audited.
        labelled: pairs with a label (the denominator of both-orders accuracy).
        both_correct: labelled pairs judged right in both orders (Table 5 protocol).
        flipped: pairs whose two orders picked different responses.
        compared: pairs where neither order abstained (the denominator of the flip rate).
        first_wins / verdicts: verdicts for the first-shown response, over all non-abstaining verdicts.
        reflections / reflection_failures: stage-2 outputs in both orders' judgments, and how many did not parse.
        first_critiques: parsed reflections that chose the first-presented critique (stage 2's own position
            bias; of `reflections - reflection_failures`, unbiased half).
        decisive / decisive_first: parsed reflections whose two critiques reach different verdicts, and those of
            them that chose the first-presented critique (where the choice decides something; unbiased half).
    """

    subset: str
    pairs: int = 0
    labelled: int = 0
    both_correct: int = 0
    flipped: int = 0
    compared: int = 0
    first_wins: int = 0
    verdicts: int = 0
    reflections: int = 0
    reflection_failures: int = 0
    first_critiques: int = 0
    decisive: int = 0
    decisive_first: int = 0

    @property
    def both_orders_accuracy(self) -> float | None:
        return self.both_correct / self.labelled if self.labelled else None

    @property
    def flip_rate(self) -> float | None:
        return self.flipped / self.compared if self.compared else None

    @property
    def first_position_win_rate(self) -> float | None:
        return self.first_wins / self.verdicts if self.verdicts else None

    @property
    def reflection_parse_rate(self) -> float | None:
        return 1 - self.reflection_failures / self.reflections if self.reflections else None

    @property
    def first_critique_rate(self) -> tuple[float, float, float] | None:
        """(share, low, high): parsed reflections that chose the first-presented critique, Wilson 95 % interval;
        None without a parsed reflection. An interval clear of 0.5 is a stage-2 position bias."""
        decided = self.reflections - self.reflection_failures
        if not decided:
            return None
        return (self.first_critiques / decided, *wilson_interval(self.first_critiques, decided))

    @property
    def decisive_first_rate(self) -> tuple[float, float, float] | None:
        """`first_critique_rate` over the reflections between critiques that disagree (None without one)."""
        if not self.decisive:
            return None
        return (self.decisive_first / self.decisive, *wilson_interval(self.decisive_first, self.decisive))


def audit_sample(count: int, *, sample: int, seed: int) -> list[int]:
    """Positions (sorted) of the pairs a seeded audit judges: all of them, or `sample` drawn at random.

    Same count, sample and seed: the same positions, so re-running an audit judges the same pairs.
    """
    if sample < 0:
        raise ValueError(f"sample must be 0 (all pairs) or a positive count, got {sample}")
    if sample == 0 or sample >= count:
        return list(range(count))
    return sorted(random.Random(seed).sample(range(count), sample))


def audit_stats(judgments: Sequence[tuple[Judgment, Judgment]]) -> list[SubsetStats]:
    """Per-subset figures over (original, swapped) judgments, sorted by subset, then "all"."""
    totals: dict[str, dict[str, int]] = {}
    for original, swapped in judgments:
        for key in (original.pair.subset or "(none)", "all"):
            counts = totals.setdefault(key, dict.fromkeys(_COUNTS, 0))
            _count(counts, original, swapped)
    order = sorted(k for k in totals if k != "all") + (["all"] if totals else [])
    return [SubsetStats(subset=k, **totals[k]) for k in order]


_COUNTS = ("pairs", "labelled", "both_correct", "flipped", "compared", "first_wins", "verdicts", "reflections",
           "reflection_failures", "first_critiques", "decisive", "decisive_first")


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
        t["reflections"] += len(j.reflections)
        t["reflection_failures"] += j.reflection_failures
        t["first_critiques"] += j.reflections_first_chosen[0]
        first, decisive = j.decisive_first_chosen
        t["decisive_first"] += first
        t["decisive"] += decisive


# --- two models on the same pairs in both orders: before and after retraining ----------------------------------------

FLIP_RATE, FIRST_SLOT, BOTH_ORDERS, FIRST_CRITIQUE = (
    "flip rate", "first-slot win rate", "both-orders accuracy", "first-critique share")
"""The figures of a before/after, in the order a table shows them; the first and third are compared pair by pair."""
BEFORE_AFTER_COLUMNS = ("figure", "before", "after", "after - before [95 % interval]", "McNemar p", "change")
CHANGES = {-1: "lower", 0: "no difference", 1: "higher"}
"""What a paired change is called: significantly lower, higher (McNemar and the interval both say so), or neither."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    """after - before on the pairs both models have the figure for (a pair is the unit, never an order).

    Attributes:
        difference: after - before as a share, with its 95 % paired-bootstrap interval (`n` pairs).
        mcnemar_p: the exact McNemar p over the discordant pairs.
        only_before / only_after: pairs that count (flipped, or right in both orders) for one model only.
        shift: -1 / +1 when significantly lower / higher (`reflectrm.eval.compare.shift`), else 0.
    """

    difference: Estimate
    mcnemar_p: float
    only_before: int
    only_after: int
    shift: int

    @property
    def word(self) -> str:
        return CHANGES[self.shift]


@dataclass(frozen=True, slots=True, kw_only=True)
class Figure:
    """One figure for both models: each a share with its Wilson 95 % interval over its own `unit`s."""

    name: str
    unit: str  # what each estimate's `n` counts: pairs, verdicts or reflections
    before: Estimate
    after: Estimate
    change: Change | None = None  # for the figures compared pair by pair, when the models share a pair


@dataclass(frozen=True, slots=True, kw_only=True)
class BeforeAfter:
    """Position bias of two models (before and after retraining) judged on the same pairs in both orders.

    Attributes:
        strategy: the aggregation strategy compared.
        before_model / after_model: the models as people name them (never a host's path).
        before_run / after_run: the stored evaluation runs the figures come from (None when not stored).
        pairs: pairs both models judged in both orders.
        figures: `FLIP_RATE`, `FIRST_SLOT`, `BOTH_ORDERS`, `FIRST_CRITIQUE`, in that order.
        alpha: the significance level a change is called at.
    """

    strategy: str
    before_model: str
    after_model: str
    before_run: int | None
    after_run: int | None
    pairs: int
    figures: tuple[Figure, ...]
    alpha: float = 0.05

    def figure(self, name: str) -> Figure:
        for f in self.figures:
            if f.name == name:
                return f
        raise KeyError(f"no figure {name!r}: one of {', '.join(f.name for f in self.figures)}")

    @property
    def flip_rate(self) -> Figure:
        return self.figure(FLIP_RATE)

    @property
    def first_slot_win_rate(self) -> Figure:
        return self.figure(FIRST_SLOT)

    @property
    def both_orders_accuracy(self) -> Figure:
        return self.figure(BOTH_ORDERS)

    @property
    def first_critique_share(self) -> Figure:
        return self.figure(FIRST_CRITIQUE)

    def rows(self) -> list[list[str]]:
        """One row per figure, as plain text: `BEFORE_AFTER_COLUMNS`."""
        return [[f.name, _share_text(f.before), _share_text(f.after), *_change_cells(f.change)] for f in self.figures]

    def summary(self) -> str:
        """One line: the paired figures, before -> after, the change with its interval, McNemar p and its word."""
        parts = []
        for f in (self.flip_rate, self.both_orders_accuracy):
            if f.change is None:
                parts.append(f"{f.name}: no pair judged by both")
                continue
            d = f.change.difference
            parts.append(f"{f.name} {_pct(f.before.value)} % -> {_pct(f.after.value)} %, {_pts(d.value)} points "
                         f"[{_pts(d.low)}, {_pts(d.high)}], p {f.change.mcnemar_p:.2g} ({f.change.word})")
        return f"after vs before on {self.pairs} pairs in both orders: " + "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe (a figure without units is null, never NaN)."""
        return json_safe({
            "strategy": self.strategy, "pairs": self.pairs, "alpha": self.alpha, "summary": self.summary(),
            "before": {"model": self.before_model, "run": self.before_run},
            "after": {"model": self.after_model, "run": self.after_run},
            "figures": {f.name: {"unit": f.unit, "before": f.before.to_dict(), "after": f.after.to_dict(),
                                 "change": None if f.change is None else {
                                     "difference": f.change.difference.to_dict(), "mcnemar_p": f.change.mcnemar_p,
                                     "only_before": f.change.only_before, "only_after": f.change.only_after,
                                     "change": f.change.word}}
                        for f in self.figures}})


def before_after(before: Sequence[ItemResult], after: Sequence[ItemResult], *, strategy: str,
                 before_model: str = "before", after_model: str = "after", before_run: int | None = None,
                 after_run: int | None = None, alpha: float = 0.05) -> BeforeAfter:
    """Both models' position-bias figures over their items of `strategy` judged in both orders (skipped ones left out).

    Flip rate: pairs whose two orders pick different responses, of those where neither order abstained. First-slot
    win rate: verdicts naming the response shown first, of all verdicts given. Both-orders accuracy: labelled pairs
    right in both orders (Table 5). First-critique share: parsed stage-2 reflections that chose Critique 1 (unbiased:
    one half). The first and third are also compared pair by pair: after - before with a paired-bootstrap interval
    and the exact McNemar p, on the pairs both models have the figure for.
    """
    twins_b, twins_a = _twins(before, strategy), _twins(after, strategy)
    flips_b, flips_a = _flips(twins_b), _flips(twins_a)
    right_b, right_a = _both_right(twins_b), _both_right(twins_a)
    figures = (
        Figure(name=FLIP_RATE, unit="pairs", before=_share(flips_b), after=_share(flips_a),
               change=_change(flips_b, flips_a, alpha=alpha)),
        Figure(name=FIRST_SLOT, unit="verdicts", before=_first_slot(twins_b), after=_first_slot(twins_a)),
        Figure(name=BOTH_ORDERS, unit="pairs", before=_share(right_b), after=_share(right_a),
               change=_change(right_b, right_a, alpha=alpha)),
        Figure(name=FIRST_CRITIQUE, unit="reflections", before=_first_critique(twins_b),
               after=_first_critique(twins_a)),
    )
    return BeforeAfter(strategy=strategy, before_model=before_model, after_model=after_model, before_run=before_run,
                       after_run=after_run, pairs=len(twins_b.keys() & twins_a.keys()), figures=figures, alpha=alpha)


Twins = Mapping[str, tuple[ItemResult, ItemResult]]
"""Pair id -> (the order as given, the swapped order) of one strategy's items."""


def _twins(items: Sequence[ItemResult], strategy: str) -> Twins:
    given: dict[str, ItemResult] = {}
    swapped: dict[str, ItemResult] = {}
    for i in items:
        if i.strategy == strategy and not i.skipped:
            (swapped if i.swapped else given)[i.item_id] = i
    return {k: (g, swapped[k]) for k, g in given.items() if k in swapped}


def _flips(twins: Twins) -> dict[str, float]:
    # the swapped order's verdict names the responses the other way round: 3 - v is the same response
    return {k: float(o.verdict != 3 - s.verdict) for k, (o, s) in twins.items()
            if o.verdict is not None and s.verdict is not None}


def _both_right(twins: Twins) -> dict[str, float]:
    return {k: float(bool(o.correct and s.correct)) for k, (o, s) in twins.items() if o.scored and s.scored}


def _first_slot(twins: Twins) -> Estimate:
    verdicts = [j.verdict for pair in twins.values() for j in pair if j.verdict is not None]
    return _count_share(sum(v == 1 for v in verdicts), len(verdicts))


def _first_critique(twins: Twins) -> Estimate:
    judged = [j for pair in twins.values() for j in pair]
    return _count_share(sum(j.reflections_first for j in judged),
                        sum(j.reflections - j.reflection_failures for j in judged))


def _share(values: Mapping[str, float]) -> Estimate:
    return _count_share(round(sum(values.values())), len(values))


def _count_share(k: int, n: int) -> Estimate:
    """k of n with its Wilson 95 % interval; NaN (said "-") without a unit."""
    return Estimate(k / n, *wilson_interval(k, n), n) if n else Estimate(math.nan, math.nan, math.nan, 0)


def _change(before: Mapping[str, float], after: Mapping[str, float], *, alpha: float) -> Change | None:
    shared = sorted(before.keys() & after.keys())
    if not shared:
        return None
    r = paired_difference([before[k] for k in shared], [after[k] for k in shared])
    d = Estimate(**r["difference"])
    return Change(difference=d, mcnemar_p=r["mcnemar_p"], only_before=r["only_a"], only_after=r["only_b"],
                  shift=shift(r["mcnemar_p"], d.low, d.high, alpha=alpha))


def _share_text(e: Estimate) -> str:
    return "-" if not e.n else f"{_pct(e.value)} % [{_pct(e.low)}, {_pct(e.high)}] (n {e.n})"


def _change_cells(change: Change | None) -> list[str]:
    if change is None:
        return ["", "", ""]
    d = change.difference
    return [f"{_pts(d.value)} points [{_pts(d.low)}, {_pts(d.high)}] (n {d.n})", f"{change.mcnemar_p:.2g}", change.word]


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{100 * x:.1f}"


def _pts(x: float) -> str:
    return "-" if math.isnan(x) else f"{100 * x:+.1f}"
