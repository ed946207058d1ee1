"""Helpers for the store's tests: a varied scripted judge and pair factories."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from reflectrm.backends import ScriptedBackend
from reflectrm.backends.base import Completion, SamplingParams
from reflectrm.core.types import Judgment, PreferencePair
from tests.conftest import critique_output, response_output

JudgeFn = Callable[..., list[Judgment]]


def scripted_output(prompt: str, seed: int, params: SamplingParams) -> Completion:
    """A varied but deterministic judge: verdicts, unparseable and empty outputs, varied confidence."""
    k = seed % 10
    logprobs = tuple(-0.05 * ((seed >> s) % 7 + 1) for s in range(12))
    if "## Critiques for Judgment" in prompt:
        choice = 2 if seed % 3 == 0 else 1
        return Completion("I am not sure" if k == 9 else critique_output(choice), (), 9, "stop")
    if k == 9:
        return Completion("", (), 0, "length")
    if k == 8:
        return Completion("no verdict, sorry", logprobs, 12, "stop")
    choice = 1 if k < 5 else 2
    return Completion(response_output(choice, f"sample {seed % 1009} prefers {choice}"), logprobs, 12, "stop")


def make_pairs(count: int, *, prefix: str = "p", label: int | None = 1) -> list[PreferencePair]:
    return [
        PreferencePair.from_query(
            f"{prefix} question {k}: which is better?",
            f"answer A{k}",
            f"answer B{k}",
            label=label,
            id=f"{prefix}-{k}",
            source="tests",
        )
        for k in range(count)
    ]


def scripted_rollouts(outputs: Sequence[str]) -> ScriptedBackend:
    """A backend whose stage-1 outputs are `outputs` in sample order; every reflection prefers Critique 1."""
    stage1 = itertools.cycle(outputs)

    def respond(prompt: str, seed: int, params: SamplingParams) -> Completion:
        if "## Critiques for Judgment" in prompt:
            return Completion(critique_output(1), (), 5)
        out = next(stage1)
        return Completion(out, tuple(-0.1 * (len(out) % 5 + 1) for _ in out.split()), len(out.split()))

    return ScriptedBackend(respond, max_context_chars=50_000_000)
