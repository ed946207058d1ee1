"""Aggregation strategies: how a verdict is drawn from rollouts (and reflections).

Each strategy declares what it needs generated; `decide` is pure and works on rollouts that were
generated earlier, so re-aggregating stored samples never regenerates stage 1.

* ``reflectrm``: confidence anchor (Eq. 6), reflections against it (Eq. 7), vote of the winners (Eq. 8-9).
* ``greedy``: one greedy output.
* ``majority``: majority over the N samples (tie: the most confident sample decides).
* ``majority@15``: majority over 15 samples, the paper's missing matched-compute baseline (8 + 7 calls).
* ``random-anchor``: Table 2 ablation: the anchor is drawn at random, then as ``reflectrm``.
* ``random-winners``: Table 2 ablation: as many random non-anchor outputs as ReflectRM's winner group.
* ``confidence-weighted``: vote weighted by exp(confidence), the geometric-mean probability of the
  least likely tokens.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from reflectrm.core.confidence import select_anchor
from reflectrm.core.types import Choice, Reflection, Rollout, Vote
from reflectrm.core.voting import plain_vote, reflection_vote, verdict_of


@dataclass(frozen=True, slots=True, kw_only=True)
class Strategy:
    """What a strategy needs generated.

    Attributes:
        name: the strategy's name.
        samples: stage-1 samples it needs: "n" (the config's N), "matched" (matched_compute_n) or 0.
        greedy: whether it needs one greedy output instead of samples.
        anchor: how the anchor is chosen: "confidence", "random" or None (no anchor).
        reflections: whether it needs stage-2 reflections against the anchor.
    """

    name: str
    samples: str
    greedy: bool = False
    anchor: str | None = None
    reflections: bool = False


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy(name="reflectrm", samples="n", anchor="confidence", reflections=True),
        Strategy(name="greedy", samples="", greedy=True),
        Strategy(name="majority", samples="n", anchor="confidence"),
        Strategy(name="majority@15", samples="matched", anchor="confidence"),
        Strategy(name="random-anchor", samples="n", anchor="random", reflections=True),
        Strategy(name="random-winners", samples="n", anchor="confidence", reflections=True),
        Strategy(name="confidence-weighted", samples="n", anchor="confidence"),
    )
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """The outcome of aggregation."""

    verdict: Choice | None
    winners: tuple[int, ...] = ()
    vote: Vote | None = None
    abstain_reason: str = ""


def derive_seed(seed: int, key: str, purpose: str) -> int:
    """A 63-bit seed for one purpose ("sample", "order", ...) of one pair, stable across runs."""
    digest = hashlib.sha256(f"{seed}\x00{key}\x00{purpose}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def choose_anchor(strategy: Strategy, rollouts: Sequence[Rollout], *, rng: random.Random) -> int | None:
    """The anchor index for `strategy`: most confident parseable output, or a random parseable one."""
    if strategy.anchor == "random":
        parseable = [r.index for r in rollouts if r.parseable]
        return rng.choice(parseable) if parseable else None
    return select_anchor([r.confidence if r.parseable else None for r in rollouts])


def critique_order(sample: int, anchor: int, *, rng: random.Random) -> tuple[int, int]:
    """The (Critique 1, Critique 2) rollout indices for one reflection, in a random order."""
    return (sample, anchor) if rng.random() < 0.5 else (anchor, sample)


def unanimous(rollouts: Sequence[Rollout]) -> bool:
    """Whether every parseable output makes the same prediction (then stage 2 cannot change it)."""
    return len({r.prediction for r in rollouts if r.parseable}) == 1


def decide(
    strategy: Strategy,
    *,
    rollouts: Sequence[Rollout],
    anchor: int | None,
    reflections: Sequence[Reflection] = (),
    rng: random.Random | None = None,
) -> Decision:
    """Aggregate generated outputs into a verdict according to `strategy` (pure)."""
    predictions = [r.prediction for r in rollouts]
    if not any(r.parseable for r in rollouts):
        return Decision(verdict=None, abstain_reason="no parseable output")
    assert anchor is not None  # a parseable output exists, so an anchor was chosen
    if strategy.greedy:
        return Decision(verdict=rollouts[0].prediction, vote=Vote(counts=tally_one(rollouts[0]), voters=(0,)))
    if strategy.name in ("majority", "majority@15"):
        vote = plain_vote(predictions, tie_breaker=anchor)
        return Decision(verdict=verdict_of(vote), vote=vote)
    if strategy.name == "confidence-weighted":
        vote = plain_vote(predictions, tie_breaker=anchor, weights=[_weight(r) for r in rollouts])
        return Decision(verdict=verdict_of(vote), vote=vote)
    if not reflections:  # stage 2 skipped (unanimous) or nothing to compare with
        vote = plain_vote(predictions, tie_breaker=anchor)
        return Decision(verdict=verdict_of(vote), vote=vote)
    winners = tuple(r.sample for r in reflections if r.prefers_sample)  # Eq. 8
    if strategy.name == "random-winners":
        if rng is None:
            raise ValueError("random-winners needs an rng")
        pool = [r.sample for r in reflections]
        winners = tuple(sorted(rng.sample(pool, len(winners))))
    vote = reflection_vote(predictions, anchor=anchor, winners=winners)
    return Decision(verdict=verdict_of(vote), winners=winners, vote=vote)


def tally_one(rollout: Rollout) -> tuple[float, float]:
    return (1.0, 0.0) if rollout.prediction == 1 else (0.0, 1.0)


def _weight(r: Rollout) -> float:
    # exp(mean lowest log-prob) is in (0, 1]; an output with no tokens weighs nothing.
    return math.exp(r.confidence) if r.parseable and math.isfinite(r.confidence) else 0.0
