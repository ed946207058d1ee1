"""The unified judgment prompt (PAPER.md section 5, Eq. 1).

One builder, parameterised by condition (phi) and candidates (delta), yields both tasks:

* response preference (Eq. 2): phi = the conversation, delta = (response 1, response 2);
* analysis preference / self-reflection (Eq. 3): phi = the conversation and both responses,
  delta = (critique 1, critique 2), two analyses the model wrote itself.

The paper's Figure 5 wording is not recoverable; the structure (Context, candidates "for Judgment",
the <Analysis>/<Result> output format, a control suffix that disables Qwen3 thinking) is the paper's.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from reflectrm.core.types import ChatMessage, PreferencePair


class Task(str, enum.Enum):
    """The two preference tasks of the unified framework."""

    RESPONSE = "response"  # Eq. 2: which response is better
    ANALYSIS = "analysis"  # Eq. 3: which critique (analysis) is better

    @property
    def noun(self) -> str:
        """The candidate noun the verdict statement uses ("Response" / "Critique")."""
        return "Response" if self is Task.RESPONSE else "Critique"


INSTRUCTIONS = {
    Task.RESPONSE: (
        "You are an impartial judge. Compare the two responses to the last user turn of the "
        "conversation in the Context and decide which one is better. First write your analysis, "
        "then your verdict."
    ),
    Task.ANALYSIS: (
        "You are an impartial judge of critiques. Two critiques each analyse the same two responses "
        "to the conversation in the Context. Decide which critique's analysis is more accurate and "
        "sound. First write your analysis, then your verdict."
    ),
}

DEFAULT_CONTROL_SUFFIX = "/no_think"
"""Appended to every prompt: Qwen3's documented switch that disables thinking (PAPER.md 3, 5)."""


@dataclass(frozen=True, slots=True)
class Condition:
    """phi of Eq. 1: the conversation, plus the two responses for the reflection task."""

    conversation: tuple[ChatMessage, ...]
    responses: tuple[str, str] | None = None


def _render_turns(conversation: Sequence[ChatMessage]) -> str:
    return "\n".join(f"[{m.role.capitalize()}]\n{m.content}" for m in conversation)


def build_prompt(
    condition: Condition,
    candidates: tuple[str, str],
    *,
    task: Task,
    control_suffix: str = DEFAULT_CONTROL_SUFFIX,
) -> list[ChatMessage]:
    """Build the single-user-turn chat prompt of Eq. 1 for either task."""
    noun = task.noun
    parts = [INSTRUCTIONS[task], "", "## Context", _render_turns(condition.conversation)]
    if condition.responses is not None:
        parts += ["", f"[Response 1]\n{condition.responses[0]}", f"[Response 2]\n{condition.responses[1]}"]
    parts += [
        "",
        f"## {noun}s for Judgment",
        f"[{noun} 1]\n{candidates[0]}",
        f"[{noun} 2]\n{candidates[1]}",
        "",
        "## Output format",
        "<Analysis> your analysis </Analysis>",
        f"<Result> {noun} 1 is better than {noun} 2 </Result> or <Result> {noun} 2 is better than {noun} 1 </Result>",
    ]
    if control_suffix:
        parts.append(control_suffix)
    return [ChatMessage("user", "\n".join(parts))]


def response_prompt(pair: PreferencePair, *, control_suffix: str = DEFAULT_CONTROL_SUFFIX) -> list[ChatMessage]:
    """The response-preference prompt (Eq. 2) for a pair."""
    return build_prompt(
        Condition(pair.conversation),
        (pair.response_1, pair.response_2),
        task=Task.RESPONSE,
        control_suffix=control_suffix,
    )


def reflection_prompt(
    pair: PreferencePair,
    critique_1: str,
    critique_2: str,
    *,
    control_suffix: str = DEFAULT_CONTROL_SUFFIX,
) -> list[ChatMessage]:
    """The analysis-preference (self-reflection) prompt (Eq. 3 / Eq. 7) for two critiques of a pair."""
    return build_prompt(
        Condition(pair.conversation, (pair.response_1, pair.response_2)),
        (critique_1, critique_2),
        task=Task.ANALYSIS,
        control_suffix=control_suffix,
    )


def format_output(analysis: str, choice: int, *, task: Task) -> str:
    """The target output format: what a perfectly formatted judge writes (used to build training data)."""
    noun = task.noun
    other = 3 - choice
    return f"<Analysis>{analysis}</Analysis>\n<Result>{noun} {choice} is better than {noun} {other}</Result>"


def format_critique(analysis: str, prediction: int | None, *, include_verdict: bool) -> str:
    """A rollout as shown in a reflection prompt: its analysis, optionally with its verdict."""
    if not include_verdict or prediction is None:
        return analysis
    return f"{analysis}\nVerdict: Response {prediction} is better than Response {3 - prediction}"
