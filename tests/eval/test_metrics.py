"""Metrics and official aggregations against hand-computed cases."""

from __future__ import annotations

import math

import pytest

from reflectrm.eval.metrics import (
    bootstrap,
    calibration,
    coverage_curve,
    mcnemar_exact,
    paired_bootstrap,
    proportion,
    wilson_interval,
)
from reflectrm.eval.scoring import ItemResult, aggregate, build_report


@pytest.mark.parametrize(
    ("only_a", "only_b", "p"),
    [
        pytest.param(0, 0, 1.0, id="no-discordant-items"),
        pytest.param(0, 5, 2 / 32, id="all-one-way"),  # 2 * C(5,0) / 2^5
        pytest.param(1, 4, 2 * (1 + 5) / 32, id="one-against-four"),
        pytest.param(3, 3, 1.0, id="balanced-capped-at-1"),  # trap: 2 * tail > 1
        pytest.param(2, 10, 2 * (1 + 12 + 66) / 4096, id="two-against-ten"),
    ],
)
def test_mcnemar_exact_matches_the_binomial_tail(only_a: int, only_b: int, p: float) -> None:
    assert mcnemar_exact(only_a, only_b) == pytest.approx(p)
    assert mcnemar_exact(only_b, only_a) == pytest.approx(p)  # symmetric


# Wilson 95 % intervals, computed by hand from (p + z^2/2n +- z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)
@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [
        pytest.param(1, 20, 0.0089, 0.2361, id="1-of-20"),  # trap: the bootstrap read [0, 15.0], narrower than 0/20
        pytest.param(0, 20, 0.0, 0.1611, id="0-of-20"),  # trap: exactly 0 at the bottom, no -1e-17
        pytest.param(19, 20, 0.7639, 0.9911, id="19-of-20"),  # trap: the bootstrap read [85, 100]
        pytest.param(20, 20, 0.8389, 1.0, id="20-of-20"),  # trap: not [1.0, 1.0]
        pytest.param(6, 7, 0.4869, 0.9743, id="6-of-7"),  # the demo judge's reflections choosing critique 1
        pytest.param(0, 0, 0.0, 1.0, id="no-items"),  # nothing known: the whole range
    ],
)
def test_wilson_interval_matches_the_hand_computed_bounds(k: int, n: int, low: float, high: float) -> None:
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(low, abs=1e-4) and hi == pytest.approx(high, abs=1e-4)


def test_a_proportion_interval_is_monotone_and_never_narrower_with_fewer_items() -> None:
    for n in range(1, 41):
        bounds = [wilson_interval(k, n) for k in range(n + 1)]
        assert all(a[0] < b[0] and a[1] < b[1] for a, b in zip(bounds, bounds[1:]))  # monotone in k
    for n in range(1, 21):  # the same share seen in half the items is at least as wide
        for k in range(n + 1):
            few, many = wilson_interval(k, n), wilson_interval(2 * k, 2 * n)
            assert few[1] - few[0] >= many[1] - many[0]
    with pytest.raises(ValueError, match="0 <= k <= n"):
        wilson_interval(3, 2)


def test_a_proportion_takes_the_wilson_interval_and_other_means_the_bootstrap() -> None:
    est = bootstrap([1.0] * 20)
    assert (est.value, est.high, est.n) == (1.0, 1.0, 20) and est.low == pytest.approx(0.8389, abs=1e-4)
    one, none = bootstrap([1.0] + [0.0] * 19), bootstrap([0.0] * 20)
    assert one.high > none.high  # trap: the percentile bootstrap put 1/20's top below 0/20's
    assert bootstrap([0.5] * 4).to_dict() == {"value": 0.5, "low": 0.5, "high": 0.5, "n": 4}  # not a proportion
    est = bootstrap([1.0] * 60 + [0.0] * 40, seed=3)
    assert est.value == 0.6 and est.low < 0.6 < est.high
    assert 0.07 < est.high - 0.6 < 0.13 and 0.07 < 0.6 - est.low < 0.13
    assert math.isnan(bootstrap([]).value)
    with pytest.raises(ValueError, match="0.0/1.0"):
        proportion([0.5])


def test_paired_bootstrap_measures_b_minus_a_on_the_same_items() -> None:
    a = [1.0, 0.0, 1.0, 0.0] * 10
    b = [1.0, 1.0, 1.0, 0.0] * 10
    est = paired_bootstrap(a, b)
    assert est.value == pytest.approx(0.25) and est.low > 0
    with pytest.raises(ValueError, match="differ in length"):
        paired_bootstrap([1.0], [1.0, 0.0])


def test_a_paired_difference_where_every_item_moved_alike_is_bounded_exactly() -> None:
    same = paired_bootstrap([1.0, 0.0] * 10, [1.0, 0.0] * 10)  # no item differs: not "exactly 0"
    edge = 1 - 0.025 ** (1 / 20)
    assert same.value == 0.0 and same.low == pytest.approx(-edge) and same.high == pytest.approx(edge)
    up, down = paired_bootstrap([0.0] * 5, [1.0] * 5), paired_bootstrap([1.0] * 5, [0.0] * 5)
    assert (up.value, up.high) == (1.0, 1.0) and up.low == pytest.approx(0.025 ** (1 / 5))
    assert (down.value, down.low) == (-1.0, -1.0) and down.high == pytest.approx(-(0.025 ** (1 / 5)))
    assert paired_bootstrap([0.5] * 4, [0.5] * 4).to_dict() == {"value": 0.0, "low": 0.0, "high": 0.0, "n": 4}
    assert paired_bootstrap([], []).n == 0


def test_calibration_buckets_and_ece_by_hand() -> None:
    # bucket [0.2, 0.3): two items at 0.25, one right -> |0.5 - 0.25| = 0.25, weight 2/4
    # bucket [0.9, 1.0]: two items at 0.95 and 1.0 (the top edge joins the last bucket), both right -> 0.025, w 2/4
    buckets, ece = calibration([0.25, 0.25, 0.95, 1.0], [True, False, True, True])
    assert [(b.low, b.n) for b in buckets] == [(0.2, 2), (0.9, 2)]
    assert ece == pytest.approx(0.5 * 0.25 + 0.5 * 0.025)


def test_accuracy_versus_coverage_keeps_the_most_confident() -> None:
    curve = coverage_curve([0.9, 0.8, 0.2, 0.1], [True, True, False, False], coverages=(1.0, 0.5))
    assert curve == [(1.0, 0.1, 0.5), (0.5, 0.8, 1.0)]


def _item(item_id: str, correct: bool, **kw) -> ItemResult:
    swapped = kw.pop("swapped", False)
    label = 2 if swapped else 1  # the better response moves with the swap
    return ItemResult(item_id=item_id, strategy=kw.pop("strategy", "reflectrm"), swapped=swapped,
                      subset=kw.pop("subset", "s"), label=label, verdict=label if correct else 3 - label, **kw)


def test_rewardbench_weights_subsets_inside_a_section_and_averages_sections() -> None:
    items = ([_item(f"e{k}", k < 1, subset="mt-bench-easy") for k in range(2)]  # 0.5, weight 28
             + [_item(f"m{k}", True, subset="mt-bench-med") for k in range(2)]  # 1.0, weight 40
             + [_item(f"h{k}", False, subset="hep-go") for k in range(2)]  # Reasoning: 0.0
             + [_item(f"p{k}", True, subset="math-prm") for k in range(2)])  # 1.0, weight 984 vs hep-go 164
    result = aggregate("rewardbench", items)
    chat = (0.5 * 28 + 1.0 * 40) / 68
    reasoning = 984 / (984 + 164)
    assert result["sections"] == pytest.approx({"Chat": chat, "Reasoning": reasoning})
    assert result["score"] == pytest.approx((chat + reasoning) / 2)


def test_best_of_n_is_right_only_when_the_best_beats_every_loser() -> None:
    items = [_item("g1:0", True, meta={"group": "g1", "part": "bon"}, subset="bon/Helpfulness/x"),
             _item("g1:1", False, meta={"group": "g1", "part": "bon"}, subset="bon/Helpfulness/x"),
             _item("g2:0", True, meta={"group": "g2", "part": "bon"}, subset="bon/Helpfulness/x"),
             _item("p1", True, meta={"part": "pairwise"}, subset="pairwise/Helpfulness/x"),
             _item("p2", False, meta={"part": "pairwise"}, subset="pairwise/Helpfulness/x")]
    result = aggregate("rmb", items)
    assert result["parts"] == {"Helpfulness bon": 0.5, "Helpfulness pairwise": 0.5}
    rb2 = aggregate("rewardbench2", [_item("a:0", True, meta={"group": "a"}), _item("a:1", True, meta={"group": "a"}),
                                     _item("a:2", False, meta={"group": "a"}), _item("b:0", True, meta={"group": "b"})])
    assert rb2["score"] == 0.5


def test_rm_bench_levels_are_cell_means_and_the_total_averages_nine_cells() -> None:
    items = []
    for i in range(3):
        for j in range(3):
            level = "normal" if i == j else ("hard" if i < j else "easy")
            items.append(_item(f"1:{i}{j}", i >= j, subset="chat", meta={"level": level, "cell": f"{i}{j}"}))
    result = aggregate("rm-bench", items)
    assert result["domains"]["chat"] == {"easy": 1.0, "normal": 1.0, "hard": 0.0, "total": pytest.approx(6 / 9)}


def test_report_counts_ties_and_skips_apart_and_scores_both_orders() -> None:
    items = [
        _item("a", True), _item("a", True, swapped=True),  # right both ways
        _item("b", True), _item("b", False, swapped=True),  # picked position 1 both times: a flip
        ItemResult(item_id="t", strategy="reflectrm", swapped=False, subset="s", label=None, tie=True, verdict=1),
        ItemResult(item_id="x", strategy="reflectrm", swapped=False, subset="long", label=1,
                   skipped="too-long: the prompt is 9000 tokens"),
    ]
    report = build_report(items, benchmark="b", scoring="micro")
    s = report["strategies"]["reflectrm"]
    assert s["accuracy"]["value"] == 1.0 and s["accuracy"]["n"] == 2  # the tie and the skipped pair are not scored
    assert s["both_orders"]["accuracy"]["value"] == 0.5
    assert s["both_orders"]["flip_rate"]["value"] == 0.5
    assert report["ties"] == 1
    assert report["skipped"] == {"count": 1, "reasons": {"too-long": 1}, "subsets": {"long": 1}}


def test_report_json_writes_null_for_nan_and_the_markdown_names_each_unit_and_n(tmp_path) -> None:
    import json

    from reflectrm.eval.report import markdown, write_report

    items = [_item("a", True, anchor_confidence=-0.1, anchor_correct=True), _item("a", True, swapped=True),
             _item("b", False, anchor_confidence=-0.2, anchor_correct=False), _item("b", True, swapped=True),
             # a strategy with only a tie: its accuracy is NaN (no scored pair), which JSON cannot hold
             ItemResult(item_id="t", strategy="greedy", swapped=False, subset="s", label=None, tie=True, verdict=1)]
    report = build_report(items, benchmark="b", scoring="micro")
    assert math.isnan(report["strategies"]["greedy"]["accuracy"]["value"])
    write_report(report, tmp_path)
    text = (tmp_path / "report.json").read_text()
    assert "NaN" not in text and "Infinity" not in text  # trap: json.dumps writes bare NaN by default
    parsed = json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} in report.json"))
    assert parsed["strategies"]["greedy"]["accuracy"]["value"] is None
    md = markdown(report)
    row = next(line for line in md.splitlines() if line.startswith("| reflectrm |"))
    assert "(n=2 pairs)" in row  # the accuracy and the both-orders figures
    assert "50.0 [" in row.split("|")[5] and "(n=2 pairs)" in row.split("|")[5]  # flip rate with its interval and n
    assert "(n=2 pairs)" in row.split("|")[9]  # ECE names its n
    assert "of 4" in row.split("|")[6]  # abstained: of 4 pair-orders
    assert "pair-orders" in md and "Wilson" in md
