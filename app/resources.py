"""The app's shared resources: cancel tokens, review leases, the model, and the backend one operation sees.

Built once at start-up inside the runtime (`reflectrm_app.services.runtime`) and shared by every user, so each
guards its state with a lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from reflectrm.backends.base import Backend, Completion, GenerationRequest, SamplingParams, StopCheck
from reflectrm.core.types import ChatMessage
from reflectrm.errors import Cancelled, ReflectRMError

log = logging.getLogger(__name__)

REVIEW_LEASE_S = 900.0  # a reviewer holds the item they look at this long, so two reviewers get different items


# --- shared resources ----------------------------------------------------------------------------------------


class CancelTokens:
    """One cancel flag per (user session, operation): Stop sets it, the running work checks it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[str, threading.Event] = {}

    def start(self, key: str) -> threading.Event:
        with self._lock:
            event = self._events[key] = threading.Event()
            return event

    def running(self, key: str) -> bool:
        """Whether work under `key` has started and not finished."""
        with self._lock:
            return key in self._events

    def cancel(self, key: str) -> bool:
        with self._lock:
            event = self._events.get(key)
        if event is None:
            return False
        event.set()
        return True

    def finish(self, key: str, event: threading.Event) -> None:
        with self._lock:
            if self._events.get(key) is event:
                del self._events[key]


class ReviewLeases:
    """Which reviewer is looking at which judgment (expires after `ttl_s`)."""

    def __init__(self, ttl_s: float = REVIEW_LEASE_S) -> None:
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._held: dict[int, tuple[str, float]] = {}

    def take(self, judgment_id: int, owner: str, *, unless_holding: bool = False) -> bool:
        """Lease `judgment_id` to `owner` unless someone else holds it (`unless_holding`: or `owner` already holds
        an item, checked in the same step)."""
        now = time.monotonic()
        with self._lock:
            if unless_holding and self._holding(owner, now) is not None:
                return False
            holder = self._held.get(judgment_id)
            if holder is not None and holder[0] != owner and holder[1] > now:
                return False
            for jid in [j for j, (o, _) in self._held.items() if o == owner]:
                del self._held[jid]  # one item per reviewer
            self._held[judgment_id] = (owner, now + self.ttl_s)
            return True

    def release(self, owner: str) -> None:
        with self._lock:
            for jid in [j for j, (o, _) in self._held.items() if o == owner]:
                del self._held[jid]

    def holding(self, owner: str) -> int | None:
        """The judgment `owner` holds (None: none, or its lease lapsed)."""
        with self._lock:
            return self._holding(owner, time.monotonic())

    def _holding(self, owner: str, now: float) -> int | None:
        return next((j for j, (o, until) in self._held.items() if o == owner and until > now), None)


class ModelHolder:
    """Holds the judge every operation uses: loaded once (on first use or in the background at start-up),
    and switched to another model on request (a checkpoint made the active judge).

    Args:
        loader: builds the backend.
        warm: run once on the new backend before anyone uses it (a first generation in a process pays
            one-off set-up costs, several seconds on CPU, that should not land on the first click).
        name: what the loader loads (a model path or Hugging Face id), shown as the active judge.
    """

    def __init__(self, loader: Callable[[], Backend], *, warm: Callable[[Backend], None] | None = None,
                 name: str = "") -> None:
        self._loader = loader
        self._warm_fn = warm
        self._name = name
        self._lock = threading.Lock()  # guards the fields; held while the first load runs
        self._switching = threading.Lock()  # one switch at a time
        self._backend: Backend | None = None
        self._error = ""  # why the last load failed ("" after a load that worked): the header shows it

    @property
    def name(self) -> str:
        """The active judge: the model it loads ("" when the loader did not say)."""
        with self._lock:
            return self._name

    @property
    def error(self) -> str:
        """Why the judge failed to load, in one line ("" when it loaded, or has not been tried)."""
        return self._error

    def get(self) -> Backend:
        with self._lock:
            if self._backend is None:
                started = time.perf_counter()
                try:
                    self._backend = self._load(self._loader)
                except ReflectRMError as exc:
                    self._error = " ".join(str(exc).split())
                    raise
                self._error = ""
                log.info("model loaded and warmed up in %.1fs", time.perf_counter() - started)
            return self._backend

    def switch(self, loader: Callable[[], Backend], *, name: str) -> Backend:
        """Load another model and make it the one every later `get` returns.

        The new model loads while the current one keeps serving; operations already holding the
        current backend finish on it. If loading fails, nothing changes.
        """
        with self._switching:
            backend = self._load(loader)
            with self._lock:
                self._loader, self._backend, self._name = loader, backend, name
        log.info("the active judge is now %s", name)
        return backend

    def close(self) -> None:
        """Release the loaded judge's engine (its processes, for vLLM); a later `get` loads it again."""
        with self._lock:
            backend, self._backend = self._backend, None
        close = getattr(backend, "close", None)
        if callable(close):
            close()

    def _load(self, loader: Callable[[], Backend]) -> Backend:
        backend = loader()
        if self._warm_fn is not None:
            self._warm_fn(backend)
        return backend

    def warm_up(self) -> threading.Thread:
        thread = threading.Thread(target=self._warm, name="reflectrm-model-load", daemon=True)
        thread.start()
        return thread

    def _warm(self) -> None:
        try:
            self.get()
        except ReflectRMError as exc:  # reported again to the first user who judges
            log.warning("model failed to load: %s", exc)


@dataclass
class GuardedBackend:
    """A backend seen by one operation: one generation at a time, Stop honoured at every decode step."""

    inner: Backend
    lock: threading.Lock
    cancel: threading.Event | None = None
    calls: int = 0

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def model_revision(self) -> str:
        return self.inner.model_revision

    def check_prompt(self, prompt: Any, *, max_new_tokens: int) -> None:
        self.inner.check_prompt(prompt, max_new_tokens=max_new_tokens)

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams, *, should_stop: StopCheck | None = None
    ) -> list[list[Completion]]:
        self._check()
        with self.lock:
            self._check()
            self.calls += 1
            return self.inner.generate(requests, params, should_stop=lambda: self._stopped(should_stop))

    def _stopped(self, should_stop: StopCheck | None) -> bool:
        return (self.cancel is not None and self.cancel.is_set()) or (should_stop is not None and should_stop())

    def _check(self) -> None:
        if self._stopped(None):
            raise Cancelled("stopped: nothing was recorded")


def warm_up_generation(backend: Backend) -> None:
    """Generate a few tokens the way a judgment does (8 sampled with log-probs, then one greedy)."""
    prompt = (ChatMessage("user", "What is 1 + 1?"),)
    backend.generate([GenerationRequest(prompt, tuple(range(8)))], SamplingParams(max_new_tokens=8, logprobs=True))
    backend.generate([GenerationRequest(prompt, (0,))], SamplingParams(temperature=0.0, max_new_tokens=8))
