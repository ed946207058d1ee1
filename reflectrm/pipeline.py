"""Two-stage inference: the one place where the pure core meets a backend.

Stage 1 samples N analyses of the response-preference task (Eq. 2) with sampled-token
log-probs, scores their confidence (Eq. 5) and picks the anchor (Eq. 6). Stage 2 compares every
other parseable analysis with the anchor (Eq. 7), forms the winner group (Eq. 8) and votes (Eq. 9).

Generation is incremental: `complete` generates only what a strategy needs and a judgment lacks,
so re-aggregating stored rollouts (`rejudge`) never regenerates stage 1. Every random draw has a
seed derived from (config seed, pair content, purpose, index): sample j of a pair is the same
whether 8 or 15 samples are drawn and whatever else shares the batch.

Callers follow a run through typed `Progress` events (which stage, outputs done of total, tokens)
and stop it with `should_stop`, which the backend checks every decode step.
"""

from __future__ import annotations

import enum
import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from reflectrm.backends.base import Backend, Completion, GenerationRequest, SamplingParams, StopCheck
from reflectrm.core.confidence import confidence
from reflectrm.core.config import JudgeConfig
from reflectrm.core.parsing import parse_output
from reflectrm.core.prompts import Task, format_critique, reflection_prompt, response_prompt
from reflectrm.core.strategies import STRATEGIES, Strategy, choose_anchor, critique_order, decide, derive_seed, unanimous
from reflectrm.core.types import Judgment, PreferencePair, Reflection, Rollout
from reflectrm.errors import ConfigError

log = logging.getLogger(__name__)


class Stage(enum.IntEnum):
    """What a judging run is doing."""

    SAMPLING = 1  # stage 1: N analyses per pair, with log-probs (Eq. 2)
    REFLECTING = 2  # stage 2: each other critique against the anchor (Eq. 7)
    DECIDED = 3  # a batch of pairs is decided (Eq. 8-9); `done` / `total` count pairs


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    """One progress event of `judge_many`: emitted as each stage of a batch starts and ends, and per batch."""

    stage: Stage
    done: int  # outputs of this stage generated so far in the batch (DECIDED: pairs decided in all)
    total: int  # outputs this stage generates for the batch (DECIDED: pairs in all)
    tokens: int = 0  # tokens this stage has generated so far in the batch
    pairs_done: int = 0  # pairs decided before the current batch (DECIDED: including it)
    pairs_total: int = 0  # pairs in the whole run
    batch: int = 0  # pairs in the current batch

    @property
    def fraction(self) -> float | None:
        """The share of the run done, with each stage counted as half a batch; None when the size is unknown."""
        if self.pairs_total <= 0:
            return None
        if self.stage is Stage.DECIDED:
            return self.pairs_done / self.pairs_total
        within = self.done / self.total if self.total else 1.0
        half = 0.5 * within + (0.5 if self.stage is Stage.REFLECTING else 0.0)
        return min(1.0, (self.pairs_done + half * self.batch) / self.pairs_total)

    def __str__(self) -> str:
        if self.stage is Stage.DECIDED:
            return f"judged {self.done} of {self.total} pair(s)"
        what = "stage 1: sampling" if self.stage is Stage.SAMPLING else "stage 2: reflecting"
        tokens = f", {self.tokens} tokens" if self.tokens else ""
        return f"{what}, {self.done} of {self.total} output(s){tokens}"


ProgressCallback = Callable[[Progress], None]
"""Receives every `Progress` event of a run (a progress bar, the app's `gr.Progress`)."""

_Report = Callable[[Stage, int, int, int], None]  # (stage, done, total, tokens) of the current batch


@dataclass
class _Work:
    """One pair's state while it is being judged (mutable, private)."""

    pair: PreferencePair
    rollouts: list[Rollout] = field(default_factory=list)
    reflections: dict[tuple[int, int], Reflection] = field(default_factory=dict)
    anchor: int | None = None
    stage2_skipped: bool = False
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.pair.fingerprint()

    def sampled(self) -> list[Rollout]:
        return [r for r in self.rollouts if not r.greedy]


def judge(
    pair: PreferencePair | Mapping[str, Any],
    backend: Backend | None = None,
    config: JudgeConfig | None = None,
) -> Judgment:
    """Judge one pair with the paper's two-stage method (or `config.strategy`)."""
    if not isinstance(pair, PreferencePair):
        pair = PreferencePair.from_dict(pair)
    if backend is None:
        from reflectrm.backends import load_backend

        backend = load_backend()
    return next(judge_many([pair], backend, config or JudgeConfig()))


def judge_many(
    pairs: Iterable[PreferencePair],
    backend: Backend,
    config: JudgeConfig,
    *,
    batch_size: int = 8,
    progress: ProgressCallback | None = None,
    should_stop: StopCheck | None = None,
) -> Iterator[Judgment]:
    """Judge pairs in batches (stage-1 prompts batched, then every reflection of the batch batched).

    Args:
        progress: receives a `Progress` event as each stage of a batch starts and ends, and per batch.
        should_stop: checked by the backend every decode step; when true, `GenerationCancelled` is
            raised and the batch in flight yields nothing (batches already yielded stay yielded).
    """
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    pairs = list(pairs)
    for pair in pairs:
        backend.check_prompt(response_prompt(pair, control_suffix=config.control_suffix),
                             max_new_tokens=config.max_new_tokens)
    for start in range(0, len(pairs), batch_size):
        works = [_Work(p) for p in pairs[start : start + batch_size]]
        report = _reporter(progress, pairs_done=start, pairs_total=len(pairs), batch=len(works))
        yield from complete(works, backend, config, should_stop=should_stop, report=report)
        if progress:
            end = start + len(works)
            progress(Progress(stage=Stage.DECIDED, done=end, total=len(pairs), pairs_done=end,
                              pairs_total=len(pairs), batch=len(works)))


def _reporter(progress: ProgressCallback | None, *, pairs_done: int, pairs_total: int, batch: int) -> _Report | None:
    if progress is None:
        return None

    def report(stage: Stage, done: int, total: int, tokens: int) -> None:
        progress(Progress(stage=stage, done=done, total=total, tokens=tokens, pairs_done=pairs_done,
                          pairs_total=pairs_total, batch=batch))

    return report


def judge_both_orders(pair: PreferencePair, backend: Backend, config: JudgeConfig) -> tuple[Judgment, Judgment]:
    """Judge a pair as given and with its responses swapped (the positional-bias audit)."""
    first, second = judge_many([pair, pair.swapped()], backend, config, batch_size=2)
    return first, second


def orders_agree(original: Judgment, swapped: Judgment) -> bool | None:
    """Whether two judgments of the two orders pick the same response; None if either abstained."""
    if original.verdict is None or swapped.verdict is None:
        return None
    return original.verdict == 3 - swapped.verdict


def rejudge(
    judgment: Judgment,
    strategy: str,
    backend: Backend | None = None,
    *,
    config: JudgeConfig | None = None,
) -> Judgment:
    """Re-aggregate a judgment's stored rollouts with another strategy.

    Stage-1 samples are reused, never regenerated. A backend is needed only when the strategy
    needs something the judgment lacks: a greedy output, more samples (`majority@15` after 8), or
    reflections against another anchor (`random-anchor`). Without one, that raises `ConfigError`.
    """
    config = (config or JudgeConfig.from_dict(dict(judgment.config))).with_(strategy=strategy)
    result = next(complete([_resumed(judgment)], backend or _NoBackend(), config))
    if backend is None:  # nothing new was generated: the record keeps the original model
        result = replace(result, model=judgment.model, model_revision=judgment.model_revision, backend=judgment.backend)
    return result


def rejudge_many(
    judgments: Sequence[Judgment],
    backend: Backend,
    config: JudgeConfig,
    *,
    batch_size: int = 8,
) -> Iterator[Judgment]:
    """`rejudge` for many judgments under one `config`, what they lack generated together in batches.

    The stored rollouts are reused, as in `rejudge`; the new reflections of a batch share its generation calls.
    """
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    for start in range(0, len(judgments), batch_size):
        yield from complete([_resumed(j) for j in judgments[start : start + batch_size]], backend, config)


def _resumed(judgment: Judgment) -> _Work:
    """A judgment's stored rollouts and reflections as work in progress (generation adds only what is missing)."""
    return _Work(judgment.pair, rollouts=list(judgment.rollouts),
                 reflections={(r.sample, r.anchor): r for r in judgment.reflections})


def complete(
    works: Sequence[_Work],
    backend: Backend,
    config: JudgeConfig,
    *,
    should_stop: StopCheck | None = None,
    report: _Report | None = None,
) -> Iterator[Judgment]:
    """Generate what `config.strategy` needs and each work lacks, then decide (Eq. 6-9)."""
    strategy = STRATEGIES[config.strategy]
    gen = _Generation(backend, should_stop, report)
    started = time.perf_counter()
    _stage1(works, gen, config, strategy)
    stage1_s = time.perf_counter() - started
    for w in works:
        w.anchor = None if strategy.greedy else choose_anchor(
            strategy, _considered(w, strategy, config), rng=random.Random(derive_seed(config.seed, w.key, "anchor"))
        )
    started = time.perf_counter()
    if strategy.reflections:
        _stage2(works, gen, config)
    stage2_s = time.perf_counter() - started
    for w in works:
        w.timings = {"stage1_s": stage1_s / len(works), "stage2_s": stage2_s / len(works), "batch_pairs": len(works)}
        yield _judgment(w, backend, config, strategy)


@dataclass(frozen=True, slots=True)
class _Generation:
    """One batch's generation calls: the stop check passed down, a progress event before and after each."""

    backend: Backend
    should_stop: StopCheck | None
    report: _Report | None

    def __call__(
        self, stage: Stage, requests: list[GenerationRequest], params: SamplingParams
    ) -> list[list[Completion]]:
        total = sum(len(r.seeds) for r in requests)
        if self.report:
            self.report(stage, 0, total, 0)
        out = self.backend.generate(requests, params, should_stop=self.should_stop)
        if self.report:
            self.report(stage, total, total, sum(c.num_tokens for row in out for c in row))
        return out


def _num_samples(strategy: Strategy, config: JudgeConfig) -> int:
    return {"n": config.n, "matched": config.matched_compute_n}.get(strategy.samples, 0)


def _considered(w: _Work, strategy: Strategy, config: JudgeConfig) -> list[Rollout]:
    """The sampled rollouts this strategy uses: the first N by index (seeds are index-stable)."""
    num = _num_samples(strategy, config)
    return [r for r in w.sampled() if r.index < num]


def _stage1(works: Sequence[_Work], generate: _Generation, config: JudgeConfig, strategy: Strategy) -> None:
    requests, owners = [], []
    for w in works:
        prompt = tuple(response_prompt(w.pair, control_suffix=config.control_suffix))
        if strategy.greedy:
            if not any(r.greedy for r in w.rollouts):
                requests.append(GenerationRequest(prompt, (derive_seed(config.seed, w.key, "greedy"),)))
                owners.append(w)
            continue
        have = {r.index for r in w.sampled()}
        missing = [j for j in range(_num_samples(strategy, config)) if j not in have]
        if missing:
            seeds = tuple(derive_seed(config.seed, w.key, f"sample:{j}") for j in missing)
            requests.append(GenerationRequest(prompt, seeds))
            owners.append((w, missing))
    if not requests:
        return
    params = SamplingParams(
        temperature=0.0 if strategy.greedy else config.temperature,
        top_k=config.top_k,
        top_p=config.top_p,
        max_new_tokens=config.max_new_tokens,
        logprobs=True,
    )
    for owner, completions in zip(owners, generate(Stage.SAMPLING, requests, params)):
        if strategy.greedy:
            w = owner
            w.rollouts.append(_rollout(completions[0], index=len(w.rollouts), greedy=True, config=config))
            continue
        w, missing = owner
        w.rollouts.extend(_rollout(c, index=j, greedy=False, config=config) for j, c in zip(missing, completions))
        w.rollouts.sort(key=lambda r: (r.greedy, r.index))


def _rollout(c: Completion, *, index: int, greedy: bool, config: JudgeConfig) -> Rollout:
    parsed = parse_output(c.text, task=Task.RESPONSE)
    return Rollout(
        index=index,
        text=c.text,
        analysis=parsed.analysis,
        prediction=parsed.choice,
        status=parsed.status,
        confidence=confidence(c.token_logprobs, bottom_frac=config.bottom_frac),
        num_tokens=c.num_tokens,
        greedy=greedy,
        finish_reason=c.finish_reason,
    )


def _stage2(works: Sequence[_Work], generate: _Generation, config: JudgeConfig) -> None:
    """Eq. 7: each other parseable output against the anchor, once, in a seeded random order."""
    strategy = STRATEGIES[config.strategy]
    requests, owners = [], []
    for w in works:
        considered = _considered(w, strategy, config)
        if w.anchor is None:
            continue
        if config.skip_unanimous and unanimous(considered):
            w.stage2_skipped = True
            continue
        by_index = {r.index: r for r in considered}
        for r in considered:
            if r.index == w.anchor or not r.parseable or (r.index, w.anchor) in w.reflections:
                continue
            order = critique_order(r.index, w.anchor,
                                   rng=random.Random(derive_seed(config.seed, w.key, f"order:{r.index}:{w.anchor}")))
            critiques = [format_critique(by_index[i].analysis, by_index[i].prediction,
                                         include_verdict=config.critique_includes_verdict) for i in order]
            prompt = reflection_prompt(w.pair, *critiques, control_suffix=config.control_suffix)
            seed = derive_seed(config.seed, w.key, f"reflect:{r.index}:{w.anchor}")
            requests.append(GenerationRequest(tuple(prompt), (seed,)))
            owners.append((w, r.index, order))
    if not requests:
        return
    params = SamplingParams(temperature=config.reflection_temperature, max_new_tokens=config.reflection_max_new_tokens)
    for (w, sample, order), completions in zip(owners, generate(Stage.REFLECTING, requests, params)):
        c = completions[0]
        parsed = parse_output(c.text, task=Task.ANALYSIS)
        w.reflections[(sample, w.anchor)] = Reflection(
            sample=sample, anchor=w.anchor, order=order, text=c.text, analysis=parsed.analysis,
            choice=parsed.choice, status=parsed.status, num_tokens=c.num_tokens,
        )


def _judgment(w: _Work, backend: Backend, config: JudgeConfig, strategy: Strategy) -> Judgment:
    considered = [w.rollouts[0]] if strategy.greedy else _considered(w, strategy, config)
    indices = {r.index for r in considered}
    reflections = tuple(sorted(
        (r for (i, a), r in w.reflections.items() if a == w.anchor and i in indices and not w.stage2_skipped),
        key=lambda r: r.sample,
    ))
    if strategy.greedy:
        greedy = next(r for r in w.rollouts if r.greedy)
        decision = decide(strategy, rollouts=[replace(greedy, index=0)], anchor=0)
    else:
        decision = decide(
            strategy,
            rollouts=_padded(considered),
            anchor=w.anchor,
            reflections=reflections,
            rng=random.Random(derive_seed(config.seed, w.key, "winners")),
        )
    return Judgment(
        pair=w.pair,
        strategy=strategy.name,
        rollouts=tuple(w.rollouts),
        verdict=decision.verdict,
        anchor=w.anchor,
        reflections=reflections,
        winners=decision.winners,
        vote=decision.vote,
        stage2_skipped=w.stage2_skipped,
        abstain_reason=decision.abstain_reason,
        config=config.to_dict(),
        model=backend.model_id,
        model_revision=backend.model_revision,
        backend=backend.name,
        seed=config.seed,
        timings=w.timings,
    )


def _padded(rollouts: list[Rollout]) -> list[Rollout]:
    """Rollouts placed at their own index, so vote indices match rollout indices."""
    size = max((r.index for r in rollouts), default=-1) + 1
    slots: list[Rollout | None] = [None] * size
    for r in rollouts:
        slots[r.index] = r
    assert all(s is not None for s in slots), "sampled rollouts must be contiguous from index 0"
    return slots  # type: ignore[return-value]


class _NoBackend:
    """Stands in when `rejudge` is called without a backend: fails if generation is needed."""

    name = "none"
    model_id = ""
    model_revision = ""

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams, *, should_stop: StopCheck | None = None
    ) -> list[list[Completion]]:
        raise ConfigError(
            "this strategy needs new generations the stored judgment lacks (a greedy output, more samples or "
            "reflections against another anchor): pass a backend"
        )

    def check_prompt(self, prompt: Any, *, max_new_tokens: int) -> None:
        return None


def judge_strategies(
    pairs: Sequence[PreferencePair], backend: Backend, config: JudgeConfig, strategies: Sequence[str]
) -> list[dict[str, Judgment]]:
    """Judge pairs with several strategies in one pass: each later strategy reuses what earlier ones generated.

    Stage-1 samples, greedy outputs and reflections accumulate on each pair's work, so `majority` after
    `reflectrm` costs nothing and `majority@15` generates only the 7 extra samples. Returns, per pair,
    strategy name -> judgment (the judgment's `rollouts` hold what had been generated by then).
    """
    for name in strategies:
        if name not in STRATEGIES:
            raise ConfigError(f"strategy {name!r} is unknown: use one of {', '.join(STRATEGIES)}")
    works = [_Work(p) for p in pairs]
    out: list[dict[str, Judgment]] = [{} for _ in pairs]
    for name in strategies:
        for w in works:
            w.stage2_skipped = False  # decided afresh for each strategy's samples and anchor
        uses_reflections = STRATEGIES[name].reflections
        for slot, judgment in zip(out, complete(works, backend, config.with_(strategy=name))):
            # a strategy without stage 2 must not carry the reflections an earlier strategy generated
            slot[name] = judgment if uses_reflections else replace(judgment, reflections=())
    return out
