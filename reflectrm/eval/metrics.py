"""Statistics for evaluation: proportions with Wilson intervals, calibration, and paired tests. Pure stdlib.

A single proportion (an accuracy, a flip rate) gets the Wilson score interval at every count: it is
monotone in the count and never narrower with fewer items, where the percentile bootstrap claimed
[0.0, 15.0] % for 1 of 20 but [0.0, 16.8] % for 0 of 20. Differences between runs keep the paired
bootstrap and the exact McNemar test.

Every function takes plain lists, so each can be checked against a hand-computed case.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

BOOTSTRAP_RESAMPLES = 2000
"""Resamples for percentile bootstrap intervals (enough for two stable decimals of a 95 % interval)."""


@dataclass(frozen=True, slots=True)
class Estimate:
    """A mean with its 95 % interval over `n` units (Wilson for a proportion, percentile bootstrap otherwise)."""

    value: float
    low: float
    high: float
    n: int

    def to_dict(self) -> dict[str, float | int]:
        return {"value": self.value, "low": self.low, "high": self.high, "n": self.n}


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval for `k` successes in `n` trials (z = 1.96: 95 %).

    (0.0, 1.0) for n = 0: no items say nothing. Exact 0.0 at k = 0 and 1.0 at k = n.

    Raises:
        ValueError: n < 0, or k outside 0..n.
    """
    if n < 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return 0.0, 1.0
    p, z2 = k / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return (0.0 if k == 0 else max(0.0, centre - half)), (1.0 if k == n else min(1.0, centre + half))


def proportion(values: Sequence[float], *, level: float = 0.95) -> Estimate:
    """The share of 1.0s among 0.0/1.0 `values`, with its Wilson interval (see `wilson_interval`).

    Raises:
        ValueError: a value is neither 0.0 nor 1.0 (use `bootstrap` for other means).
    """
    if any(v not in (0.0, 1.0) for v in values):
        raise ValueError("proportion() takes 0.0/1.0 values: use bootstrap() for other means")
    n = len(values)
    if n == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)
    k = round(sum(values))
    return Estimate(k / n, *wilson_interval(k, n, z=_z(level)), n)


def _z(level: float) -> float:
    """The two-sided normal quantile for `level` (1.96 at 0.95)."""
    return statistics.NormalDist().inv_cdf(0.5 + level / 2)


def bootstrap(values: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0,
              level: float = 0.95) -> Estimate:
    """The mean of `values` with a percentile bootstrap interval; 0.0/1.0 values get `proportion`'s Wilson interval.

    A proportion's bootstrap has no width at all right (or all wrong), and is narrower at 1 of 20 than at 0 of
    20, so proportions never take it.
    """
    n = len(values)
    if n == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)
    if all(v in (0.0, 1.0) for v in values):
        return proportion(values, level=level)
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
