"""The pure core: prompts, parsing, confidence (Eq. 5), anchor (Eq. 6), reflection bookkeeping
(Eq. 7-8), votes (Eq. 9) and strategies. Standard library only."""

from reflectrm.core.confidence import bottom_count, confidence, select_anchor
from reflectrm.core.config import JudgeConfig
from reflectrm.core.parsing import ParsedOutput, parse_output
from reflectrm.core.prompts import Task, build_prompt, reflection_prompt, response_prompt
from reflectrm.core.strategies import STRATEGIES, Decision, Strategy, decide
from reflectrm.core.types import (
    ChatMessage,
    Choice,
    Judgment,
    ParseStatus,
    PreferencePair,
    Reflection,
    Rollout,
    Vote,
)
from reflectrm.core.voting import final_vote, plain_vote, reflection_vote

__all__ = [
    "STRATEGIES",
    "ChatMessage",
    "Choice",
    "Decision",
    "JudgeConfig",
    "Judgment",
    "ParseStatus",
    "ParsedOutput",
    "PreferencePair",
    "Reflection",
    "Rollout",
    "Strategy",
    "Task",
    "Vote",
    "bottom_count",
    "build_prompt",
    "confidence",
    "decide",
    "final_vote",
    "parse_output",
    "plain_vote",
    "reflection_prompt",
    "reflection_vote",
    "response_prompt",
    "select_anchor",
]
