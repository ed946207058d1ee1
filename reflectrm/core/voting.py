"""Majority votes: the final prediction of Eq. 9 and the baselines' votes."""

from __future__ import annotations

from collections.abc import Sequence

from reflectrm.core.types import Choice, Vote


def _check(predictions: Sequence[int | None], indices: Sequence[int], what: str) -> None:
    for i in indices:
        if not 0 <= i < len(predictions):
            raise ValueError(f"{what} index {i} is out of range for {len(predictions)} predictions")
        if predictions[i] not in (1, 2):
            raise ValueError(f"{what} {i} has prediction {predictions[i]!r}; only parseable outputs (1 or 2) can vote")


def tally(
    predictions: Sequence[int | None],
    *,
    voters: Sequence[int],
    weights: Sequence[float] | None = None,
) -> tuple[float, float]:
    """Sum the (weighted) votes of `voters` for response 1 and response 2."""
    _check(predictions, voters, "voter")
    counts = [0.0, 0.0]
    for i in voters:
        counts[predictions[i] - 1] += 1.0 if weights is None else weights[i]  # type: ignore[operator]
    return counts[0], counts[1]


def reflection_vote(predictions: Sequence[int | None], *, anchor: int, winners: Sequence[int]) -> Vote:
    """Eq. 9 with its tie rule: vote over the winners; on an empty group or a tie the anchor joins.

    With the anchor added, an empty group becomes {anchor} and a tie becomes one vote apart, so
    the result is always decided.
    """
    _check(predictions, [anchor], "anchor")
    if anchor in winners:
        raise ValueError(f"the anchor {anchor} cannot be in the winner group (Eq. 8 excludes it)")
    c1, c2 = tally(predictions, voters=winners)
    if winners and c1 != c2:
        return Vote(counts=(c1, c2), voters=tuple(winners), anchor_added=False)
    voters = (*winners, anchor)
    return Vote(counts=tally(predictions, voters=voters), voters=tuple(voters), anchor_added=True)


def final_vote(predictions: Sequence[int | None], *, anchor: int, winners: Sequence[int]) -> Choice:
    """Eq. 9: the majority prediction of the winner group (anchor joins on empty group or tie)."""
    return verdict_of(reflection_vote(predictions, anchor=anchor, winners=winners))


def plain_vote(
    predictions: Sequence[int | None],
    *,
    tie_breaker: int,
    weights: Sequence[float] | None = None,
) -> Vote:
    """Majority (optionally weighted) over every parseable output; on a tie `tie_breaker` votes again."""
    voters = [i for i, p in enumerate(predictions) if p in (1, 2)]
    if not voters:
        raise ValueError("no parseable prediction to vote over")
    c1, c2 = tally(predictions, voters=voters, weights=weights)
    if c1 != c2:
        return Vote(counts=(c1, c2), voters=tuple(voters), anchor_added=False)
    _check(predictions, [tie_breaker], "tie breaker")
    extra = 1.0 if weights is None else max(weights[tie_breaker], 1e-12)
    c = [c1, c2]
    c[predictions[tie_breaker] - 1] += extra  # type: ignore[operator]
    return Vote(counts=(c[0], c[1]), voters=(*voters, tie_breaker), anchor_added=True)


def verdict_of(vote: Vote) -> Choice:
    """The side with more votes (callers guarantee no tie)."""
    return 1 if vote.counts[0] > vote.counts[1] else 2
