"""Statistics for evaluation: accuracy with bootstrap intervals, calibration, and paired tests. Pure stdlib.

Every function takes plain lists, so each can be checked against a hand-computed case.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

BOOTSTRAP_RESAMPLES = 2000
"""Resamples for percentile bootstrap intervals (enough for two stable decimals of a 95 % interval)."""


@dataclass(frozen=True, slots=True)
class Estimate:
    """A mean with its 95 % interval over `n` units (percentile bootstrap; exact binomial at the edges)."""

    value: float
    low: float
    high: float
    n: int

    def to_dict(self) -> dict[str, float | int]:
        return {"value": self.value, "low": self.low, "high": self.high, "n": self.n}


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def bootstrap(values: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0,
              level: float = 0.95) -> Estimate:
    """The mean of `values` (e.g. 1.0 correct / 0.0 wrong) with a percentile bootstrap interval.

    All right (or all wrong) the bootstrap has no width, as if 20 of 20 proved 100 %: such a sample
    gets the exact (Clopper-Pearson) binomial interval instead, [0.83, 1.0] for 20 of 20.
    """
    n = len(values)
    if n == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)
    if values[0] in (0.0, 1.0) and all(v == values[0] for v in values):
        edge = exact_edge(n, level)
        return Estimate(float(values[0]), *((0.0, edge) if values[0] == 0.0 else (1.0 - edge, 1.0)), n)
    return _percentile_bootstrap(values, resamples=resamples, seed=seed, level=level)


def _percentile_bootstrap(values: Sequence[float], *, resamples: int, seed: int, level: float) -> Estimate:
    n = len(values)
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(resamples))
    return Estimate(mean(values), *_percentiles(means, level), n)


def exact_edge(n: int, level: float = 0.95) -> float:
    """The Clopper-Pearson upper bound on a rate seen 0 times in `n`: 1 - ((1 - level) / 2) ** (1 / n)."""
    return 1.0 - ((1.0 - level) / 2) ** (1.0 / n)


def _percentiles(sorted_values: Sequence[float], level: float) -> tuple[float, float]:
    tail = (1 - level) / 2
    last = len(sorted_values) - 1
    return sorted_values[round(tail * last)], sorted_values[round((1 - tail) * last)]


def paired_bootstrap(a: Sequence[float], b: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0,
                     level: float = 0.95) -> Estimate:
    """mean(b) - mean(a) over the same items, with an interval from resampling items (pairs kept together)."""
    if len(a) != len(b):
        raise ValueError(f"paired samples differ in length: {len(a)} and {len(b)}")
    diffs = [y - x for x, y in zip(a, b)]
    if not diffs:
        return Estimate(math.nan, math.nan, math.nan, 0)
    if all(d == diffs[0] for d in diffs) and all(v in (0.0, 1.0) for v in (*a, *b)):
        # every item moved alike (most often: none moved), where the bootstrap claims an exact difference:
        # the share of items that could move the other way (or at all) is bounded exactly instead
        edge, d = exact_edge(len(diffs), level), diffs[0]
        low, high = {0.0: (-edge, edge), 1.0: (1.0 - edge, 1.0), -1.0: (-1.0, edge - 1.0)}[d]
        return Estimate(d, low, high, len(diffs))
    return _percentile_bootstrap(diffs, resamples=resamples, seed=seed, level=level)


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts (right for A only, right for B only).

    Under H0 each discordant item is a fair coin: p = min(1, 2 * P[Binomial(b + c, 1/2) <= min(b, c)]).
    """
    total = only_a + only_b
    if total == 0:
        return 1.0
    k = min(only_a, only_b)
    tail = sum(math.comb(total, i) for i in range(k + 1)) / 2**total
    return min(1.0, 2 * tail)


@dataclass(frozen=True, slots=True)
class Bucket:
    """Calibration of one confidence bucket: [low, high), items, mean confidence, accuracy."""

    low: float
    high: float
    n: int
    confidence: float
    accuracy: float


def calibration(probs: Sequence[float], correct: Sequence[bool], *, buckets: int = 10) -> tuple[list[Bucket], float]:
    """Equal-width buckets over [0, 1] and the expected calibration error (weighted |accuracy - confidence|)."""
    if len(probs) != len(correct):
        raise ValueError("probs and correct differ in length")
    groups: list[list[int]] = [[] for _ in range(buckets)]
    for k, p in enumerate(probs):
        groups[min(buckets - 1, max(0, int(p * buckets)))].append(k)
    out, ece = [], 0.0
    for b, members in enumerate(groups):
        if not members:
            continue
        conf = mean([probs[k] for k in members])
        acc = mean([1.0 if correct[k] else 0.0 for k in members])
        out.append(Bucket(b / buckets, (b + 1) / buckets, len(members), conf, acc))
        ece += len(members) / len(probs) * abs(acc - conf)
    return out, (ece if probs else math.nan)


def coverage_curve(scores: Sequence[float], correct: Sequence[bool],
                   coverages: Sequence[float] = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1)
                   ) -> list[tuple[float, float, float]]:
    """(coverage, threshold, accuracy) when the judge abstains on all but the most confident share of items."""
    order = sorted(range(len(scores)), key=lambda k: -scores[k])
    out = []
    for cov in coverages:
        keep = max(1, round(cov * len(order))) if order else 0
        if not keep:
            continue
        kept = order[:keep]
        out.append((cov, scores[kept[-1]], mean([1.0 if correct[k] else 0.0 for k in kept])))
    return out


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion seen `k` times in `n` (95 % at z = 1.96); (nan, nan) when n = 0.

    Unlike the normal (Wald) interval it stays inside [0, 1] and has width at 0 and at n: 0 of 7 is [0, 0.35].
    """
    if n <= 0:
        return math.nan, math.nan
    p, z2 = k / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)
