"""Eq. 5 confidence, Eq. 6 anchor, Eq. 9 vote."""

import math

import pytest

from reflectrm.core import confidence, final_vote, select_anchor
from reflectrm.core.confidence import bottom_count
from reflectrm.core.voting import plain_vote, reflection_vote


@pytest.mark.parametrize(
    ("n", "k"),
    [(1, 1), (9, 1), (10, 1), (11, 2), (20, 2), (21, 3), (100, 10), (101, 11), (0, 1)],
    ids=["one", "nine", "ten", "eleven-rounds-up", "twenty", "twenty-one", "hundred", "hundred-one", "zero"],
)
def test_bottom_count_is_ceil_of_ten_percent(n, k):
    assert bottom_count(n) == k


@pytest.mark.parametrize(
    ("logprobs", "expected"),
    [
        pytest.param([-0.5], -0.5, id="single-token"),
        pytest.param([-0.1] * 9 + [-3.0], -3.0, id="ten-tokens-one-lowest"),
        pytest.param([-0.1] * 10 + [-3.0], (-3.0 - 0.1) / 2, id="eleven-tokens-two-lowest"),
        pytest.param([-2.0, -1.0, -0.0, -4.0] * 5, (-4.0 - 4.0) / 2, id="unsorted-input"),
        pytest.param([0.0] * 30, 0.0, id="certain"),
    ],
)
def test_confidence(logprobs, expected):
    assert confidence(logprobs) == pytest.approx(expected)


def test_confidence_of_no_tokens_is_minus_infinity():
    assert confidence([]) == -math.inf


def test_confidence_bottom_frac_one_is_plain_mean():
    assert confidence([-1.0, -3.0], bottom_frac=1.0) == pytest.approx(-2.0)


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5])
def test_confidence_rejects_bad_fraction(bad):
    with pytest.raises(ValueError, match="bottom_frac"):
        confidence([-1.0], bottom_frac=bad)


def test_confidence_rejects_nan():
    with pytest.raises(ValueError, match="NaN"):
        confidence([-1.0, math.nan])


@pytest.mark.parametrize(
    ("confidences", "anchor"),
    [
        pytest.param([-1.0, -0.5, -2.0], 1, id="highest"),
        pytest.param([-0.5, -0.5, -2.0], 0, id="tie-goes-to-earliest"),
        pytest.param([None, -3.0, None], 1, id="unparseable-skipped"),
        pytest.param([None, -0.1, -0.1], 1, id="tie-among-parseable"),
        pytest.param([None, None], None, id="none-parseable"),
        pytest.param([], None, id="empty"),
        pytest.param([-math.inf, None, -math.inf], 0, id="minus-inf-still-parseable"),
        pytest.param([-9.0, None, 0.0], 2, id="zero-beats-negative"),  # trap: 0.0 is falsy
    ],
)
def test_select_anchor(confidences, anchor):
    assert select_anchor(confidences) == anchor


@pytest.mark.parametrize(
    ("predictions", "anchor", "winners", "verdict", "anchor_added"),
    [
        pytest.param([1, 2, 2, 1], 0, [1, 2], 2, False, id="winners-decide-against-anchor"),
        pytest.param([1, 2, 2, 1], 0, [], 1, True, id="empty-group-anchor-decides"),
        pytest.param([1, 2, 1, 2], 0, [1, 2], 1, True, id="tie-anchor-breaks-for-1"),
        pytest.param([2, 1, 2, 1], 0, [1, 2], 2, True, id="tie-anchor-breaks-for-2"),
        pytest.param([2, 1, 1, 1], 0, [1], 1, False, id="single-winner"),
        pytest.param([1, None, 2, 2], 0, [2, 3], 2, False, id="unparseable-non-winner-ignored"),
    ],
)
def test_final_vote(predictions, anchor, winners, verdict, anchor_added):
    assert final_vote(predictions, anchor=anchor, winners=winners) == verdict
    assert reflection_vote(predictions, anchor=anchor, winners=winners).anchor_added is anchor_added


def test_final_vote_rejects_anchor_in_winners():
    with pytest.raises(ValueError, match="anchor"):
        final_vote([1, 2], anchor=0, winners=[0])


def test_final_vote_rejects_unparseable_winner():
    with pytest.raises(ValueError, match="parseable"):
        final_vote([1, None], anchor=0, winners=[1])


def test_plain_vote_tie_goes_to_tie_breaker():
    vote = plain_vote([1, 2, None, 1, 2], tie_breaker=4)
    assert vote.counts == (2.0, 3.0) and vote.anchor_added


def test_weighted_vote_respects_weights():
    vote = plain_vote([1, 2, 2], tie_breaker=0, weights=[0.9, 0.2, 0.3])
    assert vote.counts == pytest.approx((0.9, 0.5))
