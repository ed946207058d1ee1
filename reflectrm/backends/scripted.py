"""A scripted backend for tests and demos of the pipeline without a model.

A `responder(prompt_text, seed, params) -> str | Completion` decides every output. Calls are
recorded so tests can assert what was generated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from reflectrm.backends.base import Completion, GenerationRequest, SamplingParams, StopCheck
from reflectrm.core.types import ChatMessage
from reflectrm.errors import ContextLengthError, GenerationCancelled

Responder = Callable[[str, int, SamplingParams], "str | Completion"]


@dataclass
class ScriptedBackend:
    """Backend whose outputs come from a Python function.

    Attributes:
        responder: returns the output for (prompt text, seed, params).
        max_context_chars: prompts longer than this raise `ContextLengthError` (a stand-in for tokens).
        calls: every (prompt text, seed, params) generated, in order.
    """

    responder: Responder
    max_context_chars: int = 1_000_000
    name: str = "scripted"
    model_id: str = "scripted"
    model_revision: str = "scripted"
    calls: list[tuple[str, int, SamplingParams]] = field(default_factory=list)

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams, *, should_stop: StopCheck | None = None
    ) -> list[list[Completion]]:
        out = []
        for req in requests:
            text = prompt_text(req.prompt)
            self.check_prompt(req.prompt, max_new_tokens=params.max_new_tokens)
            row = []
            for seed in req.seeds:
                if should_stop is not None and should_stop():  # one completion is the scripted "decode step"
                    raise GenerationCancelled(f"stopped after {len(self.calls)} scripted completion(s)")
                self.calls.append((text, seed, params))
                row.append(_as_completion(self.responder(text, seed, params), logprobs=params.logprobs))
            out.append(row)
        return out

    def check_prompt(self, prompt: Sequence[ChatMessage], *, max_new_tokens: int) -> None:
        size = len(prompt_text(prompt))
        if size >= self.max_context_chars:
            raise ContextLengthError(
                f"the prompt is {size} characters but the scripted model's context is {self.max_context_chars}: "
                "shorten the query or responses"
            )


def prompt_text(prompt: Sequence[ChatMessage]) -> str:
    return "\n".join(m.content for m in prompt)


def _as_completion(value: str | Completion, *, logprobs: bool) -> Completion:
    if isinstance(value, Completion):
        return value
    # One pseudo-token per whitespace-separated word, each with log-prob -0.1.
    words = value.split()
    return Completion(value, tuple(-0.1 for _ in words) if logprobs else (), len(words), "stop")
