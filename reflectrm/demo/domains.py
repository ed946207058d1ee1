"""The demo task domains, each one `Domain` registered once by key: what a demo card's "domain" names.

Callers ask a judge's `Domain` (`reflectrm.demo.domain_of`, `demo_domain`) for pairs, examples, the
data-set name and the token budget; none of them asks which module a domain came from. Adding a
domain is one `Domain(...)` in `DOMAINS` below.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from reflectrm.core.prompts import Task
from reflectrm.core.types import PreferencePair
import reflectrm.demo.steps as steps
import reflectrm.demo.tasks as tasks

__all__ = ["ARITHMETIC", "DEFAULT_DOMAIN", "DOMAINS", "LEGACY_KEYS", "RUNNING_SUMS", "Domain", "domain_by_key"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Domain:
    """A synthetic, checkable task domain a demo judge is built on (every judgment can be verified exactly)."""

    key: str  # what a demo card's "domain" names ("arithmetic", "running-sums")
    source: str  # the data set its demo pairs are stored under ("demo-arith"): stored rows keep this name
    output_tokens: int  # a max_new_tokens that fits any analysis or reflection of its judge (short keeps CPU runs quick)
    kinds: tuple[str, ...]  # the pairs' subsets (problem kinds)
    make_pairs: Callable[..., list[PreferencePair]]  # (n, *, seed, source=...) -> labelled pairs
    fresh_pairs: Callable[..., list[PreferencePair]]  # (pairs, *, seed, source=...) -> the same problems reworded
    other_problems: Callable[[list[PreferencePair], list[PreferencePair]], list[PreferencePair]]  # (pairs, avoid)
    problem_of: Callable[[PreferencePair], Any]  # the problem a pair asks, whatever the wording (hashable)
    stated_value: Callable[[str, Any], int | None]  # (response, problem) -> the value a response states
    response_example: Callable[[PreferencePair], str]  # a worked analysis of a pair, as the judge is taught
    examples: tuple[tuple[str, str, str], ...]  # (query, response 1, response 2): the Judge tab's examples
    heldout_pairs: Callable[..., list[PreferencePair]]  # (card, n, *, seed, source) -> pairs its build never saw
    reward: str  # the process reward (a `reflectrm.training.rewards.REWARDS` name) that checks its analyses
    analysis_true: Callable[[PreferencePair, str], bool]  # (pair, analysis) -> it works the pair's problem rightly


def _rewards():
    """`reflectrm.demo.rewards` (it imports the training layer's reward helpers: loaded when first needed)."""
    import reflectrm.demo.rewards as rewards

    return rewards


def _arithmetic_heldout(card: dict[str, Any], n: int, *, seed: int, source: str) -> list[PreferencePair]:
    """The stream's first `n` pairs (the arithmetic build trains on another seed's stream)."""
    return tasks.make_pairs(n, seed=seed, source=source)


def _running_sum_heldout(card: dict[str, Any], n: int, *, seed: int, source: str) -> list[PreferencePair]:
    """The stream's first `n` pairs whose chain none of the build's training stages asked (its card says which)."""
    from reflectrm.demo.heldout import heldout_pairs

    return heldout_pairs(card, n, seed=seed, source=source)


ARITHMETIC = Domain(
    key="arithmetic", source="demo-arith", output_tokens=96,  # analyses and reflections: 40-70 tokens
    kinds=tasks.KINDS, make_pairs=tasks.make_pairs, fresh_pairs=tasks.fresh_pairs,
    other_problems=tasks.other_problems, problem_of=tasks.problem_of, stated_value=tasks.stated_value,
    response_example=tasks.response_example, examples=tasks.EXAMPLES, heldout_pairs=_arithmetic_heldout,
    reward="arithmetic",
    analysis_true=lambda pair, text: _rewards().arithmetic_true(text, tasks.problem_of(pair)),
)
"""Answers to one addition, subtraction or multiplication (`reflectrm.demo.tasks`): the first demo judge's."""

RUNNING_SUMS = Domain(
    key=steps.DOMAIN_KEY, source="demo-steps",
    output_tokens=256,  # an analysis up to 122; a reflection that walks six steps and reads the question again: 207
    kinds=steps.KINDS, make_pairs=steps.make_pairs, fresh_pairs=steps.fresh_pairs,
    other_problems=steps.other_problems, problem_of=steps.problem_of,
    stated_value=lambda response, problem: steps.stated_value(response),
    response_example=steps.response_example, examples=steps.EXAMPLES, heldout_pairs=_running_sum_heldout,
    reward="arithmetic",  # `reflectrm.demo.rewards` checks both domains' equations
    analysis_true=lambda pair, text: steps.analysis_true(text, steps.chain_of(pair), task=Task.RESPONSE),
)
"""Running sums of 4-6 steps (`reflectrm.demo.steps`); reflections check the first step two critiques differ on."""

DOMAINS: Mapping[str, Domain] = MappingProxyType({d.key: d for d in (ARITHMETIC, RUNNING_SUMS)})
"""Every demo domain by the key a demo card names."""

LEGACY_KEYS: Mapping[str, str] = MappingProxyType({"reflectrm.demo.tasks": "arithmetic",
                                                   "reflectrm.demo.steps": "running-sums"})
"""Cards written before the registry name a domain by its module; they still read (replayed stages write these)."""

DEFAULT_DOMAIN = ARITHMETIC
"""The domain of a judge whose card names none: the first demo judge's cards had no "domain" key."""


def domain_by_key(key: object) -> Domain | None:
    """The domain a card's "domain" value names (a key, or a module name from an older card); None if none."""
    if not isinstance(key, str):
        return None
    return DOMAINS.get(LEGACY_KEYS.get(key, key))
