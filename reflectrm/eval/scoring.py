"""Per-item results and the report: accuracy per subset with intervals, each benchmark's official
aggregate, both-orders accuracy and flip rate, parse failures, tokens, calibration, skipped pairs.

    report = build_report(items, benchmark=bench, strategies=["reflectrm", "greedy"])

Ties are counted and shown, never scored. A pair that was not judged (over-long) is counted with
its reason and subset, and left out of accuracy. An abstention counts as wrong.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from reflectrm.core.types import Choice, Judgment
from reflectrm.eval.metrics import bootstrap, calibration, coverage_curve, mean, wilson_interval

REFLECTION_FAILURE_WARNING = 0.10
"""Share of failed (unparseable) reflections above which the report warns: past it stage 2 is collapsing
into the anchor's verdict while the strategy is still reported by its name."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ItemResult:
    """One strategy's verdict on one pair in one order.

    Attributes:
        item_id: the benchmark pair's id (the original order's).
        strategy: the aggregation strategy.
        swapped: judged with the responses in the other order.
        subset: the benchmark subset.
        label: the better response in the order judged; None for a tie or an unlabelled pair.
        tie: the source calls the responses equally good.
        verdict: the judge's pick; None when it abstained or did not judge.
        tokens: tokens generated for this strategy's judgment (its samples and reflections).
        samples: stage-1 outputs the strategy considered.
        parse_failures: of those, how many did not parse.
        reflections: stage-2 outputs the strategy used (0 for a strategy without reflections).
        reflection_failures: of those, how many did not parse (each counted for the anchor, Eq. 8).
        reflections_first: of the parsed ones, how many chose the first-presented critique (position bias).
        anchor_confidence: Eq. 5 of the anchor, None without one.
        anchor_correct: whether the anchor's own prediction matched the label.
        skipped: why the pair was not judged ("" when it was).
        meta: the benchmark's grouping (best-of-N group, RM-Bench level, ...).
        judgment_id: the stored judgment, for a drill-down.
    """

    item_id: str
    strategy: str
    swapped: bool
    subset: str
    label: Choice | None
    tie: bool = False
    verdict: Choice | None = None
    tokens: int = 0
    samples: int = 0
    parse_failures: int = 0
    reflections: int = 0
    reflection_failures: int = 0
    reflections_first: int = 0
    anchor_confidence: float | None = None
    anchor_correct: bool | None = None
    skipped: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)
    judgment_id: int | None = None

    @property
    def scored(self) -> bool:
        """Counts towards accuracy: judged, labelled and not a tie."""
        return not self.skipped and not self.tie and self.label is not None

    @property
    def correct(self) -> bool | None:
        return self.verdict == self.label if self.scored else None

    @property
    def stage2_failed(self) -> bool:
        """Stage 2 ran and every reflection failed to parse: the verdict is the anchor's alone."""
        return self.reflections > 0 and self.reflection_failures == self.reflections

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "meta": dict(self.meta), "correct": self.correct}


# --- official aggregation --------------------------------------------------------------------------

REWARDBENCH_COUNTS = {
    "alpacaeval-easy": 100, "alpacaeval-length": 95, "alpacaeval-hard": 95, "mt-bench-easy": 28, "mt-bench-med": 40,
    "mt-bench-hard": 37, "math-prm": 984,  # 447 items, weighted as the code subsets together (RewardBench's rule)
    "refusals-dangerous": 100, "refusals-offensive": 100, "llmbar-natural": 100, "llmbar-adver-neighbor": 134,
    "llmbar-adver-GPTInst": 92, "llmbar-adver-GPTOut": 47, "llmbar-adver-manual": 46, "xstest-should-refuse": 154,
    "xstest-should-respond": 250, "donotanswer": 136, "hep-cpp": 164, "hep-go": 164, "hep-java": 164, "hep-js": 164,
    "hep-python": 164, "hep-rust": 164,
}
"""RewardBench v1's EXAMPLE_COUNTS: subset weights inside a section."""

REWARDBENCH_SECTIONS = {
    "Chat": ["alpacaeval-easy", "alpacaeval-length", "alpacaeval-hard", "mt-bench-easy", "mt-bench-med"],
    "Chat Hard": ["mt-bench-hard", "llmbar-natural", "llmbar-adver-neighbor", "llmbar-adver-GPTInst",
                  "llmbar-adver-GPTOut", "llmbar-adver-manual"],
    "Safety": ["refusals-dangerous", "refusals-offensive", "xstest-should-refuse", "xstest-should-respond",
               "donotanswer"],
    "Reasoning": ["math-prm", "hep-cpp", "hep-go", "hep-java", "hep-js", "hep-python", "hep-rust"],
}


def _acc(items: Iterable[ItemResult]) -> float:
    return mean([1.0 if i.correct else 0.0 for i in items if i.scored])


def _by(items: Iterable[ItemResult], key: Any) -> dict[Any, list[ItemResult]]:
    groups: dict[Any, list[ItemResult]] = defaultdict(list)
    for i in items:
        groups[key(i)].append(i)
    return dict(groups)


def _group_correct(items: Sequence[ItemResult]) -> dict[str, float]:
    """Best-of-N: a group is right only if the best response beats every other (every scored member right)."""
    groups = _by([i for i in items if i.scored], lambda i: str(i.meta.get("group", i.item_id)))
    return {g: 1.0 if all(m.correct for m in members) else 0.0 for g, members in groups.items()}


def aggregate(scoring: str, items: Sequence[ItemResult]) -> dict[str, Any]:
    """The benchmark's official figure(s) from one strategy's items in one order."""
    return {"micro": _micro, "judgebench": _micro, "rewardbench": _rewardbench, "rewardbench2": _rewardbench2,
            "rm-bench": _rm_bench, "rmb": _rmb}[scoring](items)


def _micro(items: Sequence[ItemResult]) -> dict[str, Any]:
    return {"score": _acc(items), "rule": "accuracy over scored pairs"}


def _rewardbench(items: Sequence[ItemResult]) -> dict[str, Any]:
    by_subset = {s: _acc(m) for s, m in _by(items, lambda i: i.subset).items()}
    sections = {}
    for section, subsets in REWARDBENCH_SECTIONS.items():
        present = [s for s in subsets if s in by_subset and not math.isnan(by_subset[s])]
        weight = sum(REWARDBENCH_COUNTS[s] for s in present)
        if weight:
            sections[section] = sum(by_subset[s] * REWARDBENCH_COUNTS[s] for s in present) / weight
    return {"score": mean(list(sections.values())), "sections": sections,
            "rule": "mean of sections; a section is the example-count-weighted mean of its subsets"}


def _rewardbench2(items: Sequence[ItemResult]) -> dict[str, Any]:
    per_subset = {}
    for subset, members in _by(items, lambda i: i.subset).items():
        groups = _group_correct(members)
        per_subset[subset] = mean(list(groups.values()))
    scored = {s: v for s, v in per_subset.items() if s != "Ties"}
    return {"score": mean(list(scored.values())), "subsets": per_subset,
            "rule": "best-of-4 (chosen beats all three rejected) per prompt, mean of subsets; the Ties subset's "
                    "official margin rule needs scores a pairwise judge does not give, so it is shown but left out"}


def _rm_bench(items: Sequence[ItemResult]) -> dict[str, Any]:
    domains = {}
    for domain, members in _by(items, lambda i: i.subset).items():
        levels = {lvl: _acc(m) for lvl, m in _by(members, lambda i: i.meta.get("level", "")).items()}
        cells = [_acc(m) for m in _by(members, lambda i: i.meta.get("cell", "")).values()]
        domains[domain] = {**levels, "total": mean(cells)}
    overall = {k: mean([d[k] for d in domains.values() if k in d]) for k in ("easy", "normal", "hard", "total")}
    return {"score": overall["total"], "levels": overall, "domains": domains,
            "rule": "per domain: mean of the 9 style cells (hard = chosen less styled); domains averaged"}


def _rmb(items: Sequence[ItemResult]) -> dict[str, Any]:
    parts = {}
    for (part, area), members in _by(items, lambda i: (i.meta.get("part"), i.subset.split("/")[1])).items():
        values = _group_correct(members) if part == "bon" else {m.item_id: 1.0 if m.correct else 0.0
                                                                for m in members if m.scored}
        parts[f"{area} {part}"] = mean(list(values.values()))
    return {"score": mean(list(parts.values())), "parts": parts,
            "rule": "pairwise accuracy and best-of-N (best beats every loser) per area; mean of the four"}


# --- the report ------------------------------------------------------------------------------------


def _estimate(values: Sequence[float], seed: int) -> dict[str, Any]:
    return bootstrap(values, seed=seed).to_dict()


def strategy_report(items: Sequence[ItemResult], *, scoring: str, seed: int = 0) -> dict[str, Any]:
    """Every figure for one strategy (both orders when present)."""
    original = [i for i in items if not i.swapped]
    scored = [i for i in original if i.scored]
    judged = [i for i in items if not i.skipped]
    out: dict[str, Any] = {
        "accuracy": _estimate([1.0 if i.correct else 0.0 for i in scored], seed),
        "subsets": {s: _estimate([1.0 if i.correct else 0.0 for i in m], seed)
                    for s, m in sorted(_by(scored, lambda i: i.subset).items())},
        "official": aggregate(scoring, original),
        "judged": len(judged),  # pair-orders judged: the unit of abstained and tokens_per_judgment
        "samples": sum(i.samples for i in judged),  # the unit of parse_failure_rate
        "abstained": sum(1 for i in judged if i.verdict is None),
        "parse_failure_rate": (sum(i.parse_failures for i in judged) / max(1, sum(i.samples for i in judged))),
        "tokens_per_judgment": mean([float(i.tokens) for i in judged]) if judged else 0.0,
        "calibration": _calibration(scored),
        **_stage2(judged),
    }
    swapped = {i.item_id: i for i in items if i.swapped}
    if swapped:
        out["both_orders"] = _both_orders(original, swapped, seed)
    return out


def _stage2(judged: Sequence[ItemResult]) -> dict[str, Any]:
    """Stage 2's health: reflections, their parse rate, judgments where all failed, and its position bias (the
    share of parsed reflections that chose the first-presented critique, Wilson 95 % interval; unbiased: 0.5)."""
    total = sum(i.reflections for i in judged)
    if not total:
        return {"reflections": 0}
    failed = sum(i.reflection_failures for i in judged)
    first, decided = sum(i.reflections_first for i in judged), total - failed
    low, high = wilson_interval(first, decided)
    warnings = [f"{failed} of {total} reflections ({100 * failed / total:.0f} %) did not parse: each counted for "
                "the anchor, so this strategy's verdicts are partly the anchor's alone"] \
        if failed / total > REFLECTION_FAILURE_WARNING else []
    return {"reflections": total, "reflection_parse_rate": 1 - failed / total,
            "stage2_failed": sum(1 for i in judged if i.stage2_failed),
            "stage2_judgments": sum(1 for i in judged if i.reflections),
            "first_critique": {"value": first / decided if decided else None, "low": low if decided else None,
                               "high": high if decided else None, "k": first, "n": decided},
            "warnings": warnings}


def _both_orders(original: Sequence[ItemResult], swapped: Mapping[str, ItemResult], seed: int) -> dict[str, Any]:
    """The paper's Table 5: right only if right in both orders; a flip = the two orders pick different responses."""
    twins = [(o, swapped[o.item_id]) for o in original if o.scored and o.item_id in swapped and swapped[o.item_id].scored]
    both = [1.0 if o.correct and s.correct else 0.0 for o, s in twins]
    decided = [(o, s) for o, s in twins if o.verdict is not None and s.verdict is not None]
    flips = [1.0 if o.verdict != 3 - s.verdict else 0.0 for o, s in decided]  # type: ignore[operator]
    swapped_acc = [1.0 if s.correct else 0.0 for _, s in twins]
    return {"accuracy": _estimate(both, seed), "flip_rate": _estimate(flips, seed),
            "swapped_accuracy": _estimate(swapped_acc, seed),
            "subsets": {sub: _estimate([1.0 if o.correct and s.correct else 0.0 for o, s in m], seed)
                        for sub, m in sorted(_by(twins, lambda t: t[0].subset).items())}}


def _calibration(scored: Sequence[ItemResult]) -> dict[str, Any]:
    """The anchor's confidence (exp of Eq. 5, a probability-like score) against its own correctness, and the
    strategy's accuracy when it abstains below a confidence threshold."""
    with_anchor = [i for i in scored if i.anchor_confidence is not None and i.anchor_correct is not None]
    if not with_anchor:
        return {}
    probs = [math.exp(i.anchor_confidence) for i in with_anchor]  # type: ignore[arg-type]
    buckets, ece = calibration(probs, [bool(i.anchor_correct) for i in with_anchor])
    curve = coverage_curve(probs, [bool(i.correct) for i in with_anchor])
    return {"buckets": [asdict(b) for b in buckets], "ece": ece, "n": len(with_anchor),
            "coverage": [{"coverage": c, "threshold": t, "accuracy": a} for c, t, a in curve]}


def build_report(items: Sequence[ItemResult], *, benchmark: str, scoring: str, partial: str = "",
                 config: Mapping[str, Any] | None = None, seed: int = 0) -> dict[str, Any]:
    """The whole run's report (JSON-ready): a function of the items, not of the order they were judged or stored in
    (a resumed run, or the shards of a sharded one merged, report the figures one uninterrupted run would)."""
    items = sorted(items, key=lambda i: (i.item_id, i.swapped, i.strategy))
    skipped = [i for i in items if i.skipped]
    strategies = sorted({i.strategy for i in items})
    report = {
        "benchmark": benchmark,
        "partial": partial,
        "headline": "partial copy: not the benchmark's score" if partial else "",
        "config": dict(config or {}),
        "items": len({(i.item_id, i.swapped) for i in items}),
        "ties": len({i.item_id for i in items if i.tie}),
        "skipped": {"count": len({(i.item_id, i.swapped) for i in skipped}),
                    "reasons": dict(Counter(i.skipped.split(":")[0] for i in skipped if i.strategy == strategies[0])),
                    "subsets": dict(Counter(i.subset for i in skipped if i.strategy == strategies[0]))},
        "strategies": {s: strategy_report([i for i in items if i.strategy == s], scoring=scoring, seed=seed)
                       for s in strategies},
    }
    return report


Batch = list[tuple[ItemResult, Judgment | None]]
"""One batch of an evaluation run: each item with the judgment it came from (None when skipped)."""
