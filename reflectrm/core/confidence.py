"""Output confidence (Eq. 5) and anchor selection (Eq. 6)."""

from __future__ import annotations

import math
from collections.abc import Sequence

DEFAULT_BOTTOM_FRAC = 0.10
"""Eq. 5: the share of lowest-log-prob tokens averaged into an output's confidence."""


def bottom_count(num_tokens: int, *, bottom_frac: float = DEFAULT_BOTTOM_FRAC) -> int:
    """How many of `num_tokens` tokens Eq. 5 averages: max(1, ceil(bottom_frac * num_tokens))."""
    return max(1, math.ceil(bottom_frac * num_tokens))


def confidence(token_logprobs: Sequence[float], *, bottom_frac: float = DEFAULT_BOTTOM_FRAC) -> float:
    """Eq. 5: mean log-prob of the k lowest-log-prob generated tokens, k = max(1, ceil(frac * n)).

    The log-probs are those of the sampled tokens, the end-of-sequence token excluded (the backend
    leaves it out). An output with no generated token has confidence -inf. Higher is more confident.
    """
    if not 0.0 < bottom_frac <= 1.0:
        raise ValueError(f"bottom_frac must be in (0, 1], got {bottom_frac!r}")
    if len(token_logprobs) == 0:
        return -math.inf
    if any(math.isnan(x) for x in token_logprobs):
        raise ValueError("token_logprobs contains NaN: the backend returned invalid log-probabilities")
    k = bottom_count(len(token_logprobs), bottom_frac=bottom_frac)
    lowest = sorted(token_logprobs)[:k]
    return math.fsum(lowest) / k


def select_anchor(confidences: Sequence[float | None]) -> int | None:
    """Eq. 6: the index of the most confident output; None entries (unparseable outputs) never win.

    A tie goes to the earliest index. Returns None when no output is parseable.
    """
    best: int | None = None
    for i, c in enumerate(confidences):
        if c is None:
            continue
        if math.isnan(c):
            raise ValueError(f"confidence {i} is NaN: compute confidences with `confidence()`")
        if best is None or c > confidences[best]:  # type: ignore[operator]
            best = i
    return best
