"""A process reward for the demo domain: is the analysis's arithmetic true? Pure standard library.

The paper rewards the verdict alone. On the demo judge that reward is noisy: an analysis that
computes `2 * 3 = 8` still names the right response half the time (when neither answer matches, the
verdict defaults to Response 1), and one that writes `6 - 8 = 0, right` may name it by accident, so
GRPO also reinforces wrong arithmetic. The demo's analyses are checkable, so this reward pays 1.0
only when every equation in the analysis is true, the first one works the prompt's problem, and
each right / wrong mark follows from its difference (0 means right). Use it beside the accuracy
reward (`TrainConfig(reward_weights={"accuracy": 1.0, "arithmetic": 1.0})`), on demo data only.

A plugin: `reflectrm.training.rewards.REWARD_PLUGINS` names it by import path and loads it when a
run asks for it, so the arrow runs from here to training's reward convention, never back.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from reflectrm.core.parsing import parse_output
from reflectrm.core.prompts import Task
from reflectrm.demo.steps import analysis_true, chain_in
from reflectrm.demo.tasks import KIND_OF, Problem, problem_in
from reflectrm.training.rewards import completion_text

_EQUATION = re.compile(r"(-?\d+) ([-+*]) (-?\d+) = (-?\d+)")
_CHECK = re.compile(r"(-?\d+) - (-?\d+) = (-?\d+), (right|wrong)")


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    return "\n".join(str(m.get("content", "")) for m in prompt or () if isinstance(m, dict))


def arithmetic_true(analysis: str, problem: Problem | None) -> bool:
    """Every equation true, the first one `problem` (when given), each mark following its difference."""
    equations = [(Problem(KIND_OF[op], int(a), int(b)), int(v)) for a, op, b, v in _EQUATION.findall(analysis)]
    if not equations:
        return False
    if problem is not None and equations[0][0] != problem:
        return False
    if any(worked.answer != value for worked, value in equations):
        return False
    return all((int(d) == 0) == (mark == "right") for _, _, d, mark in _CHECK.findall(analysis))


def arithmetic_reward(prompts: Sequence[Any], completions: Sequence[Any], task: Sequence[str],
                      **kwargs: Any) -> list[float]:
    """1.0 when the completion's analysis does the prompt's arithmetic right (see the module), else 0.0.
    Running sums of several steps are checked by `reflectrm.demo.steps.analysis_true`."""
    rewards = []
    for prompt, completion, kind in zip(prompts, completions, task, strict=True):
        text = _prompt_text(prompt)
        analysis = parse_output(completion_text(completion), task=Task(kind)).analysis
        chain = chain_in(text)
        if chain is not None:  # the multi-step domain (`reflectrm.demo.steps`): its own format and checks
            rewards.append(1.0 if analysis_true(analysis, chain, task=Task(kind)) else 0.0)
            continue
        problem = problem_in(text)
        rewards.append(1.0 if problem is not None and arithmetic_true(analysis, problem) else 0.0)
    return rewards
