"""Paired comparison of two evaluation runs' items: McNemar exact and a paired bootstrap of B - A; and the promotion
gate over it (`gate`): is run B significantly worse than run A anywhere that matters?"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reflectrm.errors import ConfigError, InputError
from reflectrm.eval.metrics import mcnemar_exact, paired_bootstrap
from reflectrm.eval.scoring import ItemResult


def compare_items(items_a: Iterable[ItemResult], items_b: Iterable[ItemResult], *, strategy: str | None,
                  run_a: int, run_b: int) -> dict[str, Any]:
    """Per strategy and subset: pairs both runs scored, accuracies, discordant counts, McNemar p, B - A interval.

    The unit is a pair (its two orders are not independent items): "overall" and the subsets use the order
    as given; "both orders" (when both runs judged both) counts a pair right only if right in both.
    """
    a, b = _outcomes(items_a), _outcomes(items_b)
    shared = sorted(k for k in a.keys() & b.keys() if strategy is None or k[0] == strategy)
    if not shared:
        raise InputError(f"runs {run_a} and {run_b} share no scored items: compare runs on the same benchmark")
    out: dict[str, Any] = {"run_a": run_a, "run_b": run_b, "strategies": {}}
    for name in sorted({k[0] for k in shared}):
        keys = [k for k in shared if k[0] == name]
        groups: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for k in keys:
            groups["overall"].append(k)
            groups[a[k][0]].append(k)
        result = {g: paired_difference([a[k][1] for k in ks], [b[k][1] for k in ks]) for g, ks in groups.items()}
        both = [k for k in keys if a[k][2] is not None and b[k][2] is not None]
        if both:
            result["both orders"] = paired_difference([a[k][2] for k in both], [b[k][2] for k in both])
        out["strategies"][name] = result
    return out


def _outcomes(items: Iterable[ItemResult]) -> dict[tuple[str, str], tuple[str, float, float | None]]:
    """(strategy, pair id) -> (subset, right as given, right in both orders or None without the swap)."""
    given: dict[tuple[str, str], ItemResult] = {}
    swapped: dict[tuple[str, str], ItemResult] = {}
    for i in items:
        if i.scored:
            (swapped if i.swapped else given)[(i.strategy, i.item_id)] = i
    out = {}
    for key, item in given.items():
        twin = swapped.get(key)
        both = None if twin is None else float(bool(item.correct and twin.correct))
        out[key] = (item.subset, float(bool(item.correct)), both)
    return out


def paired_difference(xa: Sequence[float], xb: Sequence[float]) -> dict[str, Any]:
    """B - A on the same items (1.0 right, 0.0 wrong): both accuracies, the items only one gets right, the exact
    McNemar p-value and a paired bootstrap interval of the difference (`difference`: value, low, high)."""
    only_a = sum(1 for x, y in zip(xa, xb) if x > y)
    only_b = sum(1 for x, y in zip(xa, xb) if y > x)
    return {"n": len(xa), "accuracy_a": sum(xa) / len(xa), "accuracy_b": sum(xb) / len(xb),
            "only_a": only_a, "only_b": only_b, "mcnemar_p": mcnemar_exact(only_a, only_b),
            "difference": paired_bootstrap(xa, xb).to_dict()}


# --- the promotion gate: is run B significantly worse than run A anywhere that matters? ---------------------------

WORSE, BETTER, NO_DIFFERENCE, NO_DATA = "worse", "better", "no difference", "no data"
GATED_BY_DEFAULT = ("overall", "both orders")
"""The sets a gate holds B to, per strategy compared: every pair as given, and the pairs judged in both orders (a
judge that learnt a position bias gets worse there first). Subsets are reported, and gated only on request."""
MAX_ALPHA = 0.5


def check_alpha(alpha: Any) -> None:
    """`alpha`, the gate's significance level, is a number in (0, 0.5]; anything else is a `ConfigError`."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 < alpha <= MAX_ALPHA:
        raise ConfigError(f"alpha is {str(alpha)[:40]!r}: give a significance level above 0 and at most {MAX_ALPHA} "
                          "(0.05 is usual)")


def alpha_level(text: str) -> float:
    """An argparse type: a significance level in (0, 0.5] (anything else, nan included, is a one-line error)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 < value <= MAX_ALPHA:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a significance level: give a number above 0 and at "
                                         f"most {MAX_ALPHA}, such as 0.05")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class SetVerdict:
    """One compared set (a strategy's "overall", "both orders" or a subset) and what the gate made of it."""

    strategy: str
    group: str  # "overall", "both orders" or a subset's name
    gated: bool  # whether this set's verdict counts towards the gate's
    verdict: str  # WORSE, BETTER, NO_DIFFERENCE, or NO_DATA (no pairs: never gated)
    n: int  # pairs both runs scored
    accuracy_a: float | None
    accuracy_b: float | None
    difference: float | None  # B - A, as a share
    low: float | None  # its 95 % paired-bootstrap interval
    high: float | None
    mcnemar_p: float | None

    def summary(self) -> str:
        """One line: the set, its verdict, both accuracies, B - A with its interval (points), McNemar p and n."""
        head = f"{self.strategy} / {self.group}: {self.verdict}{'' if self.gated else ', not gated'}"
        if self.verdict == NO_DATA:
            return f"{head} (n 0 pairs)"
        return (f"{head} (A {_pct(self.accuracy_a)} %, B {_pct(self.accuracy_b)} %, B - A {_pts(self.difference)} "
                f"[{_pts(self.low)}, {_pts(self.high)}] points, McNemar p {self.mcnemar_p:.3g}, n {self.n} pairs)")

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "set": self.group, "gated": self.gated, "verdict": self.verdict,
                "n": self.n, "accuracy_a": self.accuracy_a, "accuracy_b": self.accuracy_b,
                "difference": {"value": self.difference, "low": self.low, "high": self.high},
                "mcnemar_p": self.mcnemar_p, "summary": self.summary()}


@dataclass(frozen=True, slots=True, kw_only=True)
class GateVerdict:
    """The gate's decision over every compared set: WORSE if any gated set is, else BETTER if any is, else
    NO_DIFFERENCE. `passed` is what a promotion asks: B is not significantly worse anywhere gated."""

    verdict: str
    alpha: float
    sets: tuple[SetVerdict, ...]

    @property
    def passed(self) -> bool:
        return self.verdict != WORSE

    @property
    def worse_sets(self) -> list[str]:
        """The gated sets B is significantly worse on, as "strategy / set"."""
        return [f"{s.strategy} / {s.group}" for s in self.sets if s.gated and s.verdict == WORSE]

    def summary(self) -> str:
        worse = self.worse_sets
        where = f" on {', '.join(worse)}" if worse else ""
        return (f"gate: {self.verdict}{where} (alpha {self.alpha:g}; "
                f"{sum(s.gated and s.verdict != NO_DATA for s in self.sets)} gated set(s))")

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "passed": self.passed, "alpha": self.alpha, "summary": self.summary(),
                "sets": [s.to_dict() for s in self.sets]}


def gate(result: Mapping[str, Any], *, alpha: float = 0.05, subsets: bool = False) -> GateVerdict:
    """The promotion gate over `compare_items`' result: is run B significantly worse than run A on any gated set?

    A set is WORSE when both tests say so: the exact McNemar p is below `alpha` AND the 95 % paired-bootstrap
    interval of B - A lies wholly below 0 (BETTER: above 0). Requiring both, not either: the exact test is the one
    valid at every sample size, but says nothing of how large the change is; the percentile bootstrap is too narrow
    on a few pairs (2 of 3 pairs moved: its interval can exclude 0 where the exact p is 0.5), so either test alone
    would block a promotion on noise. An `alpha` above 0.05 loosens the test only: the interval stays the 95 % one
    the comparison reports. Gated sets: `GATED_BY_DEFAULT` per strategy, and every subset with `subsets=True`; a set
    with no pairs is NO_DATA and never gated. A comparison with an unfinished run (`incomplete`) is refused
    (InputError): its verdict would stand on the pairs the run happened to reach.
    """
    check_alpha(alpha)
    if unfinished := sorted((result.get("incomplete") or {}).keys(), key=str):
        runs = " and ".join(f"run {run}" for run in unfinished)
        raise InputError(f"{runs} did not finish: the gate decides on finished runs only (a run cut short can pass on "
                         "the pairs it reached); resume it with the same `reflectrm eval` command, then compare")
    sets = []
    for strategy, groups in result["strategies"].items():
        for group, r in groups.items():
            sets.append(_set_verdict(strategy, group, r, alpha=alpha,
                                     gated=subsets or group in GATED_BY_DEFAULT))
    gated = {s.verdict for s in sets if s.gated}
    verdict = WORSE if WORSE in gated else BETTER if BETTER in gated else NO_DIFFERENCE
    return GateVerdict(verdict=verdict, alpha=float(alpha), sets=tuple(sets))


def _set_verdict(strategy: str, group: str, r: Mapping[str, Any], *, alpha: float, gated: bool) -> SetVerdict:
    d = r.get("difference") or {}
    value, low, high, p = (_number(d.get("value")), _number(d.get("low")), _number(d.get("high")),
                           _number(r.get("mcnemar_p")))
    n = int(r.get("n") or 0)
    if n == 0 or None in (value, low, high, p):
        verdict, gated = NO_DATA, False
    else:
        verdict = {-1: WORSE, 1: BETTER, 0: NO_DIFFERENCE}[shift(p, low, high, alpha=alpha)]  # type: ignore[arg-type]
    return SetVerdict(strategy=strategy, group=group, gated=gated, verdict=verdict, n=n,
                      accuracy_a=_number(r.get("accuracy_a")), accuracy_b=_number(r.get("accuracy_b")),
                      difference=value, low=low, high=high, mcnemar_p=p)


def shift(p: float, low: float, high: float, *, alpha: float) -> int:
    """-1 or +1 when B - A is significantly below or above 0, else 0: the exact McNemar `p` is below `alpha` AND the
    95 % paired-bootstrap interval [`low`, `high`] lies wholly on that side of 0 (`gate` says why both)."""
    if p < alpha and high < 0:
        return -1
    if p < alpha and low > 0:
        return 1
    return 0


def _number(x: Any) -> float | None:
    """A finite number, or None (a missing figure, JSON's null, NaN)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _pts(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}"
