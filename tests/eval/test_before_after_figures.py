"""Two models' position-bias figures on the same pairs (`reflectrm.audit.before_after`): hand-made items with known
flips, first-slot verdicts, both-orders hits and stage-2 choices, so every count is known before it is computed."""

from __future__ import annotations

import json

import pytest

from reflectrm.audit import BEFORE_AFTER_COLUMNS, BOTH_ORDERS, FIRST_CRITIQUE, FIRST_SLOT, FLIP_RATE, before_after
from reflectrm.eval.compare import shift
from reflectrm.eval.scoring import ItemResult

# A pair is (label as given, verdict as given, verdict swapped) with optional extras: "skip" (not judged), "tie",
# "given-only" (its swapped order missing), "other" (another strategy's items), or (reflections, failed, first).
FIRST = (1, 1)  # always the response shown first: a flip on every pair, right in one order only
RIGHT = {1: (1, 2), 2: (2, 1)}  # right in both orders, by the label as given


def pair(label: int | None, verdicts: tuple, *extras: object) -> tuple:
    return (label, *verdicts, *extras)


def items(spec: list[tuple], *, strategy: str = "reflectrm") -> list[ItemResult]:
    out = []
    for k, (label, given, swapped, *extras) in enumerate(spec):
        reflections = next((e for e in extras if isinstance(e, tuple)), (0, 0, 0))
        orders = ((False, given),) if "given-only" in extras else ((False, given), (True, swapped))
        for is_swapped, verdict in orders:
            out.append(ItemResult(
                item_id=f"p{k}", strategy="greedy" if "other" in extras else strategy, swapped=is_swapped, subset="s",
                label=None if label is None else (3 - label if is_swapped else label), tie="tie" in extras,
                verdict=verdict, skipped="too long" if "skip" in extras else "", reflections=reflections[0],
                reflection_failures=reflections[1], reflections_first=reflections[2]))
    return out


def counts(figure) -> tuple:  # noqa: ANN001
    """(k, n) of each model's estimate; None where there is no unit."""
    return tuple(None if e.n == 0 else (round(e.value * e.n), e.n) for e in (figure.before, figure.after))


LABELS8 = [1, 2] * 4
# before items, after items; then (flip k/n before, after), (first-slot), (both-orders), (first-critique),
# the flip change's word, the both-orders change's word, pairs both judged in both orders
CASES = [
    # trap: every pair fixed, but 4 pairs cannot make it significant (exact McNemar p = 0.125)
    pytest.param([pair(lab, FIRST) for lab in (1, 2, 1, 2)], [pair(lab, RIGHT[lab]) for lab in (1, 2, 1, 2)],
                 ((4, 4), (0, 4)), ((8, 8), (4, 8)), ((0, 4), (4, 4)), (None, None), "no difference",
                 "no difference", 4, id="four-pairs-all-fixed-is-not-significant"),
    pytest.param([pair(lab, FIRST) for lab in LABELS8], [pair(lab, RIGHT[lab]) for lab in LABELS8],
                 ((8, 8), (0, 8)), ((16, 16), (8, 16)), ((0, 8), (8, 8)), (None, None), "lower", "higher", 8,
                 id="eight-pairs-all-fixed-fewer-flips-more-right"),
    pytest.param([pair(lab, RIGHT[lab]) for lab in LABELS8], [pair(lab, FIRST) for lab in LABELS8],
                 ((0, 8), (8, 8)), ((8, 16), (16, 16)), ((8, 8), (0, 8)), (None, None), "higher", "lower", 8,
                 id="a-retrained-judge-that-learnt-the-bias"),
    # trap: the same verdicts must read as no difference (p 1, difference 0), never as a change
    pytest.param([pair(lab, FIRST) for lab in LABELS8], [pair(lab, FIRST) for lab in LABELS8],
                 ((8, 8), (8, 8)), ((16, 16), (16, 16)), ((0, 8), (0, 8)), (None, None), "no difference",
                 "no difference", 8, id="same-verdicts-no-difference"),
    # trap: an abstaining order leaves the pair out of the flip rate (nothing to compare), counts it wrong in both
    # orders, and gives no first-slot verdict
    pytest.param([pair(1, (None, 2)), pair(1, RIGHT[1])], [pair(1, RIGHT[1]), pair(1, RIGHT[1])],
                 ((0, 1), (0, 2)), ((1, 3), (2, 4)), ((1, 2), (2, 2)), (None, None), "no difference",
                 "no difference", 2, id="abstention"),
    # trap: an unlabelled pair and a tie flip like any other pair, but have no right answer
    pytest.param([pair(None, FIRST), pair(None, FIRST, "tie"), pair(1, RIGHT[1])],
                 [pair(None, RIGHT[1]), pair(None, RIGHT[1], "tie"), pair(1, RIGHT[1])],
                 ((2, 3), (0, 3)), ((5, 6), (3, 6)), ((1, 1), (1, 1)), (None, None), "no difference",
                 "no difference", 3, id="unlabelled-and-tie-in-flips-not-in-accuracy"),
    # trap: a skipped pair, a pair judged in one order only (a run cut short) and another strategy's items are no
    # pair judged in both orders: left out of every figure
    pytest.param([pair(1, RIGHT[1]), pair(1, FIRST, "skip"), pair(2, FIRST, "given-only"), pair(2, FIRST, "other")],
                 [pair(1, RIGHT[1]), pair(1, FIRST, "skip"), pair(2, FIRST, "given-only"), pair(2, FIRST, "other")],
                 ((0, 1), (0, 1)), ((1, 2), (1, 2)), ((1, 1), (1, 1)), (None, None), "no difference",
                 "no difference", 1, id="skipped-one-order-and-other-strategy-left-out"),
    # reflections: the parsed ones (reflections - failed) are the denominator, per order
    # before: (3 - 1) + 2 parsed per order, 1 + 2 of them Critique 1; after: 3 + 0 parsed, 1 + 0 Critique 1
    pytest.param([pair(1, RIGHT[1], (3, 1, 1)), pair(2, RIGHT[2], (2, 0, 2))],
                 [pair(1, RIGHT[1], (3, 0, 1)), pair(2, RIGHT[2], (2, 2, 0))],
                 ((0, 2), (0, 2)), ((2, 4), (2, 4)), ((2, 2), (2, 2)), ((6, 8), (2, 6)), "no difference",
                 "no difference", 2, id="first-critique-share-over-parsed-reflections"),
    # trap: models that share no pair have figures each, and no change to claim
    pytest.param([pair(1, FIRST)], [], ((1, 1), None), ((2, 2), None), ((0, 1), None), (None, None), None, None, 0,
                 id="no-shared-pair-no-change"),
]


@pytest.mark.parametrize(("before", "after", "flips", "first", "both", "critique", "flip_word", "both_word", "pairs"),
                         CASES)
def test_before_after_figures(before, after, flips, first, both, critique, flip_word, both_word, pairs) -> None:
    result = before_after(items(before), items(after), strategy="reflectrm", before_run=1, after_run=2)
    assert [f.name for f in result.figures] == [FLIP_RATE, FIRST_SLOT, BOTH_ORDERS, FIRST_CRITIQUE]
    assert (counts(result.flip_rate), counts(result.first_slot_win_rate), counts(result.both_orders_accuracy),
            counts(result.first_critique_share)) == (flips, first, both, critique)
    words = [None if f.change is None else f.change.word for f in (result.flip_rate, result.both_orders_accuracy)]
    assert words == [flip_word, both_word] and result.pairs == pairs
    assert result.first_slot_win_rate.change is None and result.first_critique_share.change is None
    for f in result.figures:  # every interval holds its value (Wilson, 95 %)
        for e in (f.before, f.after):
            assert e.n == 0 or e.low <= e.value <= e.high
    rows = result.rows()
    assert [r[0] for r in rows] == [FLIP_RATE, FIRST_SLOT, BOTH_ORDERS, FIRST_CRITIQUE]
    assert all(len(r) == len(BEFORE_AFTER_COLUMNS) and all(isinstance(c, str) for c in r) for r in rows)
    json.dumps(result.to_dict(), allow_nan=False)  # JSON-safe: a figure without units is null, never NaN


def test_the_summary_and_table_say_the_change_with_its_interval_and_p() -> None:
    result = before_after(items([pair(lab, FIRST) for lab in LABELS8]), items([pair(lab, RIGHT[lab]) for lab in LABELS8]),
                          strategy="reflectrm", before_model="demo judge", after_model="run-1/final")
    # every pair moved alike: the interval is the exact bound on pairs that could move back (1 - 0.025 ** (1 / 8))
    edge = 100 * (1 - 0.025 ** (1 / 8))
    assert result.summary() == (
        f"after vs before on 8 pairs in both orders: flip rate 100.0 % -> 0.0 %, -100.0 points [-100.0, "
        f"{edge - 100:+.1f}], p 0.0078 (lower); both-orders accuracy 0.0 % -> 100.0 %, +100.0 points "
        f"[{100 - edge:+.1f}, +100.0], p 0.0078 (higher)")
    flip_row = result.rows()[0]
    assert flip_row[1].startswith("100.0 % [") and flip_row[1].endswith("(n 8)")
    assert flip_row[3:] == [f"-100.0 points [-100.0, {edge - 100:+.1f}] (n 8)", "0.0078", "lower"]
    d = result.to_dict()
    assert (d["before"], d["after"], d["pairs"]) == ({"model": "demo judge", "run": None},
                                                     {"model": "run-1/final", "run": None}, 8)
    assert d["figures"][FLIP_RATE]["change"]["only_before"] == 8 and d["figures"][FLIP_RATE]["change"]["only_after"] == 0
    assert d["figures"][FIRST_CRITIQUE]["before"]["value"] is None  # no reflection: null, not NaN
    assert result.rows()[3][1:] == ["-", "-", "", "", ""]


@pytest.mark.parametrize(("p", "low", "high", "want"), [
    pytest.param(0.01, -0.5, -0.1, -1, id="significantly-lower"),
    pytest.param(0.01, 0.1, 0.5, 1, id="significantly-higher"),
    # trap: the two tests must agree; either alone is noise on a few pairs
    pytest.param(0.01, -0.5, 0.1, 0, id="interval-across-zero"),
    pytest.param(0.2, -0.5, -0.1, 0, id="p-above-alpha"),
    pytest.param(0.05, -0.5, -0.1, 0, id="p-at-alpha-is-not-below"),
])
def test_shift_needs_both_mcnemar_and_the_interval(p: float, low: float, high: float, want: int) -> None:
    assert shift(p, low, high, alpha=0.05) == want
