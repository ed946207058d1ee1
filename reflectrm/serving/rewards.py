"""ReflectRM as the reward of policy training: a GRPO group's rewards from pairwise judgments.

A pairwise judge cannot score one completion alone; it compares two. A completion's reward is its
win rate in its group:

* round robin (`opponents=None`): every unordered pair of the k completions, k(k-1)/2 pairs;
* capped (`opponents=m`): each completion against m others drawn at random (seeded), at most
  k*m pairs (fewer when draws coincide): the cost grows linearly in k instead of quadratically;
* against a reference (a `reference` column, or `references=`): each completion against the
  reference answer only, k pairs.

Each pair is judged in both orders (`both_orders=True`, the default) so that position bias cancels:
a judge that always picks Response 1 gives every completion 0.5. The judgment count is therefore
2 x pairs, and each judgment costs N stage-1 samples plus up to N-1 reflections (8 + 7 by
default): round robin over a group of 8 is 28 pairs, 56 judgments, up to 840 generations. An
abstention (no parseable output) or two identical completions count half a win each.

All pairs of a call (every group of the batch) go through one `judge_many` call, so the backend
sees one stage-1 batch and one stage-2 batch: on vLLM, one engine call per stage.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reflectrm.backends.base import Backend
from reflectrm.core.config import JudgeConfig
from reflectrm.core.types import ChatMessage, Judgment, PreferencePair
from reflectrm.errors import ConfigError, InputError

Prompt = str | Sequence[Mapping[str, Any]]
TIE = 0.5  # a win's share for an abstention or two identical completions


@dataclass(frozen=True, slots=True, kw_only=True)
class RewardConfig:
    """How a group's completions are compared."""

    opponents: int | None = None  # each completion against this many random others; None: every other one
    both_orders: bool = True  # judge (a, b) and (b, a): position bias cancels; off halves the cost
    seed: int = 0  # seeds the opponent draws
    batch_size: int = 64  # pairs judged together (one engine call per stage per batch)

    def __post_init__(self) -> None:
        if self.opponents is not None and self.opponents < 1:
            raise ConfigError(f"--opponents {self.opponents!r} is too few: give at least 1, or leave it out for round "
                              "robin")
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {self.batch_size}")


@dataclass(frozen=True, slots=True)
class Match:
    """Completions a and b of one group (b = -1: the group's reference answer)."""

    group: int
    a: int
    b: int


def matches(k: int, *, opponents: int | None, rng: random.Random) -> list[tuple[int, int]]:
    """Unordered pairs (i < j) of a group of k: all of them, or each i against `opponents` random others."""
    if opponents is None or opponents >= k - 1:
        return [(i, j) for i in range(k) for j in range(i + 1, k)]
    chosen: set[tuple[int, int]] = set()
    for i in range(k):
        for j in rng.sample([x for x in range(k) if x != i], opponents):
            chosen.add((min(i, j), max(i, j)))
    return sorted(chosen)


def judgments_needed(k: int, *, config: RewardConfig, reference: bool = False) -> int:
    """How many judgments one group of k completions costs (the docstring's formula)."""
    pairs = k if reference else (k * (k - 1) // 2 if config.opponents is None or config.opponents >= k - 1
                                 else k * config.opponents)  # an upper bound when draws coincide
    return pairs * (2 if config.both_orders else 1)


def group_rewards(
    prompts: Sequence[Prompt],
    groups: Sequence[Sequence[str]],
    backend: Backend,
    *,
    judge_config: JudgeConfig,
    config: RewardConfig = RewardConfig(),
    references: Sequence[str | None] | None = None,
    on_judgments: Callable[[list[Judgment]], None] | None = None,
) -> list[list[float]]:
    """Each completion's win rate in its group, for every group (`groups[g]` answers `prompts[g]`).

    `on_judgments` receives the judgments as [original, swapped, original, swapped, ...] when
    `both_orders` (the store's `record(..., swapped=True)` layout), e.g. to keep them for audit.
    """
    from reflectrm.pipeline import judge_many

    plan = plan_rewards(prompts, groups, config=config, references=references)
    judgments = list(judge_many(plan.pairs, backend, judge_config, batch_size=config.batch_size * plan.per))
    if on_judgments is not None and judgments:
        on_judgments(judgments)
    return plan.rewards(judgments)


@dataclass(frozen=True, slots=True)
class RewardPlan:
    """What one call's rewards need judged, and how the judgments become win rates.

    The reward service judges the `pairs` of many requests' plans in one batch; each plan then
    scores its own judgments, so a request's rewards do not depend on what shared its batch.
    """

    pairs: list[PreferencePair]  # to judge, in order: [original, swapped, ...] when both orders
    per: int  # judgments per distinct pair (2 with both orders)
    todo: list[tuple[Match, int]]  # each match and its distinct pair's index
    ties: list[Match]  # matches of identical texts: a tie without a judgment
    sizes: list[int]  # completions per group

    def rewards(self, judgments: Sequence[Judgment]) -> list[list[float]]:
        """Win rates from the judgments of `pairs` (same order)."""
        if len(judgments) != len(self.pairs):
            raise InputError(f"{len(judgments)} judgments for {len(self.pairs)} pairs: judge every pair of the plan")
        wins = [[0.0] * k for k in self.sizes]
        games = [[0] * k for k in self.sizes]
        for match in self.ties:
            _score(wins, games, match, TIE)
        for match, k in self.todo:
            for order, j in enumerate(judgments[k * self.per:(k + 1) * self.per]):
                a_won = TIE if j.verdict is None else float(j.verdict == (1 if order == 0 else 2))
                _score(wins, games, match, a_won)
        return [[w / n if n else TIE for w, n in zip(ws, ns)] for ws, ns in zip(wins, games)]


def plan_rewards(prompts: Sequence[Prompt], groups: Sequence[Sequence[str]], *, config: RewardConfig = RewardConfig(),
                 references: Sequence[str | None] | None = None) -> RewardPlan:
    """The pairs `group_rewards` judges: matches per group (seeded by `config.seed`), each distinct pair once."""
    if len(prompts) != len(groups):
        raise InputError(f"{len(prompts)} prompts but {len(groups)} completion groups: give one group per prompt")
    if references is not None and len(references) != len(groups):
        raise InputError(f"{len(references)} references for {len(groups)} groups: give one per prompt (null for none)")
    rng = random.Random(config.seed)
    per = 2 if config.both_orders else 1
    plan = RewardPlan([], per, [], [], [len(g) for g in groups])
    unique: dict[str, int] = {}  # a policy often repeats itself: each distinct pair is judged once
    for g, (prompt, group) in enumerate(zip(prompts, groups)):
        conversation = conversation_of(prompt)
        reference = references[g] if references is not None else None
        pairs = [(i, -1) for i in range(len(group))] if reference else matches(len(group), opponents=config.opponents,
                                                                               rng=rng)
        for a, b in pairs:
            text_b = reference if b == -1 else group[b]
            if group[a] == text_b:  # identical texts: a tie by definition, no judgment needed
                plan.ties.append(Match(g, a, b))
                continue
            pair = PreferencePair(conversation=conversation, response_1=group[a], response_2=text_b,
                                  id=f"g{g}:{a}:{b}", source="reward")
            if pair.fingerprint() not in unique:
                unique[pair.fingerprint()] = len(unique)
                plan.pairs.extend((pair, pair.swapped()) if config.both_orders else (pair,))
            plan.todo.append((Match(g, a, b), unique[pair.fingerprint()]))
    return plan


def _score(wins: list[list[float]], games: list[list[int]], match: Match, a_won: float) -> None:
    wins[match.group][match.a] += a_won
    games[match.group][match.a] += 1
    if match.b >= 0:  # the reference collects no reward
        wins[match.group][match.b] += 1.0 - a_won
        games[match.group][match.b] += 1


def conversation_of(prompt: Prompt) -> tuple[ChatMessage, ...]:
    """A TRL prompt (a string, or a list of {role, content} messages) as chat turns ending in a user turn."""
    if isinstance(prompt, str):
        return (ChatMessage("user", prompt),)
    turns = tuple(ChatMessage(str(m["role"]), str(m["content"])) for m in prompt if m.get("role") != "system")
    if not turns or turns[-1].role != "user":
        raise InputError("a conversational prompt must end in a user turn")
    return turns


def completion_text(completion: str | Sequence[Mapping[str, Any]]) -> str:
    """A TRL completion's text: the string, or the content of its last message."""
    if isinstance(completion, str):
        return completion
    content = completion[-1].get("content", "") if completion else ""
    return content if isinstance(content, str) else ""


class PairwiseReward:
    """A TRL `GRPOTrainer` reward function: each completion's win rate in its group, judged by ReflectRM.

    TRL passes `prompts` and `completions` with each prompt repeated once per generation; completions
    of equal prompts form a group (so every generation of a prompt must reach the same call: keep
    each process's batch a multiple of `num_generations`). A `reference` column, when the data set
    has one, switches a group to "against the reference".

        trainer = GRPOTrainer(model=..., reward_funcs=PairwiseReward(load_backend(...)), ...)
    """

    def __init__(self, backend: Backend, *, judge_config: JudgeConfig | None = None,
                 config: RewardConfig = RewardConfig(),
                 on_judgments: Callable[[list[Judgment]], None] | None = None) -> None:
        self.backend = backend
        self.judge_config = judge_config or JudgeConfig()
        self.config = config
        self.on_judgments = on_judgments
        self.__name__ = "reflectrm_pairwise"  # TRL logs each reward function under its __name__

    def __call__(self, prompts: Sequence[Prompt], completions: Sequence[Any], reference: Sequence[Any] | None = None,
                 **_: Any) -> list[float]:
        grouped = group_by_prompt(prompts, [completion_text(c) for c in completions], reference)
        rewards = group_rewards(grouped.prompts, grouped.groups, self.backend, judge_config=self.judge_config,
                                config=self.config, references=grouped.references, on_judgments=self.on_judgments)
        return grouped.flatten(rewards)


@dataclass(frozen=True, slots=True)
class Grouped:
    """Flat (prompt, completion) rows as groups: one per distinct prompt, and where each row went."""

    prompts: list[Any]
    groups: list[list[str]]
    references: list[str | None] | None  # None when no group has one
    slots: list[tuple[int, int]]  # (group, position) of each row

    def flatten(self, rewards: Sequence[Sequence[float]]) -> list[float]:
        return [rewards[g][i] for g, i in self.slots]


def group_by_prompt(prompts: Sequence[Any], texts: Sequence[str], references: Sequence[Any] | None = None) -> Grouped:
    """Group flat rows by equal prompt (TRL, OpenRLHF and verl all send a group's rows flat, prompt repeated)."""
    if len(prompts) != len(texts) or (references is not None and len(references) != len(texts)):
        raise InputError(f"{len(prompts)} prompts for {len(texts)} completions: "
                         "send one prompt (and reference) per row")
    index: dict[str, int] = {}
    grouped = Grouped([], [], [], [])
    for k, (prompt, text) in enumerate(zip(prompts, texts)):
        g = index.setdefault(repr(prompt), len(grouped.groups))
        if g == len(grouped.groups):
            grouped.prompts.append(prompt)
            grouped.groups.append([])
            ref = references[k] if references is not None else None
            grouped.references.append(str(ref) if ref not in (None, "") else None)
        grouped.slots.append((g, len(grouped.groups[g])))
        grouped.groups[g].append(text)
    return grouped if any(grouped.references) else Grouped(grouped.prompts, grouped.groups, None, grouped.slots)
