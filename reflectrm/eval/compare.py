"""Paired comparison of two evaluation runs' items: McNemar exact and a paired bootstrap of B - A."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from reflectrm.errors import InputError
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
