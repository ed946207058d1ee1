"""GRPO reward functions in TRL's calling convention (PAPER.md 3, open point 10.1).

TRL calls every reward function with keyword arguments: `prompts`, `completions`,
`completion_ids`, one list per extra dataset column (here `label` and `task`) and a few
trainer hooks, and expects one float per completion back. A completion is a string, or, for a
conversational dataset, a list of messages ending in the assistant's turn.

The paper does not give its reward; the rule-based outcome reward of the RM-R1 / J1 line is the
plain reading: 1 when the parsed `<Result>` names the labelled candidate, 0 otherwise, an
unparseable output included. The same function scores both tasks: `task` says whether the verdict
names a Response (Eq. 2) or a Critique (Eq. 3). Pure standard library.

The format requirement (`min_analysis_chars`, on by default): a verdict earns a reward only after an
analysis of at least that many characters. Without it `<Result>2</Result>` alone, or an empty
`<Analysis></Analysis>`, earns the full accuracy reward, and GRPO learns to drop the analyses that
stage 2 and the reflection data compare. 0 turns the requirement off (the verdict alone is paid).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from reflectrm.core.parsing import parse_output
from reflectrm.core.prompts import Task
from reflectrm.core.types import ParseStatus
from reflectrm.errors import ConfigError

Completion = str | Sequence[Mapping[str, Any]]

MIN_ANALYSIS_CHARS = 16
"""The format requirement's default: characters of analysis (stripped) a rewarded output must carry. The
shortest analysis the demo judge writes ("2 + 3 = 5. Response 1: ...") is about 60; a real judge's, hundreds.
The paper states none (PAPER.md 10): a named choice, `TrainConfig.min_analysis_chars`."""


def analysis_given(analysis: str, min_analysis_chars: int = MIN_ANALYSIS_CHARS) -> bool:
    """Whether `analysis` meets the format requirement (always, when `min_analysis_chars` is 0)."""
    return len(analysis.strip()) >= min_analysis_chars


def completion_text(completion: Completion) -> str:
    """The generated text of one completion: the string, or the content of its last message."""
    if isinstance(completion, str):
        return completion
    if not completion:
        return ""
    content = completion[-1].get("content", "")
    return content if isinstance(content, str) else ""


def _task(value: Any) -> Task:
    # A bad task would silently score every completion 0; say which value is wrong instead.
    try:
        return Task(value)
    except ValueError:
        raise ValueError(f"task must be 'response' or 'analysis', got {value!r}: fix the dataset's task column") from None


def accuracy_reward(
    completions: Sequence[Completion], label: Sequence[int], task: Sequence[str], *,
    min_analysis_chars: int = MIN_ANALYSIS_CHARS, **kwargs: Any
) -> list[float]:
    """1.0 when the parsed verdict names the labelled candidate after an analysis of at least
    `min_analysis_chars` characters, else 0.0 (unparseable, or a skipped analysis: 0.0)."""
    rewards = []
    for completion, want, kind in zip(completions, label, task, strict=True):
        parsed = parse_output(completion_text(completion), task=_task(kind))
        paid = parsed.choice is not None and parsed.choice == int(want)
        rewards.append(1.0 if paid and analysis_given(parsed.analysis, min_analysis_chars) else 0.0)
    return rewards


def consistency_reward(
    completions: Sequence[Completion], label: Sequence[int], task: Sequence[str], *,
    twin_key: Sequence[str] | None = None, order: Sequence[int] | None = None,
    min_analysis_chars: int = MIN_ANALYSIS_CHARS, **kwargs: Any
) -> list[float]:
    """The accuracy reward paid only as far as the judge is right in the other order too (J1's consistency reward,
    arXiv 2505.10320, in expectation): for rows written in both orders (`reflectrm.training.recipe.TWIN_FIELDS`), a
    right verdict is paid the share of right verdicts among its other order's completions in the same call (the
    chance that a sample of the other order is right as well); a wrong one 0. Pairing the k-th completion with the
    k-th of the other order, and paying 1 when both are right, has the same expectation with one unrelated sample's
    noise on every reward. A completion whose other order is not in the call (a row written in one order, or a step
    that split a pair) is paid as `accuracy_reward` pays it.

    The share is one number per group: advantages scaled by their group's spread would divide it out, so the
    both-orders option scales them over the step (`reflectrm.training.grpo.advantage_scale`)."""
    paid = accuracy_reward(completions, label, task, min_analysis_chars=min_analysis_chars)
    if twin_key is None or order is None:
        return paid
    tally: dict[tuple[str, int], list[float]] = {}
    for reward, key, side in zip(paid, twin_key, order, strict=True):
        tally.setdefault((key, int(side)), []).append(reward)
    rewards = []
    for reward, key, side in zip(paid, twin_key, order, strict=True):
        other = tally.get((key, 1 - int(side))) if key else None
        rewards.append(reward * sum(other) / len(other) if other else reward)
    return rewards


def format_reward(completions: Sequence[Completion], task: Sequence[str], *,
                  min_analysis_chars: int = MIN_ANALYSIS_CHARS, **kwargs: Any) -> list[float]:
    """1.0 for a well-formed `<Analysis>` of at least `min_analysis_chars` characters and a `<Result>`
    naming one candidate, else 0.0.

    A verdict the parser had to repair (a missing tag, a bare "Response 2") earns nothing: the
    point of this reward is the exact format the two-stage pipeline parses best.
    """
    rewards = []
    for c, kind in zip(completions, task, strict=True):
        parsed = parse_output(completion_text(c), task=_task(kind))
        ok = parsed.status is ParseStatus.OK and analysis_given(parsed.analysis, min_analysis_chars)
        rewards.append(1.0 if ok else 0.0)
    return rewards


RewardFunction = Callable[..., list[float]]
"""TRL's convention: keyword arguments (`prompts`, `completions`, dataset columns ...) in, one float per completion out."""

BUILTIN_REWARDS: Mapping[str, RewardFunction] = MappingProxyType({"accuracy": accuracy_reward, "format": format_reward,
                                                                  "consistency": consistency_reward})
"""The task-independent rewards: the paper's outcome reward, a format reward, and the outcome reward paid only when
right in both orders (what `TrainConfig.both_orders` trains with in the outcome reward's place)."""

REWARD_PLUGINS: Mapping[str, str] = MappingProxyType({
    "arithmetic": "reflectrm.demo.rewards:arithmetic_reward",  # the demo domain's process reward (demo data only)
})
"""Rewards that live with their task domain, by import path: loaded when a run names them, so training never
imports a domain (the domain imports this module's convention instead). Any other "package.module:function"
is accepted as a reward name too, the way TRL's `reward_funcs` accepts dotted paths."""


def load_reward(path: str) -> RewardFunction:
    """The function a "package.module:function" path names."""
    module, _, attr = path.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"reward {path!r} cannot be loaded ({exc}): name a built-in reward "
                          f"({', '.join(BUILTIN_REWARDS)}) or an importable package.module:function") from exc
    if not callable(fn):
        raise ConfigError(f"reward {path!r} is not a function: name a package.module:function")
    return fn


class _Rewards(Mapping[str, RewardFunction]):
    """Reward functions by name: the built-ins, the plugins (imported on first use), or a "module:function"."""

    def __getitem__(self, name: str) -> RewardFunction:
        if name in BUILTIN_REWARDS:
            return BUILTIN_REWARDS[name]
        path = REWARD_PLUGINS.get(name, name)
        if ":" not in path:
            raise KeyError(name)
        return load_reward(path)

    def __iter__(self) -> Iterator[str]:
        return iter((*BUILTIN_REWARDS, *REWARD_PLUGINS))

    def __len__(self) -> int:
        return len(BUILTIN_REWARDS) + len(REWARD_PLUGINS)


REWARDS: Mapping[str, RewardFunction] = _Rewards()
"""Reward functions by the name `TrainConfig.reward_weights` uses."""


def reward_weights(**extra: float) -> dict[str, float]:
    """`TrainConfig.reward_weights`: the paper's accuracy reward, plus each named reward with a nonzero weight."""
    return {"accuracy": 1.0, **{name: weight for name, weight in extra.items() if weight}}
