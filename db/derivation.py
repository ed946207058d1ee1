"""From a human correction to training data: the library's recipe (`reflectrm.training.recipe`) with
a person's verdict in place of the benchmark label, and the checks on a correction's fields. Pure.

A correction of a pair with human verdict y yields one preference example (conversation, response 1,
response 2 -> y) and up to `max_pairs` reflection pairs (default `DEFAULT_MAX_PAIRS`; the paper
derives one per query, a person's label is worth more). Which analyses are right or wrong, how
marks override the rule, and how a pair is ordered are the recipe's (see its docstring); this
module only adds the validation of what a person typed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence

from reflectrm.core.types import Choice
from reflectrm.errors import InputError
from reflectrm.training.recipe import Analysis, Mark, ReflectionChoice, Rendering, check_max_pairs, classify
from reflectrm.training.recipe import choose_reflection_pairs as _choose

__all__ = ["DEFAULT_MAX_PAIRS", "Analysis", "DerivedReflectionPair", "Mark", "check_correction", "classify",
           "content_hash", "derive_reflection_pairs"]

DEFAULT_MAX_PAIRS = 4
"""Reflection pairs one correction derives at most (the paper: one per query; a person's label is worth more)."""

DerivedReflectionPair = ReflectionChoice
"""Two analyses in the order a reflection prompt shows them, and the one that is right (the recipe's type)."""


def derive_reflection_pairs(
    analyses: Sequence[Analysis],
    *,
    verdict: Choice,
    marks: Mapping[int, Mark],
    max_pairs: int = DEFAULT_MAX_PAIRS,
    seed: int,
    rendering: Rendering | None = None,
) -> list[ReflectionChoice]:
    """Reflection pairs from the analyses of one corrected judgment (deterministic given `seed`)."""
    check_correction(verdict=verdict, marks=marks, max_pairs=max_pairs, keys={a.key for a in analyses})
    return _choose(analyses, verdict=verdict, marks=marks, max_pairs=max_pairs, seed=seed,
                   rendering=rendering or Rendering())


def check_correction(*, verdict: object, marks: Mapping[int, object], max_pairs: object, keys: set[int]) -> None:
    """Raise `InputError` naming the bad field of a correction."""
    if verdict not in (1, 2) or isinstance(verdict, bool):
        raise InputError(f"verdict must be 1 or 2 (the better response), got {verdict!r}")
    check_max_pairs(max_pairs)
    for key, mark in marks.items():
        if mark not in ("right", "wrong"):
            raise InputError(f"mark on analysis {key} must be 'right' or 'wrong', got {mark!r}")
        if key not in keys:
            raise InputError(f"mark on analysis {key}: the judgment has no such analysis; mark one of its samples")


def content_hash(payload: object) -> str:
    """sha256 of a JSON-able payload in canonical form (the store's dedup key for pairs)."""
    text = json.dumps(payload, ensure_ascii=True, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("ascii")).hexdigest()
