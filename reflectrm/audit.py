"""The positional-bias audit's figures: both orders of each pair, counted per subset (pure; no I/O).

    stats = audit_stats([(original, swapped), ...])     # one row per subset, then "all"
    picked = audit_sample(len(pairs), sample=20, seed=0)  # which pairs a seeded audit judges

Both-orders accuracy follows the paper's Table 5 protocol (right in both orders); the flip rate is
over pairs where neither order abstained; the first-position win rate over every verdict given.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from reflectrm.core.types import Judgment
from reflectrm.eval.metrics import wilson_interval
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
