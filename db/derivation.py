"""From a human correction to training data: the paper's reflection-data recipe (PAPER.md section 2,
step 4) with a person's verdict in place of the benchmark label. Pure: no database.

A correction of a pair with human verdict y yields one preference example (conversation, response 1,
response 2 -> y) and reflection pairs: a stored analysis that is right paired with one that is wrong,
in a seeded random critique order, the right one labelled better. An analysis is right when a person
marked it right, or, unmarked, when its prediction equals y; wrong when marked wrong, or, unmarked,
when its parseable prediction differs from y. Unparseable, unmarked outputs and empty analyses take
no part: nothing says whether they are right. Analyses with the same text count once (a repeat
would train the same example twice). The paper derives exactly one pair per query; a correction
may derive up to `max_pairs` (default `DEFAULT_MAX_PAIRS`).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import product
from typing import Literal

from reflectrm.core.types import Choice, PreferencePair
from reflectrm.errors import InputError

Mark = Literal["right", "wrong"]

DEFAULT_MAX_PAIRS = 4
"""Reflection pairs one correction derives at most (the paper: one per query; a person's label is worth more)."""


@dataclass(frozen=True, slots=True)
class Analysis:
    """One stored stage-1 analysis as the derivation sees it.

    Attributes:
        key: the caller's handle on it (a sample row id).
        analysis: the analysis text.
        prediction: its verdict, None when unparseable.
    """

    key: int
    analysis: str
    prediction: Choice | None


@dataclass(frozen=True, slots=True)
class DerivedReflectionPair:
    """Two analyses in the order a reflection prompt shows them, and the one that is right (1 or 2)."""

    critique_1: int  # Analysis.key shown as Critique 1
    critique_2: int
    label: Choice


def classify(analysis: Analysis, *, verdict: Choice, mark: Mark | None) -> Mark | None:
    """Right, wrong, or None (takes no part). A mark overrides the prediction-based rule."""
    if not analysis.analysis.strip():
        return None
    if mark is not None:
        return mark
    if analysis.prediction is None:
        return None
    return "right" if analysis.prediction == verdict else "wrong"


def derive_reflection_pairs(
    analyses: Sequence[Analysis],
    *,
    verdict: Choice,
    marks: Mapping[int, Mark],
    max_pairs: int = DEFAULT_MAX_PAIRS,
    seed: int,
) -> list[DerivedReflectionPair]:
    """Reflection pairs from the analyses of one corrected judgment (deterministic given `seed`).

    Every (right, wrong) combination is a candidate; a seeded shuffle picks `max_pairs` of them,
    then each is shown in a seeded random order (the paper's "in random order").
    """
    check_correction(verdict=verdict, marks=marks, max_pairs=max_pairs, keys={a.key for a in analyses})
    kinds = {a.key: classify(a, verdict=verdict, mark=marks.get(a.key)) for a in analyses}
    right = _distinct(a for a in analyses if kinds[a.key] == "right")
    wrong = _distinct(a for a in analyses if kinds[a.key] == "wrong")
    rng = random.Random(seed)
    candidates = [(g.key, b.key) for g, b in product(right, wrong) if g.analysis != b.analysis]
    rng.shuffle(candidates)
    pairs = []
    for good, bad in sorted(candidates[:max_pairs]):
        if rng.random() < 0.5:
            pairs.append(DerivedReflectionPair(critique_1=good, critique_2=bad, label=1))
        else:
            pairs.append(DerivedReflectionPair(critique_1=bad, critique_2=good, label=2))
    return pairs


def _distinct(analyses: Iterable[Analysis]) -> list[Analysis]:
    """The first analysis of each text, in order."""
    seen: set[str] = set()
    out = []
    for a in analyses:
        if a.analysis not in seen:
            seen.add(a.analysis)
            out.append(a)
    return out


def check_correction(*, verdict: object, marks: Mapping[int, object], max_pairs: object, keys: set[int]) -> None:
    """Raise `InputError` naming the bad field of a correction."""
    if verdict not in (1, 2) or isinstance(verdict, bool):
        raise InputError(f"verdict must be 1 or 2 (the better response), got {verdict!r}")
    if not isinstance(max_pairs, int) or isinstance(max_pairs, bool) or max_pairs < 0:
        raise InputError(f"max_pairs must be an integer >= 0, got {max_pairs!r}")
    for key, mark in marks.items():
        if mark not in ("right", "wrong"):
            raise InputError(f"mark on analysis {key} must be 'right' or 'wrong', got {mark!r}")
        if key not in keys:
            raise InputError(f"mark on analysis {key}: the judgment has no such analysis; mark one of its samples")


def content_hash(payload: object) -> str:
    """sha256 of a JSON-able payload in canonical form (what a snapshot's hash is built from)."""
    text = json.dumps(payload, ensure_ascii=True, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def preference_content(pair: PreferencePair, label: Choice) -> dict[str, object]:
    """What a trainer sees of a preference example."""
    return {
        "task": "response",
        "messages": [[m.role, m.content] for m in pair.conversation],
        "responses": [pair.response_1, pair.response_2],
        "label": label,
    }


def reflection_content(pair: PreferencePair, critiques: tuple[Analysis, Analysis], label: Choice) -> dict[str, object]:
    """What a trainer sees of a reflection pair."""
    return {
        **preference_content(pair, label),
        "task": "analysis",
        "critiques": [[c.analysis, c.prediction] for c in critiques],
    }
