"""Run an evaluation: every pair (in one or both orders) judged once per batch, shared by every strategy.

    for batch in evaluate(pairs, backend, config, plan=EvalPlan(strategies=("reflectrm", "greedy")), done=set()):
        store(batch)          # [(ItemResult, Judgment | None), ...]; all orders and strategies of each pair

A pair the judge cannot take (its prompt and what may be generated exceed the context) is skipped
with its reason, truncated, or stops the run (`EvalPlan.too_long`). `done` holds the pair ids
already stored, so a rerun after a kill judges nothing twice.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from reflectrm.backends.base import Backend
from reflectrm.core.config import JudgeConfig
from reflectrm.core.prompts import response_prompt
from reflectrm.core.strategies import STRATEGIES
from reflectrm.core.types import Judgment, PreferencePair
from reflectrm.errors import ConfigError, ContextLengthError
from reflectrm.eval.scoring import Batch, ItemResult
from reflectrm.pipeline import judge_strategies

log = logging.getLogger(__name__)

TOO_LONG = ("skip", "truncate", "error")
DEFAULT_STRATEGIES = ("reflectrm", "greedy", "majority", "majority@15", "random-anchor", "random-winners")
_TRUNCATION_STEPS = 12  # halvings of the responses' length before a pair is skipped anyway
TRUNCATION_MARK = "\n[... truncated to fit the judge's context]"


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalPlan:
    """What to run.

    Attributes:
        strategies: aggregation strategies, all computed from one shared pass per pair.
        both_orders: also judge every pair with its responses swapped (the paper's Table 5 protocol).
        too_long: a pair over the context: "skip" (recorded and counted), "truncate" (responses cut
            until it fits) or "error" (stop the run).
        batch_size: pairs generated together.
    """

    strategies: tuple[str, ...] = ("reflectrm",)
    both_orders: bool = False
    too_long: str = "skip"
    batch_size: int = 8

    def __post_init__(self) -> None:
        unknown = [s for s in self.strategies if s not in STRATEGIES]
        if unknown or not self.strategies:
            raise ConfigError(f"strategy {unknown[0] if unknown else ''!r} is unknown: use some of "
                              f"{', '.join(STRATEGIES)}")
        if self.too_long not in TOO_LONG:
            raise ConfigError(f"too_long {self.too_long!r} is unknown: use one of {', '.join(TOO_LONG)}")
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {self.batch_size}")
        # cheapest first: later strategies reuse the samples and reflections of earlier ones
        order = {name: k for k, name in enumerate(STRATEGIES)}
        object.__setattr__(self, "strategies", tuple(sorted(dict.fromkeys(self.strategies), key=order.__getitem__)))


def parse_strategies(text: str) -> tuple[str, ...]:
    """`"reflectrm,greedy"` -> ("reflectrm", "greedy"); `"all"` -> every evaluation baseline."""
    if text.strip() == "all":
        return DEFAULT_STRATEGIES
    return tuple(s.strip() for s in text.split(",") if s.strip())




def evaluate(
    pairs: Sequence[PreferencePair],
    backend: Backend,
    config: JudgeConfig,
    *,
    plan: EvalPlan,
    done: set[str],
    meta: Mapping[str, Mapping[str, Any]] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    progress: Callable[[int, int], None] | None = None,
) -> Iterator[Batch]:
    """Judge every pair not in `done`; yield one batch of results per batch of pairs (store each before the next)."""
    meta = meta or {}
    todo = [p for p in pairs if p.id not in done]
    finished = len(pairs) - len(todo)
    if progress:  # from the first second, not after the first batch (which may take minutes)
        progress(finished, len(pairs))
    for start in range(0, len(todo), plan.batch_size):
        if should_stop():
            return
        chunk = todo[start : start + plan.batch_size]
        batch: Batch = []
        runnable: list[tuple[PreferencePair, dict[str, Any]]] = []
        for pair in chunk:
            fitted, reason, extra = _fit(pair, backend, config, plan)
            if fitted is None:
                batch.extend((_skipped(pair, s, swapped, reason, meta), None) for s in plan.strategies
                             for swapped in _orders(plan))
            else:
                runnable.append((fitted, {**meta.get(pair.id, {}), **extra}))
        batch.extend(_judge(runnable, backend, config, plan))
        finished += len(chunk)
        yield batch
        if progress:
            progress(finished, len(pairs))


def _orders(plan: EvalPlan) -> tuple[bool, ...]:
    return (False, True) if plan.both_orders else (False,)


def _judge(runnable: Sequence[tuple[PreferencePair, dict[str, Any]]], backend: Backend, config: JudgeConfig,
           plan: EvalPlan) -> Batch:
    expanded = [(p, m, swapped) for p, m in runnable for swapped in _orders(plan)]
    if not expanded:
        return []
    judged = judge_strategies([p.swapped() if s else p for p, _, s in expanded], backend, config, plan.strategies)
    out: Batch = []
    for (pair, m, swapped), by_strategy in zip(expanded, judged):
        for j in by_strategy.values():
            out.append((item_from_judgment(j, item_id=pair.id, swapped=swapped, config=config, meta=m), j))
    return out


def _skipped(pair: PreferencePair, strategy: str, swapped: bool, reason: str,
             meta: Mapping[str, Mapping[str, Any]]) -> ItemResult:
    shown = pair.swapped() if swapped else pair
    return ItemResult(item_id=pair.id, strategy=strategy, swapped=swapped, subset=pair.subset, label=shown.label,
                      tie=pair.tie, skipped=reason, meta=dict(meta.get(pair.id, {})))


def _room(config: JudgeConfig, plan: EvalPlan) -> int:
    """Tokens that may follow the pair in the longest prompt a judgment builds.

    A reflection prompt holds the pair plus two stage-1 analyses (each up to max_new_tokens) and then
    generates up to reflection_max_new_tokens, so it is checked as the pair plus all three.
    """
    if any(STRATEGIES[s].reflections for s in plan.strategies):
        return 2 * config.max_new_tokens + config.reflection_max_new_tokens
    return config.max_new_tokens


def _fits(pair: PreferencePair, backend: Backend, config: JudgeConfig, plan: EvalPlan) -> str:
    try:
        backend.check_prompt(response_prompt(pair, control_suffix=config.control_suffix),
                             max_new_tokens=_room(config, plan))
    except ContextLengthError as exc:
        return f"too-long: {exc}"
    return ""


def _fit(pair: PreferencePair, backend: Backend, config: JudgeConfig, plan: EvalPlan
         ) -> tuple[PreferencePair | None, str, dict[str, Any]]:
    """(the pair to judge or None, why not, meta to record) under the plan's too-long policy."""
    reason = _fits(pair, backend, config, plan)
    if not reason:
        return pair, "", {}
    if plan.too_long == "error":
        raise ContextLengthError(f"pair {pair.id!r}: {reason.removeprefix('too-long: ')} "
                                 "(or pass --too-long skip|truncate)")
    if plan.too_long == "truncate":
        for step in range(1, _TRUNCATION_STEPS + 1):
            keep = 0.5**step
            cut = replace(pair, response_1=_cut(pair.response_1, keep), response_2=_cut(pair.response_2, keep))
            if not _fits(cut, backend, config, plan):
                return cut, "", {"truncated_to": keep}
    return None, reason, {}


def _cut(text: str, keep: float) -> str:
    return text[: max(1, math.floor(len(text) * keep))] + TRUNCATION_MARK


def item_from_judgment(j: Judgment, *, item_id: str, swapped: bool, config: JudgeConfig,
                       meta: Mapping[str, Any]) -> ItemResult:
    """One strategy's result from its judgment: only the samples and reflections that strategy used count."""
    strategy = STRATEGIES[j.strategy]
    if strategy.greedy:
        used = [r for r in j.rollouts if r.greedy]
    else:
        num = config.matched_compute_n if strategy.samples == "matched" else config.n
        used = [r for r in j.rollouts if not r.greedy and r.index < num]
    anchor = next((r for r in used if r.index == j.anchor), None) if j.anchor is not None else None
    finite = anchor is not None and math.isfinite(anchor.confidence)
    reflections = j.reflections if strategy.reflections else ()  # a re-aggregation may keep unused ones
    return ItemResult(
        item_id=item_id, strategy=j.strategy, swapped=swapped, subset=j.pair.subset, label=j.pair.label,
        tie=j.pair.tie, verdict=j.verdict,
        tokens=sum(r.num_tokens for r in used) + sum(r.num_tokens for r in j.reflections),
        samples=len(used), parse_failures=sum(1 for r in used if not r.parseable),
        reflections=len(reflections), reflection_failures=sum(1 for r in reflections if r.choice is None),
        reflections_first=sum(1 for r in reflections if r.choice == 1),
        anchor_confidence=anchor.confidence if finite else None,
        anchor_correct=None if anchor is None or j.pair.label is None else anchor.prediction == j.pair.label,
        meta=dict(meta),
    )
