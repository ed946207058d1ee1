"""Which pairs two evaluation runs disagree on, and which other pairs share a problem or a template with them.

    flips = flipped_items(judge_items, checkpoint_items)    # per strategy and order: "fixed" or "broken"
    template_key(pair.conversation)                          # the conversation, numbers masked: a problem's shape
    SharedKeys(flipped_keys).relate(pair_keys(other))        # does another pair share a problem or a template?

A checkpoint compared with the judge it would replace (`reflectrm.eval.compare`) is better or worse on the pairs
that flipped; those are the pairs to read. A pair's PROBLEM is its conversation (`context_key`, the same key that
keeps training data off evaluation pairs); its TEMPLATE is the conversation with every run of digits masked and
whitespace normalised: a domain-free notion that groups one problem shape's wordings ("A counter shows 9. Step 1:
add 3." and "... shows 12. Step 1: add 8.") and keeps a different shape (another step count, another wording) apart.
Pure: no store, no backend.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from reflectrm.core.types import ChatMessage, PreferencePair
from reflectrm.eval.scoring import ItemResult
from reflectrm.training.data import context_key

__all__ = ("BROKEN", "FIXED", "PROBLEM", "TEMPLATE", "Flip", "Keys", "Related", "flipped_items", "pair_keys",
           "SharedKeys", "problem_template", "template_key")

FIXED, BROKEN = "fixed", "broken"
"""A flip's direction: the second run right where the first was wrong (fixed), or wrong where it was right."""
PROBLEM, TEMPLATE = "problem", "template"
"""What a related pair shares with a flipped one: the same conversation, or only its shape (numbers masked)."""

_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True, slots=True, kw_only=True)
class Flip:
    """One pair, one strategy, one order, judged right by one run and wrong by the other.

    Attributes:
        item_id: the benchmark pair's id.
        strategy: the aggregation strategy both runs used.
        swapped: the order judged (True: the responses exchanged).
        direction: FIXED (run B right, run A wrong) or BROKEN (A right, B wrong).
        judgment_a / judgment_b: the two runs' stored judgments of it (None when a run kept none).
    """

    item_id: str
    strategy: str
    swapped: bool
    direction: str
    judgment_a: int | None
    judgment_b: int | None


def flipped_items(items_a: Iterable[ItemResult], items_b: Iterable[ItemResult]) -> list[Flip]:
    """The items both runs scored (same pair, strategy and order) whose correctness differs, in item order.

    An abstention on a labelled pair is wrong (as accuracy counts it); a skipped, tied or unlabelled item is not
    scored and never flips. Ordered by strategy, pair id and order, so the same runs give the same list.
    """
    a = {(i.strategy, i.item_id, i.swapped): i for i in items_a if i.scored}
    out = []
    for b in items_b:
        first = a.get((b.strategy, b.item_id, b.swapped))
        if first is None or not b.scored or bool(first.correct) == bool(b.correct):
            continue
        out.append(Flip(item_id=b.item_id, strategy=b.strategy, swapped=b.swapped,
                        direction=FIXED if b.correct else BROKEN,
                        judgment_a=first.judgment_id, judgment_b=b.judgment_id))
    return sorted(out, key=lambda f: (f.strategy, f.item_id, f.swapped))


def problem_template(conversation: Sequence[ChatMessage]) -> str:
    """The conversation's shape: each turn as "role: text", every run of digits as '#', whitespace one space."""
    text = "\n".join(f"{m.role}: {m.content}" for m in conversation)
    return " ".join(_DIGITS.sub("#", text).split())


def template_key(conversation: Sequence[ChatMessage]) -> str:
    """A sha256 of `problem_template`: two conversations of one shape share it."""
    return hashlib.sha256(problem_template(conversation).encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class Keys:
    """A pair's problem (`context_key`) and template (`template_key`)."""

    problem: str
    template: str


def pair_keys(pair: PreferencePair) -> Keys:
    return Keys(problem=context_key(pair), template=template_key(pair.conversation))


@dataclass(frozen=True, slots=True)
class Related:
    """A candidate that shares something with flipped pairs: what (PROBLEM or TEMPLATE) and with which."""

    shares: str
    with_items: tuple[str, ...]  # the flipped pairs' ids, sorted


class SharedKeys:
    """The flipped pairs' problems and templates, indexed once: `relate` asks it of each candidate."""

    def __init__(self, flipped: Mapping[str, Keys]) -> None:  # item id -> its keys
        self._by: dict[str, dict[str, set[str]]] = {PROBLEM: defaultdict(set), TEMPLATE: defaultdict(set)}
        for item, keys in flipped.items():
            self._by[PROBLEM][keys.problem].add(item)
            self._by[TEMPLATE][keys.template].add(item)

    def relate(self, candidate: Keys) -> Related | None:
        """What `candidate` shares with the flipped pairs: the same problem where any does (the closer tie, and it
        implies the template), else the same template; None when it shares neither."""
        for shares, key in ((PROBLEM, candidate.problem), (TEMPLATE, candidate.template)):
            if hits := self._by[shares].get(key):
                return Related(shares=shares, with_items=tuple(sorted(hits)))
        return None
