"""Agreement figures, pinned against maintained implementations on a table of rounds.

Cohen's kappa against scikit-learn's `cohen_kappa_score`, Fleiss' kappa against statsmodels' `fleiss_kappa` (with
`aggregate_raters`), Krippendorff's alpha against the `krippendorff` package on a raters x units matrix with
missing values (our point value goes through the package's value-count input; our bootstrap uses our own formula,
pinned here too). Where the reference says NaN, ours is None with a reason.
"""

from __future__ import annotations

import json
import math
import random
import warnings

import krippendorff
import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score
from statsmodels.stats.inter_rater import aggregate_raters
from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss_kappa

from reflectrm import agreement
from reflectrm.agreement import (
    Answer, Estimate, agreed_marks, agreement_report, cohen_kappa, fleiss_kappa, item_agreement, krippendorff_alpha,
)
from reflectrm.errors import ConfigError, InputError

MARK = {"r": "right", "w": "wrong"}


def verdict_round(spec: dict[str, str]) -> list[Answer]:
    """reviewer -> one character per item (items 1, 2, ...): "A"/"B", "-" answered None, "." no answer at all."""
    return [Answer(item, reviewer, None if c == "-" else c) for reviewer, row in spec.items()
            for item, c in enumerate(row, start=1) if c != "."]


def marks_round(spec: dict[str, list[str]]) -> list[Answer]:
    """reviewer -> per item eight characters "r"/"w"/"-" (not marked), or "." for no answer at all."""
    return [Answer(item, reviewer, "A", {i: MARK[c] for i, c in enumerate(token) if c in MARK})
            for reviewer, tokens in spec.items() for item, token in enumerate(tokens, start=1) if token != "."]


def reference_units(answers: list[Answer], level: str) -> list[dict[str, str]]:
    """Every unit as reviewer -> value (missing left out), built straight from the answers."""
    items = sorted({a.item for a in answers})
    if level == "verdict":
        return [{a.reviewer: a.verdict for a in answers if a.item == item and a.verdict} for item in items]
    return [{a.reviewer: a.marks[i] for a in answers if a.item == item and i in a.marks}
            for item in items for i in range(8)]


def reference_cohen(units, a, b, cats) -> float:
    both = [(u[a], u[b]) for u in units if a in u and b in u]
    if not both:
        return math.nan
    return float(cohen_kappa_score([x for x, _ in both], [y for _, y in both], labels=list(cats)))


def reference_fleiss(units, cats) -> tuple[float, int]:
    """statsmodels' Fleiss' kappa over the units with the most common rater count (ties: the larger); its m."""
    sizes = [len(u) for u in units if len(u) >= 2]
    if not sizes:
        return math.nan, 0
    m = max(set(sizes), key=lambda s: (sizes.count(s), s))
    data = np.array([[cats.index(v) for v in u.values()] for u in units if len(u) == m])
    table, _ = aggregate_raters(data, n_cat=len(cats))
    return float(sm_fleiss_kappa(table, method="fleiss")), m


def reference_alpha(units, cats) -> float:
    raters = sorted({r for u in units for r in u})
    data = np.array([[cats.index(u[r]) if r in u else np.nan for u in units] for r in raters], dtype=float)
    try:
        return float(krippendorff.alpha(reliability_data=data, level_of_measurement="nominal",
                                        value_domain=list(range(len(cats)))))
    except ValueError:  # no unit with two values
        return math.nan


def same(ours: Estimate, reference: float) -> bool:
    if math.isnan(reference):
        return ours.value is None and ours.why != "" and ours.low is None and ours.high is None
    return ours.value == pytest.approx(reference, abs=1e-9) and ours.why == ""


ROUNDS = [
    # (answers, level, Cohen's kappa of the first two reviewers when known by hand)
    pytest.param(verdict_round({"ann": "AABBAB", "bob": "AABBAB"}), "verdict", 1.0, id="perfect-agreement"),
    pytest.param(verdict_round({"ann": "AABB", "bob": "ABAB"}), "verdict", 0.0, id="chance-level"),
    pytest.param(verdict_round({"ann": "AABB", "bob": "BBAA"}), "verdict", -1.0, id="systematic-disagreement"),
    # trap: one reviewer constant is kappa 0 (p_o = p_e), not undefined
    pytest.param(verdict_round({"ann": "AAAA", "bob": "AABB"}), "verdict", 0.0, id="one-reviewer-constant"),
    pytest.param(verdict_round({"ann": "AABBABAB", "bob": "AABBBBAA", "cy": "ABBBABAA"}), "verdict", None,
                 id="three-raters"),
    pytest.param(verdict_round({"ann": "AABBABABBA", "bob": "AABBBBAABA", "cy": "ABBBABAABB",
                                "dee": "AABAABABBA"}), "verdict", None, id="four-raters"),
    # trap: a None verdict is missing, not a third category
    pytest.param(verdict_round({"ann": "AA-BBAB", "bob": "A-BBBAB", "cy": "AAB-BBA"}), "verdict", None,
                 id="missing-none-verdicts"),
    # trap: reviewers without an answer on an item at all
    pytest.param(verdict_round({"ann": "AAB.BA", "bob": ".ABBBA", "cy": "AB.ABA"}), "verdict", None,
                 id="absent-answers"),
    # trap: no variation: every figure undefined (the references say NaN), never 1.0 or a division error
    pytest.param(verdict_round({"ann": "AAA", "bob": "AAA", "cy": "AAA"}), "verdict", None, id="single-category"),
    pytest.param(verdict_round({"ann": "A", "bob": "B"}), "verdict", 0.0, id="one-item"),
    # trap: units rated by 2 and by 3 reviewers: Fleiss takes the most common count (2), alpha takes all
    pytest.param(verdict_round({"ann": "AABAB", "bob": "AB-AB", "cy": "-BBA-"}), "verdict", None,
                 id="unequal-rater-counts"),
    pytest.param(marks_round({"ann": ["rrwwrrww", "rwrwrwrw"], "bob": ["rrwwrrww", "rwrwrwrw"]}), "analyses", 1.0,
                 id="analyses-perfect"),
    # trap: an unmarked analysis is missing, and a reviewer marking nothing on an item adds nothing
    pytest.param(marks_round({"ann": ["rr--wwrr", "rw------", "--------"],
                              "bob": ["rw--ww-r", "rwww----", "rrww----"]}), "analyses", None,
                 id="analyses-absent-marks"),
    pytest.param(marks_round({"ann": ["rrwwrrww", "rw-wrw--", "."], "bob": ["rwwwrr-w", ".", "rrrrwwww"],
                              "cy": ["rrwwr-ww", "rwrw-wrw", "rrrwwwww"]}), "analyses", None,
                 id="analyses-three-raters-unequal"),
    pytest.param(marks_round({"ann": ["rrrr----"], "bob": ["rrr-----"]}), "analyses", None,
                 id="analyses-single-category"),
]


@pytest.mark.parametrize("answers, level, hand_kappa", ROUNDS)
def test_figures_match_the_maintained_implementations(answers, level, hand_kappa):
    cats = agreement.CATEGORIES[level]
    units = reference_units(answers, level)
    a, b = sorted({x.reviewer for x in answers})[:2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the references warn where they return NaN
        cohen, (fleiss, _), alpha = reference_cohen(units, a, b, cats), reference_fleiss(units, cats), \
            reference_alpha(units, cats)
    ours = {"cohen": cohen_kappa(answers, a, b, level=level, resamples=50),
            "fleiss": fleiss_kappa(answers, level=level, resamples=50),
            "alpha": krippendorff_alpha(answers, level=level, resamples=50)}
    assert {k: same(v, r) for (k, v), r in zip(ours.items(), (cohen, fleiss, alpha))} == dict.fromkeys(ours, True)
    if hand_kappa is not None:
        assert ours["cohen"].value == pytest.approx(hand_kappa)


UNDEFINED = {"single-category", "analyses-single-category"}


@pytest.mark.parametrize("answers, level, hand_kappa", [p for p in ROUNDS if p.id not in UNDEFINED])
def test_the_bootstrap_formula_of_alpha_is_the_package_alpha(answers, level, hand_kappa):
    # the interval resamples our coincidence-matrix formula: on all items it must give the package's point value
    cats = agreement.CATEGORIES[level]
    units = [agreement._counts(u, cats) for u in reference_units(answers, level)]
    pairable = [c for c in units if sum(c) >= 2]
    total = sum(agreement._coincidences(c) for c in pairable)[None]
    assert agreement._alpha(total, len(cats))[0] == pytest.approx(agreement._package_alpha(np.array(pairable, float)))


def test_fleiss_uses_the_units_with_the_most_common_rater_count():
    answers = verdict_round({"ann": "AABAB", "bob": "AB-AB", "cy": "-BBA-"})  # items rated by 2, 3, 2, 3, 2
    assert fleiss_kappa(answers, resamples=0).items == 3
    assert krippendorff_alpha(answers, resamples=0).items == 5


# --- the bootstrap ---------------------------------------------------------------------------------------------


def noisy_round(items: int = 40, seed: int = 7) -> list[Answer]:
    """Three reviewers copying a truth with 85 % accuracy, each answering about 90 % of the items."""
    rng = random.Random(seed)
    answers = []
    for item in range(1, items + 1):
        truth = rng.choice("AB")
        for reviewer in ("ann", "bob", "cy"):
            if rng.random() < 0.9:
                verdict = truth if rng.random() < 0.85 else "AB".replace(truth, "")
                marks = {i: rng.choice(("right", "right", "wrong")) for i in range(8) if rng.random() < 0.7}
                answers.append(Answer(item, reviewer, verdict, marks))
    return answers


FIGURES = [
    pytest.param(lambda answers, **kw: cohen_kappa(answers, "ann", "bob", **kw), id="cohen"),
    pytest.param(fleiss_kappa, id="fleiss"),
    pytest.param(krippendorff_alpha, id="alpha"),
]


@pytest.mark.parametrize("level", ["verdict", "analyses"])
@pytest.mark.parametrize("figure", FIGURES)
def test_the_interval_holds_the_value_and_is_seeded(figure, level):
    answers = noisy_round()
    first = figure(answers, level=level, resamples=500, seed=3)
    assert first.value is not None and first.low <= first.value <= first.high and first.low < first.high
    assert figure(answers, level=level, resamples=500, seed=3) == first  # same seed, same interval
    other = figure(answers, level=level, resamples=500, seed=4)
    assert other.value == first.value and (other.low, other.high) != (first.low, first.high)
    bare = figure(answers, level=level, resamples=0)
    assert (bare.value, bare.low, bare.high, bare.items) == (first.value, None, None, first.items)


def test_the_interval_is_the_percentile_bootstrap_of_the_reference_figures(monkeypatch):
    # resample r draws the entering items (by id) default_rng(seed).integers(0, n, size=(resamples, n))[r]: the
    # same draws through scikit-learn and the krippendorff package give the same interval
    answers, resamples = noisy_round(), 300
    verdicts = {a.item: {} for a in answers}
    for a in answers:
        if a.verdict:
            verdicts[a.item][a.reviewer] = a.verdict
    both = [v for _, v in sorted(verdicts.items()) if "ann" in v and "bob" in v]
    picks = np.random.default_rng(5).integers(0, len(both), size=(resamples, len(both)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        drawn = [cohen_kappa_score([both[i]["ann"] for i in p], [both[i]["bob"] for i in p]) for p in picks]
    low, high = np.percentile([d for d in drawn if not math.isnan(d)], [2.5, 97.5])
    ours = cohen_kappa(answers, "ann", "bob", resamples=resamples, seed=5)
    assert (ours.low, ours.high) == (pytest.approx(low), pytest.approx(high))

    items = sorted({a.item for a in answers})
    units = {item: reference_units([a for a in answers if a.item == item], "analyses") for item in items}
    items = [item for item in items if any(len(u) >= 2 for u in units[item])]
    picks = np.random.default_rng(6).integers(0, len(items), size=(resamples, len(items)))
    drawn = [reference_alpha([u for i in p for u in units[items[i]]], agreement.CATEGORIES["analyses"])
             for p in picks]
    low, high = np.percentile(drawn, [2.5, 97.5])
    ours = krippendorff_alpha(answers, level="analyses", resamples=resamples, seed=6)
    assert (ours.low, ours.high) == (pytest.approx(low), pytest.approx(high))
    monkeypatch.setattr(agreement, "_BLOCK", 7)  # trap: a large round draws in blocks; the draws stay the same
    assert krippendorff_alpha(answers, level="analyses", resamples=resamples, seed=6) == ours


def test_undefined_resamples_are_left_out_of_the_interval():
    # two items: a resample that draws one item twice has no variation; the rest agree perfectly
    got = cohen_kappa(verdict_round({"ann": "AB", "bob": "AB"}), "ann", "bob", resamples=200)
    assert (got.value, got.low, got.high) == (1.0, 1.0, 1.0)


@pytest.mark.parametrize("spec, level, expected", [
    # trap: items one reviewer answered alone, or with a None verdict, do not count
    pytest.param({"ann": "AB-AB.", "bob": "ABBB.A"}, "verdict", {"cohen": 3, "fleiss": 3, "alpha": 3},
                 id="verdict-pairs-only"),
    pytest.param({"ann": "AAB", "bob": "ABA", "cy": "..B"}, "verdict", {"cohen": 3, "fleiss": 2, "alpha": 3},
                 id="fleiss-drops-other-counts"),
])
def test_items_count_the_items_that_entered(spec, level, expected):
    answers = verdict_round(spec)
    got = {"cohen": cohen_kappa(answers, "ann", "bob", level=level, resamples=0).items,
           "fleiss": fleiss_kappa(answers, level=level, resamples=0).items,
           "alpha": krippendorff_alpha(answers, level=level, resamples=0).items}
    assert got == expected


def test_analyses_items_count_items_not_analyses():
    answers = marks_round({"ann": ["rrww----", "--------", "rw------"], "bob": ["rwww----", "rrrr----", "."]})
    assert cohen_kappa(answers, "ann", "bob", level="analyses", resamples=0).items == 1  # item 1 only
    assert krippendorff_alpha(answers, level="analyses", resamples=0).items == 1


# --- one item ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("verdicts, answered, pairs, share, majority", [
    pytest.param("AAB", 3, 3, 1 / 3, "A", id="two-against-one"),
    pytest.param("AB", 2, 1, 0.0, None, id="tie-no-majority"),
    pytest.param("AABB", 4, 6, 2 / 6, None, id="two-two-tie"),
    pytest.param("A-", 1, 0, None, "A", id="one-answer-no-pair"),  # trap: the skipped answer is not a value
    pytest.param("--", 0, 0, None, None, id="nobody-answered"),
])
def test_item_agreement_on_verdicts(verdicts, answered, pairs, share, majority):
    answers = [Answer(5, f"r{i}", None if v == "-" else v) for i, v in enumerate(verdicts)]
    got = item_agreement(answers, level="verdict")
    assert (got.item, got.answered, got.pairs, got.majority, got.marks) == (5, answered, pairs, majority, {})
    assert got.agreement == (None if share is None else pytest.approx(share))


@pytest.mark.parametrize("tokens, agreed", [
    pytest.param(["rw------", "rw------"], {0: "right", 1: "wrong"}, id="both-agree"),
    pytest.param(["rw------", "rr------"], {0: "right"}, id="one-index-contradicted"),
    pytest.param(["r-------", "--------"], {}, id="one-mark-is-not-agreement"),  # trap: needs two marks
    pytest.param(["r-------", "--------", "r-------"], {0: "right"}, id="unmarked-reviewer-ignored"),
    pytest.param(["w-------", "w-------", "r-------"], {}, id="any-contradiction-vetoes"),
    pytest.param(["--------", "--------"], {}, id="no-marks"),
])
def test_agreed_marks(tokens, agreed):
    answers = [Answer(9, f"r{i}", "A", {j: MARK[c] for j, c in enumerate(t) if c in MARK})
               for i, t in enumerate(tokens)]
    assert agreed_marks(answers) == agreed
    assert item_agreement(answers, level="analyses").marks == agreed


def test_item_agreement_on_analyses_pools_pairs_over_indices():
    answers = marks_round({"ann": ["rw------"], "bob": ["rr------"], "cy": ["r-------"]})
    got = item_agreement(answers, level="analyses")
    # index 0: three rights (3 pairs agree); index 1: w vs r (1 pair, disagrees)
    assert (got.answered, got.pairs, got.agreement, got.majority) == (3, 4, 0.75, None)


# --- the report ---------------------------------------------------------------------------------------------------


def three_reviewer_round() -> list[Answer]:
    """Six items, each given to two of three reviewers (overlap 2); bob skipped item 4's verdict."""
    return [
        Answer(1, "ann", "A", {0: "right", 1: "wrong"}), Answer(1, "bob", "A", {0: "right", 1: "right"}),
        Answer(2, "ann", "B", {0: "wrong"}), Answer(2, "cy", "B", {0: "wrong", 3: "right"}),
        Answer(3, "bob", "A"), Answer(3, "cy", "B", {2: "wrong"}),
        Answer(4, "ann", "A", {5: "right"}), Answer(4, "bob", None, {5: "right"}),
        Answer(5, "bob", "B", {1: "wrong"}), Answer(5, "cy", "B", {1: "wrong"}),
        Answer(6, "ann", "A"), Answer(6, "cy", "A"),
    ]


def test_report_on_a_three_reviewer_round_with_overlap_two_and_missing_answers():
    answers = three_reviewer_round()
    report = agreement_report(answers, resamples=200, seed=1)
    assert report.reviewers == ("ann", "bob", "cy")
    assert {level: sorted(figures) for level, figures in report.overall.items()} == {
        "verdict": ["alpha", "fleiss"], "analyses": ["alpha", "fleiss"]}  # no Cohen with three reviewers
    for level in ("verdict", "analyses"):
        assert report.overall[level]["fleiss"] == fleiss_kappa(answers, level=level, resamples=200, seed=1)
        assert report.overall[level]["alpha"] == krippendorff_alpha(answers, level=level, resamples=200, seed=1)
    pairs = {(p.a, p.b): (p.items, p.verdict_agreement, p.analyses, p.analyses_agreement) for p in report.pairs}
    assert pairs == {("ann", "bob"): (1, 1.0, 3, 2 / 3), ("ann", "cy"): (2, 1.0, 1, 1.0),
                     ("bob", "cy"): (2, 0.5, 1, 1.0)}
    ann_bob = next(p for p in report.pairs if p.b == "bob")
    assert ann_bob.analyses_kappa == cohen_kappa(answers, "ann", "bob", level="analyses", resamples=200, seed=1)
    assert [i.item for i in report.items if i.disagreed] == [3]
    item4 = report.items[3]
    assert (item4.verdict.answered, item4.verdict.agreement, item4.verdict.majority) == (1, None, "A")
    assert item4.analyses.marks == {5: "right"}
    assert report.items[0].analyses.marks == {0: "right"}


def test_report_of_two_reviewers_has_cohen():
    answers = noisy_round(items=20)
    two = [a for a in answers if a.reviewer != "cy"]
    report = agreement_report(two, resamples=100)
    for level in ("verdict", "analyses"):
        assert report.overall[level]["cohen"] == cohen_kappa(two, "ann", "bob", level=level, resamples=100)


def test_report_to_dict_is_json_and_rows_are_plain():
    report = agreement_report(three_reviewer_round() + verdict_round({"dee": "AAAA"}), resamples=50)
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert data["overall"]["verdict"]["alpha"]["value"] == report.overall["verdict"]["alpha"].value
    assert data["items"][0]["answers"][0]["marks"] == {"0": "right", "1": "wrong"}
    tables = report.rows()
    assert [len(tables[k]) for k in ("overall", "pairs", "items")] == [4, 6, 6]
    cells = [v for rows in tables.values() for row in rows for v in row.values()]
    assert {type(v) for v in cells} <= {str, int, float}


def test_an_undefined_figure_says_why_in_the_report_and_its_rows():
    report = agreement_report(verdict_round({"ann": "AA", "bob": "AA"}), resamples=20)
    cohen = report.overall["verdict"]["cohen"]
    assert cohen.value is None and "no variation" in cohen.why
    [row] = [r for r in report.rows()["overall"] if r["level"] == "verdict" and r["figure"] == "cohen"]
    assert (row["value"], row["low"], row["note"]) == ("", "", cohen.why)


# --- hostile input --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("build, error, names", [
    pytest.param(lambda: Answer("3", "ann", "A"), InputError, "Answer.item", id="item-a-string"),
    pytest.param(lambda: Answer(True, "ann", "A"), InputError, "Answer.item", id="item-a-bool"),
    pytest.param(lambda: Answer(1, " ", "A"), InputError, "Answer.reviewer", id="reviewer-blank"),
    pytest.param(lambda: Answer(1, "ann", "maybe"), InputError, "Answer.verdict", id="verdict-unknown"),
    pytest.param(lambda: Answer(1, "ann", "a"), InputError, "Answer.verdict", id="verdict-lower-case"),
    pytest.param(lambda: Answer(1, "ann", ["A"]), InputError, "Answer.verdict", id="verdict-a-list"),
    pytest.param(lambda: Answer(1, "ann", "A", {8: "right"}), InputError, "analysis index", id="index-8"),
    pytest.param(lambda: Answer(1, "ann", "A", {"0": "right"}), InputError, "analysis index", id="index-a-string"),
    pytest.param(lambda: Answer(1, "ann", "A", {0: "maybe"}), InputError, "'right' or", id="mark-unknown"),
    pytest.param(lambda: Answer(1, "ann", "A", ["right"]), InputError, "Answer.marks", id="marks-a-list"),
    pytest.param(lambda: fleiss_kappa([], level="both"), ConfigError, "level", id="level-unknown"),
    pytest.param(lambda: fleiss_kappa([], resamples=-1), ConfigError, "resamples", id="resamples-negative"),
    pytest.param(lambda: krippendorff_alpha([], resamples=2.5), ConfigError, "resamples", id="resamples-a-float"),
    pytest.param(lambda: agreement_report([], seed=-3), ConfigError, "seed", id="seed-negative"),
    pytest.param(lambda: cohen_kappa([], "ann", "ann"), ConfigError, "same reviewer", id="cohen-one-reviewer"),
    pytest.param(lambda: cohen_kappa([Answer(1, "ann", "A"), Answer(1, "ann", "B")], "ann", "bob"), InputError,
                 "two answers from one reviewer", id="duplicate-answer"),
    pytest.param(lambda: fleiss_kappa([("1", "ann", "A")]), InputError, "Answer values", id="not-an-answer"),
    pytest.param(lambda: item_agreement([Answer(1, "ann", "A"), Answer(2, "bob", "A")]), InputError,
                 "exactly one item", id="item-agreement-two-items"),
    pytest.param(lambda: agreed_marks([]), InputError, "exactly one item", id="agreed-marks-no-answer"),
])
def test_bad_input_is_refused_in_one_line_naming_the_fix(build, error, names):
    with pytest.raises(error) as caught:
        build()
    message = str(caught.value)
    assert names in message and "\n" not in message
    assert "maybe" not in message  # a value from data is not echoed


def test_an_answer_keeps_its_own_copy_of_the_marks():
    marks = {0: "right"}
    answer = Answer(1, "ann", "A", marks)
    marks[1] = "wrong"
    assert answer.marks == {0: "right"} and hash(answer) == hash(Answer(1, "ann", "A", {0: "right"}))


@pytest.mark.parametrize("figure", [fleiss_kappa, krippendorff_alpha], ids=["fleiss", "alpha"])
def test_no_pairable_unit_is_undefined_with_a_reason(figure):
    got = figure(verdict_round({"ann": "A.", "bob": ".B"}))
    assert (got.value, got.items) == (None, 0) and "two reviewers" in got.why
    got = cohen_kappa(verdict_round({"ann": "A.", "bob": ".B"}), "ann", "bob")
    assert (got.value, got.items) == (None, 0) and got.why
