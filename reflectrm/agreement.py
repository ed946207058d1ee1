"""How far reviewers agree: Cohen's and Fleiss' kappa and Krippendorff's alpha, per round, pair and item (pure).

    report = agreement_report(answers)             # every figure of a round, with 95 % intervals
    report.overall["verdict"]["alpha"]             # an Estimate: value, low, high, items, why
    cohen_kappa(answers, "ana", "ben", level="analyses")
    agreed_marks(answers_of_one_item)              # {analysis index: mark} the reviewers agree on

Two levels:

- "verdict": the unit is an item (a judgment); a reviewer's value is its verdict, "A" or "B"; None is missing.
- "analyses": the unit is one of an item's eight analyses (item, index 0-7); a reviewer's value is its mark,
  "right" or "wrong"; an index the reviewer did not mark is missing.

Every figure is a function of sums over units of small per-unit tallies (a confusion matrix, category counts,
a coincidence matrix). The 95 % interval is a percentile bootstrap over items: `resamples` draws of the items
with replacement, each item keeping all of its analyses (one reviewer's marks on one judgment are not independent
of each other). Resample r draws `default_rng(seed).integers(0, n, size=(resamples, n))[r]` of the n items that
entered the figure, in id order, so anyone can redraw it. Resamples in which a figure is undefined (every
drawn value the same) are left out of its interval. Figures here are pinned against scikit-learn's
`cohen_kappa_score`, statsmodels' `fleiss_kappa` and the `krippendorff` package in tests/test_agreement.py.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import combinations
from typing import Any, Literal

import numpy as np

from reflectrm.errors import ConfigError, InputError

Level = Literal["verdict", "analyses"]
CATEGORIES: dict[str, tuple[str, ...]] = {"verdict": ("A", "B"), "analyses": ("right", "wrong")}
"""Each level's values; fixed, so a value nobody used does not change a figure."""
ANALYSES = 8
"""Analyses per judgment (the paper's N = 8 samples): the indices a mark may name, 0 to 7."""
INTERVAL = (2.5, 97.5)
"""The percentiles of the bootstrap distribution that bound the 95 % interval."""
RESAMPLES = 2000
"""Bootstrap resamples per figure (enough for two stable decimals of a 95 % interval)."""

_BLOCK = 2_000_000
"""Resample weights held in memory at once (resamples x items), so a large round bootstraps in blocks."""


# --- values ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Answer:
    """One reviewer's answer on one item of a round.

    Attributes:
        item: the judgment id.
        reviewer: the reviewer's name.
        verdict: "A", "B", or None (not answered, skipped).
        marks: analysis index (0-7) -> "right" | "wrong"; an index left out was not marked.
    """

    item: int
    reviewer: str
    verdict: str | None
    marks: Mapping[int, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.item, int) or isinstance(self.item, bool):
            raise InputError(f"Answer.item must be a judgment id (an int), got a {type(self.item).__name__}")
        if not isinstance(self.reviewer, str) or not self.reviewer.strip():
            raise InputError("Answer.reviewer must name the reviewer (a non-empty str)")
        if not (self.verdict is None or (isinstance(self.verdict, str) and self.verdict in CATEGORIES["verdict"])):
            raise InputError(f"Answer.verdict of item {self.item} must be 'A', 'B' or None (None: not answered)")
        if not isinstance(self.marks, Mapping):
            raise InputError(f"Answer.marks of item {self.item} must map an analysis index to 'right' or 'wrong'")
        for index, mark in self.marks.items():
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < ANALYSES:
                raise InputError(f"Answer.marks of item {self.item}: an analysis index must be an int from 0 to "
                                 f"{ANALYSES - 1}")
            if not (isinstance(mark, str) and mark in CATEGORIES["analyses"]):
                raise InputError(f"Answer.marks of item {self.item}: analysis {index}'s mark must be 'right' or "
                                 "'wrong' (leave an unmarked analysis out)")
        object.__setattr__(self, "marks", dict(self.marks))  # a copy: the caller's dict may change later


@dataclass(frozen=True, slots=True)
class Estimate:
    """A figure with its 95 % bootstrap interval over items.

    Attributes:
        value: the figure; None when it is undefined (`why` says why).
        low, high: the interval's bounds; None when `value` is, when `resamples` was 0, or when no resample
            was defined.
        items: items that entered the figure (at the analyses level, items with at least one analysis that did).
        why: one line when `value` is None.
    """

    value: float | None
    low: float | None
    high: float | None
    items: int
    why: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ItemAgreement:
    """How far the reviewers of one item agree, at one level.

    Attributes:
        item: the judgment id.
        level: "verdict" or "analyses".
        answered: reviewers who gave a value (a verdict; at least one mark).
        pairs: pairs of values compared (every two reviewers who both gave one; at the analyses level summed over
            the eight analyses).
        agreement: the share of those pairs that agree; None without a pair.
        majority: the verdict more reviewers gave than any other; None on a tie, without a verdict, and at the
            analyses level.
        marks: at the analyses level, `agreed_marks`: index -> the mark at least two reviewers gave and none
            contradicted; empty at the verdict level.
    """

    item: int
    level: str
    answered: int
    pairs: int
    agreement: float | None
    majority: str | None
    marks: Mapping[int, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class PairAgreement:
    """Two reviewers over the items they both answered.

    Attributes:
        a, b: the reviewers (a < b).
        items: items both gave a verdict on; `verdict_agreement` the share of them with the same verdict.
        analyses: analyses both marked; `analyses_agreement` the share of them with the same mark.
        verdict_kappa, analyses_kappa: Cohen's kappa at each level, with intervals.
    """

    a: str
    b: str
    items: int
    verdict_agreement: float | None
    analyses: int
    analyses_agreement: float | None
    verdict_kappa: Estimate
    analyses_kappa: Estimate


@dataclass(frozen=True, slots=True, kw_only=True)
class ItemReport:
    """One item of a round: its answers, agreement at both levels, and whether its verdicts differ."""

    item: int
    answers: tuple[Answer, ...]
    verdict: ItemAgreement
    analyses: ItemAgreement
    disagreed: bool  # two reviewers gave different verdicts (missing ones not counted)


@dataclass(frozen=True, slots=True, kw_only=True)
class AgreementReport:
    """A round's agreement: overall figures per level, per reviewer pair, per item.

    Attributes:
        reviewers: every reviewer with an answer, sorted.
        overall: level -> {"cohen" (only when exactly two reviewers gave values at that level), "fleiss", "alpha"}.
        pairs: every two reviewers with an item in common.
        items: every item, by id.
        resamples, seed: the bootstrap's settings (each figure draws from its own `default_rng(seed)`).
    """

    reviewers: tuple[str, ...]
    overall: Mapping[str, Mapping[str, Estimate]]
    pairs: tuple[PairAgreement, ...]
    items: tuple[ItemReport, ...]
    resamples: int
    seed: int

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-safe values (None for undefined figures; mark indices as string keys)."""
        data = asdict(self)
        for item in data["items"]:
            for answer in item["answers"]:
                answer["marks"] = {str(k): v for k, v in answer["marks"].items()}
            item["analyses"]["marks"] = {str(k): v for k, v in item["analyses"]["marks"].items()}
        return data

    def rows(self) -> dict[str, list[dict[str, str | int | float]]]:
        """Plain tables ("overall", "pairs", "items"): strings and numbers only; "" where a figure is undefined."""
        return {
            "overall": [{"level": level, "figure": name, **_estimate_cells(estimate), "items": estimate.items,
                         "note": estimate.why}
                        for level, figures in self.overall.items() for name, estimate in figures.items()],
            "pairs": [_pair_row(pair) for pair in self.pairs],
            "items": [_item_row(item) for item in self.items],
        }


# --- the figures -----------------------------------------------------------------------------------------------


def cohen_kappa(answers: Iterable[Answer], a: str, b: str, *, level: Level = "verdict", resamples: int = RESAMPLES,
                seed: int = 0) -> Estimate:
    """Cohen's kappa of reviewers `a` and `b` over the units both gave a value on.

    kappa = (p_o - p_e) / (1 - p_e): p_o the share of those units where they agree, p_e the agreement expected
    from each reviewer's own share of each value (sum over values of p_a(value) * p_b(value)). Undefined (None)
    when they share no unit, or when both gave one and the same value throughout (p_e = 1).
    """
    _check(level=level, resamples=resamples, seed=seed)
    if a == b:
        raise ConfigError("cohen_kappa: a and b are the same reviewer; pass two different reviewers")
    cats = CATEGORIES[level]
    tallies = {}
    for item, units in _units(answers, level).items():
        both = [(unit[a], unit[b]) for unit in units if a in unit and b in unit]
        if both:
            tally = np.zeros((len(cats), len(cats)))
            for x, y in both:
                tally[cats.index(x), cats.index(y)] += 1
            tallies[item] = tally.ravel()
    if not tallies:
        return Estimate(None, None, None, 0, why="the two reviewers gave no value on the same unit")
    matrix = np.array(list(tallies.values()))
    if np.isnan(_cohen(matrix.sum(axis=0, keepdims=True), len(cats))[0]):  # p_e = 1
        return Estimate(None, None, None, len(tallies), why="both reviewers gave one and the same value throughout "
                                                            "(no variation): kappa is undefined")
    return _estimate(matrix, lambda sums: _cohen(sums, len(cats)), resamples=resamples, seed=seed)


def fleiss_kappa(answers: Iterable[Answer], *, level: Level = "verdict", resamples: int = RESAMPLES,
                 seed: int = 0) -> Estimate:
    """Fleiss' kappa over the units rated by exactly m reviewers, m the most common count of values per unit.

    Fleiss' kappa needs the same number of raters on every unit: among the units with at least two values, m is
    the count most of them have (a tie: the larger), and units with another count are left out (Krippendorff's
    alpha takes them all). kappa = (P - P_e) / (1 - P_e): P the mean over units of the share of agreeing rater
    pairs, sum_j n_ij (n_ij - 1) / (m (m - 1)); P_e = sum_j p_j^2, p_j the share of all values that are j.
    Undefined (None) when no unit has two values, or when every value is the same (P_e = 1).
    """
    _check(level=level, resamples=resamples, seed=seed)
    cats = CATEGORIES[level]
    counts = {item: [_counts(unit, cats) for unit in units] for item, units in _units(answers, level).items()}
    sizes = Counter(sum(c) for units in counts.values() for c in units if sum(c) >= 2)
    if not sizes:
        return Estimate(None, None, None, 0, why="no unit has values from two reviewers")
    m = max(sizes, key=lambda size: (sizes[size], size))
    tallies = {}
    for item, units in counts.items():
        rated = np.array([c for c in units if sum(c) == m], dtype=float).reshape(-1, len(cats))
        if len(rated):
            shares = ((rated * (rated - 1)).sum(axis=1) / (m * (m - 1))).sum()
            tallies[item] = np.concatenate([[shares, len(rated)], rated.sum(axis=0)])
    matrix = np.array(list(tallies.values()))
    if np.count_nonzero(matrix.sum(axis=0)[2:]) < 2:
        return Estimate(None, None, None, len(tallies), why="every value is the same (no variation): kappa is "
                                                            "undefined")
    return _estimate(matrix, lambda sums: _fleiss(sums, m), resamples=resamples, seed=seed)


def krippendorff_alpha(answers: Iterable[Answer], *, level: Level = "verdict", resamples: int = RESAMPLES,
                       seed: int = 0) -> Estimate:
    """Krippendorff's alpha (nominal) over every unit with values from at least two reviewers; missing allowed.

    alpha = 1 - D_o / D_e from the coincidence matrix o (each unit with m values adds, for every ordered pair of
    its values, 1 / (m - 1)): D_o the off-diagonal mass, D_e what independent values would give. The point value
    is the maintained `krippendorff` package's (with the level's two values as the value domain); the bootstrap
    recomputes it from the resampled items' coincidence matrices. Undefined (None) when no unit has two values or
    every value is the same.
    """
    _check(level=level, resamples=resamples, seed=seed)
    cats = CATEGORIES[level]
    pairable = {item: [c for c in (_counts(unit, cats) for unit in units) if sum(c) >= 2]
                for item, units in _units(answers, level).items()}
    pairable = {item: units for item, units in pairable.items() if units}
    if not pairable:
        return Estimate(None, None, None, 0, why="no unit has values from two reviewers")
    value_counts = np.array([c for units in pairable.values() for c in units], dtype=float)
    if np.count_nonzero(value_counts.sum(axis=0)) < 2:
        return Estimate(None, None, None, len(pairable), why="every value is the same (no variation): alpha is "
                                                             "undefined")
    matrix = np.array([sum(_coincidences(c) for c in units) for units in pairable.values()])
    point = _package_alpha(value_counts)
    return _estimate(matrix, lambda sums: _alpha(sums, len(cats)), resamples=resamples, seed=seed, point=point)


def item_agreement(answers_of_one_item: Iterable[Answer], *, level: Level = "verdict") -> ItemAgreement:
    """How far the reviewers of one item agree: the share of agreeing pairs, the majority verdict, agreed marks."""
    _check(level=level, resamples=0, seed=0)
    answers = list(answers_of_one_item)
    item = _one_item(answers)
    units = _units(answers, level).get(item, [])
    agreeing = pairs = 0
    for unit in units:
        counts = Counter(unit.values())
        pairs += _pairs(len(unit))
        agreeing += sum(_pairs(n) for n in counts.values())
    if level == "verdict":
        answered, majority, marks = len(units[0]) if units else 0, _majority(units), {}
    else:
        answered, majority, marks = sum(1 for a in answers if a.marks), None, agreed_marks(answers)
    return ItemAgreement(item=item, level=level, answered=answered, pairs=pairs,
                         agreement=agreeing / pairs if pairs else None, majority=majority, marks=marks)


def agreed_marks(answers_of_one_item: Iterable[Answer]) -> dict[int, str]:
    """Analysis index -> mark, where at least two reviewers marked it and every reviewer who did gave that mark."""
    answers = list(answers_of_one_item)
    _one_item(answers)
    agreed = {}
    for index in range(ANALYSES):
        given = {a.marks[index] for a in answers if index in a.marks}
        if len(given) == 1 and sum(index in a.marks for a in answers) >= 2:
            agreed[index] = given.pop()
    return agreed


def agreement_report(answers: Iterable[Answer], *, resamples: int = RESAMPLES, seed: int = 0) -> AgreementReport:
    """Every figure of a round: overall per level, per reviewer pair, per item (see the module's docstring)."""
    _check(level="verdict", resamples=resamples, seed=seed)
    answers = list(answers)
    by_item = _by_item(answers)
    boot = {"resamples": resamples, "seed": seed}
    overall = {}
    for level in CATEGORIES:
        raters = sorted({r for units in _units(answers, level).values() for unit in units for r in unit})
        figures = {"cohen": cohen_kappa(answers, *raters, level=level, **boot)} if len(raters) == 2 else {}
        figures["fleiss"] = fleiss_kappa(answers, level=level, **boot)
        figures["alpha"] = krippendorff_alpha(answers, level=level, **boot)
        overall[level] = figures
    reviewers = tuple(sorted({a.reviewer for a in answers}))
    pairs = tuple(_pair(answers, by_item, a, b, **boot) for a, b in combinations(reviewers, 2)
                  if any(a in given and b in given for given in by_item.values()))
    items = tuple(_item_report(item, tuple(given.values())) for item, given in sorted(by_item.items()))
    return AgreementReport(reviewers=reviewers, overall=overall, pairs=pairs, items=items, resamples=resamples,
                           seed=seed)


# --- units and tallies -----------------------------------------------------------------------------------------


def _check(*, level: str, resamples: int, seed: int) -> None:
    if level not in CATEGORIES:
        raise ConfigError(f"level: {str(level)[:40]!r} is not a level; use 'verdict' or 'analyses'")
    if not isinstance(resamples, int) or isinstance(resamples, bool) or resamples < 0:
        raise ConfigError(f"resamples: {resamples!r} is not a count; pass 0 (no interval) or more ({RESAMPLES} is "
                          "the default)")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ConfigError(f"seed: {seed!r} is not a seed; pass a whole number of 0 or more")


def _by_item(answers: Iterable[Answer]) -> dict[int, dict[str, Answer]]:
    """Item -> reviewer -> answer; two answers of one reviewer on one item are refused (which one counts?)."""
    by_item: dict[int, dict[str, Answer]] = {}
    for answer in answers:
        if not isinstance(answer, Answer):
            raise InputError(f"agreement figures take Answer values, got a {type(answer).__name__}")
        given = by_item.setdefault(answer.item, {})
        if answer.reviewer in given:
            raise InputError(f"item {answer.item} has two answers from one reviewer: pass one answer per reviewer "
                             "and item")
        given[answer.reviewer] = answer
    return by_item


def _units(answers: Iterable[Answer], level: str) -> dict[int, list[dict[str, str]]]:
    """Item -> its units (one verdict; eight analyses), each a mapping reviewer -> value, missing values left out."""
    units = {}
    for item, given in sorted(_by_item(answers).items()):
        if level == "verdict":
            units[item] = [{r: a.verdict for r, a in given.items() if a.verdict is not None}]
        else:
            units[item] = [{r: a.marks[i] for r, a in given.items() if i in a.marks} for i in range(ANALYSES)]
    return units


def _one_item(answers: Sequence[Answer]) -> int:
    items = set(_by_item(answers))
    if len(items) != 1:
        raise InputError(f"pass the answers of exactly one item (got answers of {len(items)} items)")
    return items.pop()


def _counts(unit: Mapping[str, str], cats: Sequence[str]) -> list[int]:
    values = Counter(unit.values())
    return [values[c] for c in cats]


def _coincidences(counts: Sequence[int]) -> np.ndarray:
    """One unit's coincidence matrix, flattened: o_ck = n_c (n_k - [c = k]) / (m - 1) (Krippendorff)."""
    n = np.asarray(counts, dtype=float)
    return ((np.outer(n, n) - np.diag(n)) / (n.sum() - 1)).ravel()


def _pairs(n: int) -> int:
    return n * (n - 1) // 2


def _majority(units: list[dict[str, str]]) -> str | None:
    ranked = Counter(units[0].values()).most_common() if units else []
    if not ranked or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
        return None
    return ranked[0][0]


# --- statistics on summed tallies (rows: resamples; NaN where undefined) ---------------------------------------


def _cohen(sums: np.ndarray, k: int) -> np.ndarray:
    table = sums.reshape(-1, k, k)  # (rows, a's value, b's value)
    n = table.sum(axis=(1, 2))
    observed = np.trace(table, axis1=1, axis2=2) / n
    expected = (table.sum(axis=2) * table.sum(axis=1)).sum(axis=1) / n**2
    return _ratio(observed - expected, 1 - expected)


def _fleiss(sums: np.ndarray, m: int) -> np.ndarray:
    shares, units, values = sums[:, 0], sums[:, 1], sums[:, 2:]  # values: (rows, categories)
    observed = shares / units
    expected = ((values / (units * m)[:, None]) ** 2).sum(axis=1)
    return _ratio(observed - expected, 1 - expected)


def _alpha(sums: np.ndarray, k: int) -> np.ndarray:
    o = sums.reshape(-1, k, k)
    n_c = o.sum(axis=2)
    n = n_c.sum(axis=1)
    disagreement = n - np.trace(o, axis1=1, axis2=2)
    expected = (n**2 - (n_c**2).sum(axis=1)) / (n - 1)
    return 1 - _ratio(disagreement, expected)


def _ratio(top: np.ndarray, bottom: np.ndarray) -> np.ndarray:
    """top / bottom, NaN where bottom is 0 (no variation: the figure is undefined)."""
    out = np.full(top.shape, np.nan)
    defined = np.abs(bottom) > 1e-12
    np.divide(top, bottom, out=out, where=defined)
    return out


def _package_alpha(value_counts: np.ndarray) -> float:
    """The `krippendorff` package's nominal alpha of units x values counts, the value domain fixed."""
    import krippendorff

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(krippendorff.alpha(value_counts=value_counts, value_domain=list(range(value_counts.shape[1])),
                                        level_of_measurement="nominal"))


def _estimate(matrix: np.ndarray, statistic: Callable[[np.ndarray], np.ndarray], *, resamples: int, seed: int,
              point: float | None = None) -> Estimate:
    """The figure on every item (`matrix`: items x tallies) and its percentile bootstrap interval over items."""
    value = point if point is not None else float(statistic(matrix.sum(axis=0, keepdims=True))[0])
    low = high = None
    if resamples:
        drawn = _bootstrap(matrix, statistic, resamples=resamples, seed=seed)
        drawn = drawn[~np.isnan(drawn)]
        if drawn.size:
            low, high = (float(x) for x in np.percentile(drawn, INTERVAL))
    return Estimate(value, low, high, len(matrix))


def _bootstrap(matrix: np.ndarray, statistic: Callable[[np.ndarray], np.ndarray], *, resamples: int,
               seed: int) -> np.ndarray:
    """The statistic on `resamples` draws of the items with replacement (seeded); NaN where undefined."""
    rng = np.random.default_rng(seed)
    n = len(matrix)
    block = max(1, _BLOCK // n)
    out = []
    for start in range(0, resamples, block):
        rows = min(block, resamples - start)
        picks = rng.integers(0, n, size=(rows, n))  # (rows, n): which items each resample drew
        flat = (picks + n * np.arange(rows)[:, None]).ravel()
        weights = np.bincount(flat, minlength=rows * n).reshape(rows, n)  # times each item was drawn
        with np.errstate(invalid="ignore", divide="ignore"):
            out.append(statistic(weights @ matrix))
    return np.concatenate(out)


# --- the report's parts ----------------------------------------------------------------------------------------


def _pair(answers: list[Answer], by_item: dict[int, dict[str, Answer]], a: str, b: str, *, resamples: int,
          seed: int) -> PairAgreement:
    verdicts = [(g[a].verdict, g[b].verdict) for g in by_item.values() if a in g and b in g
                and g[a].verdict is not None and g[b].verdict is not None]
    marks = [(g[a].marks[i], g[b].marks[i]) for g in by_item.values() if a in g and b in g
             for i in range(ANALYSES) if i in g[a].marks and i in g[b].marks]
    boot = {"resamples": resamples, "seed": seed}
    return PairAgreement(a=a, b=b, items=len(verdicts), verdict_agreement=_share(verdicts), analyses=len(marks),
                         analyses_agreement=_share(marks),
                         verdict_kappa=cohen_kappa(answers, a, b, level="verdict", **boot),
                         analyses_kappa=cohen_kappa(answers, a, b, level="analyses", **boot))


def _share(pairs: list[tuple[str, str]]) -> float | None:
    return sum(x == y for x, y in pairs) / len(pairs) if pairs else None


def _item_report(item: int, answers: tuple[Answer, ...]) -> ItemReport:
    verdicts = {a.verdict for a in answers if a.verdict is not None}
    return ItemReport(item=item, answers=answers, verdict=item_agreement(answers, level="verdict"),
                      analyses=item_agreement(answers, level="analyses"), disagreed=len(verdicts) > 1)


def _cell(x: float | None) -> str | float:
    return "" if x is None else round(x, 3)


def _estimate_cells(estimate: Estimate, prefix: str = "") -> dict[str, str | int | float]:
    return {f"{prefix}value": _cell(estimate.value), f"{prefix}low": _cell(estimate.low),
            f"{prefix}high": _cell(estimate.high)}


def _pair_row(pair: PairAgreement) -> dict[str, str | int | float]:
    return {"reviewer a": pair.a, "reviewer b": pair.b,
            "items": pair.items, "verdict agreement": _cell(pair.verdict_agreement),
            **_estimate_cells(pair.verdict_kappa, "verdict kappa "),
            "analyses": pair.analyses, "analyses agreement": _cell(pair.analyses_agreement),
            **_estimate_cells(pair.analyses_kappa, "analyses kappa ")}


def _item_row(item: ItemReport) -> dict[str, str | int | float]:
    verdicts = " ".join(a.verdict or "-" for a in sorted(item.answers, key=lambda a: a.reviewer))
    return {"item": item.item, "answered": item.verdict.answered, "verdicts": verdicts,
            "majority": item.verdict.majority or "", "verdict agreement": _cell(item.verdict.agreement),
            "analyses agreement": _cell(item.analyses.agreement), "agreed marks": len(item.analyses.marks),
            "disagreed": "yes" if item.disagreed else "no"}
