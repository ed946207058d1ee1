"""The one small backend protocol: chat prompts in, completions (with sampled-token log-probs) out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from reflectrm.core.types import ChatMessage
from reflectrm.errors import ConfigError

StopCheck = Callable[[], bool]
"""`should_stop`: called often while generating (every decode step where the engine allows); True stops it."""


@dataclass(frozen=True, slots=True)
class Completion:
    """One generated continuation.

    Attributes:
        text: the decoded text, stop token excluded.
        token_logprobs: log-prob of each sampled token under the model (temperature 1, no
            truncation), stop token excluded; () when log-probs were not asked for.
        num_tokens: generated tokens, stop token excluded.
        finish_reason: "stop" (a stop token) or "length" (max_new_tokens reached).
        token_ids: the generated token ids, stop token excluded, when the backend has them.
    """

    text: str
    token_logprobs: tuple[float, ...] = ()
    num_tokens: int = 0
    finish_reason: str = "stop"
    token_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One prompt and one seed per wanted completion (so n = len(seeds))."""

    prompt: tuple[ChatMessage, ...]
    seeds: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingParams:
    """Decoding settings shared by every request of one `generate` call."""

    temperature: float = 1.0  # 0 = greedy
    top_k: int = 0  # 0 = no truncation
    top_p: float = 1.0  # 1 = no truncation
    max_new_tokens: int = 1024
    logprobs: bool = False  # return the log-prob of every sampled token

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")
        if self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


@runtime_checkable
class Backend(Protocol):
    """A text generator behind ReflectRM.

    Attributes:
        name: the backend kind ("transformers", "scripted", ...).
        model_id: the model's id or path.
        model_revision: a content hash or revision of the weights.
    """

    name: str
    model_id: str
    model_revision: str

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams, *, should_stop: StopCheck | None = None
    ) -> list[list[Completion]]:
        """Generate len(r.seeds) completions for each request, in order.

        `should_stop` is checked every decode step (or handed to the engine's own abort); when it
        returns True the call raises `GenerationCancelled` and returns nothing, so a long stage 1
        stops within a step, not at the end of the call.

        Raises `BackendError` when it cannot honour `params` (log-probs, say), and
        `ContextLengthError` when a prompt does not fit the model's context.
        """
        ...

    def check_prompt(self, prompt: Sequence[ChatMessage], *, max_new_tokens: int) -> None:
        """Raise `ContextLengthError` when `prompt` leaves no room for generation in the context."""
        ...
