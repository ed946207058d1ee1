"""When a person's verdict on a judgment needs a second look ("contested"): pure, on our types."""

from __future__ import annotations

from reflectrm.core.types import Choice, Judgment


def contest_reason(judgment: Judgment, verdict: Choice) -> str:
    """Why a person's verdict needs a second look: it contradicts the pair's known label, or every one
    of the judge's parseable samples ("" when neither)."""
    label = judgment.pair.label
    if label is not None and verdict != label:
        return f"the known label says Response {label}"
    picks = {r.prediction for r in judgment.rollouts if not r.greedy and r.prediction is not None}
    sampled = sum(1 for r in judgment.rollouts if not r.greedy and r.prediction is not None)
    if len(picks) == 1 and sampled >= 2 and verdict not in picks:
        return f"all {sampled} of the judge's parseable samples say Response {picks.pop()}"
    return ""
