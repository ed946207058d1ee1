"""The OpenAI-compatible HTTP backend: one or several `vllm serve` / SGLang / other chat-completions servers.

    reflectrm judge --backend openai --base-url http://gpu1:8000/v1 --base-url http://gpu2:8000/v1 ...

* One request per seed (`n=1, seed=s`): servers disagree on how `n` > 1 shares one seed among its
  choices (vLLM derives all of them from one generator, so sample j would depend on n), and a
  judgment must be reproducible sample by sample. The server's prefix cache makes the repeats cheap.
* Log-probs come from `logprobs: true`; vLLM's server returns the raw model distribution by default
  (`--logprobs-mode raw_logprobs`), which is what Eq. 5 scores. A server that returns none is refused
  at once: confidence cannot be computed without them.
* Requests are routed by `reflectrm.backends.fleet`: each to the server with the fewest in flight (at most
  `max_concurrency` each); a server that fails is cooled down and probed (GET /health, else /v1/models) before
  it gets work again. Connection errors, timeouts and HTTP 5xx are retried `max_retries` times on another
  server, with exponential backoff and full jitter; anything else fails at once. `fleet.metric_lines()` gives
  the per-server figures the reward service's /metrics shows.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from reflectrm.backends.base import Completion, GenerationRequest, SamplingParams
from reflectrm.backends.engine import EngineConfig
from reflectrm.backends.fleet import Fleet, Pick, public_url
from reflectrm.core.types import ChatMessage, messages_to_dicts
from reflectrm.errors import BackendError, ConfigError, ContextLengthError, GenerationCancelled, require

log = logging.getLogger(__name__)

BACKOFF_BASE_S = 0.5  # first retry waits up to this long; doubles each try (full jitter)
BACKOFF_MAX_S = 20.0
PROBE_TIMEOUT_S = 5.0  # a probe (GET /health) waits at most this long (a request's timeout_s covers generation)
CONTEXT_WORDS = ("maximum context length", "context length", "too long", "max_model_len")


class _Retryable(Exception):
    """A failure worth another try (connection error, timeout, HTTP 5xx); the message is for the final error."""


class OpenAIBackend:
    """Chat completions with sampled-token log-probs from OpenAI-compatible servers.

    Args:
        base_urls: each server's API root, e.g. http://127.0.0.1:8000/v1.
        model: the served model name; None = the server's only model (GET /v1/models).
        config: timeouts, retries and concurrency (`EngineConfig`).
        client: an httpx.Client to use (tests inject one); None = a new one.
    """

    name = "openai"

    def __init__(self, base_urls: Sequence[str], *, model: str | None = None, config: EngineConfig | None = None,
                 client: Any = None) -> None:
        httpx = require("httpx", extra="openai")
        if not base_urls:
            raise ConfigError("the openai backend needs --base-url URL (e.g. http://127.0.0.1:8000/v1), "
                              "once per server")
        self.config = config or EngineConfig()
        self.base_urls = tuple(u.rstrip("/") for u in base_urls)
        self._names = tuple(public_url(u) for u in self.base_urls)  # what messages and logs show: no credentials
        self._httpx = httpx
        key = os.environ.get(self.config.api_key_env) or os.environ.get("OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        limits = httpx.Limits(max_connections=self.config.max_concurrency * len(self.base_urls))
        self._client = client or httpx.Client(headers=headers, timeout=self.config.timeout_s, limits=limits)
        self.fleet = Fleet(self.base_urls, max_in_flight=self.config.max_concurrency, routing=self.config.routing,
                           cooldown_s=self.config.cooldown_s, cooldown_max_s=self.config.cooldown_max_s)
        self.model_id = model or self._only_model()
        self.model_revision = f"served:{self.model_id}"
        self._max_context: int | None = None

    # -- protocol -------------------------------------------------------------------------------

    def generate(self, requests: Sequence[GenerationRequest], params: SamplingParams, *,
                 should_stop: Callable[[], bool] | None = None) -> list[list[Completion]]:
        jobs = [(i, j, r.prompt, seed) for i, r in enumerate(requests) for j, seed in enumerate(r.seeds)]
        out: list[list[Completion | None]] = [[None] * len(r.seeds) for r in requests]
        workers = self.config.max_concurrency * len(self.base_urls)
        pool = ThreadPoolExecutor(max_workers=max(1, min(workers, len(jobs))), thread_name_prefix="reflectrm-http")
        pending: dict[Future, tuple[int, int]] = {
            pool.submit(self._complete, prompt, seed, params): (i, j) for i, j, prompt, seed in jobs
        }
        try:
            self._collect(pending, out, should_stop)
        finally:
            # On a stop or an error: requests not yet sent are never sent, and the caller does not wait for the
            # ones in flight (their answers are dropped; each ends within timeout_s).
            pool.shutdown(wait=not pending, cancel_futures=True)
        return [list(row) for row in out]  # type: ignore[arg-type]

    def check_prompt(self, prompt: Sequence[ChatMessage], *, max_new_tokens: int) -> None:
        """Best effort: the server has the tokenizer, so the exact check happens when it answers (HTTP 400)."""
        limit = self._context_limit()
        chars = sum(len(m.content) for m in prompt)
        if limit and chars // 8 + max_new_tokens > limit:  # >= 8 characters per token would be a very odd tokenizer
            raise ContextLengthError(
                f"the prompt is {chars} characters (at least {chars // 8} tokens) and up to {max_new_tokens} more "
                f"may be generated, but the served model's context is {limit} tokens: shorten the query or responses"
            )

    # -- internals ------------------------------------------------------------------------------

    def _collect(self, pending: dict[Future, tuple[int, int]], out: list[list[Completion | None]],
                 should_stop: Callable[[], bool] | None) -> None:
        while pending:
            done, _ = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            for future in done:
                i, j = pending.pop(future)
                out[i][j] = future.result()  # the first error ends the call (the rest are cancelled)
            if should_stop is not None and pending and should_stop():
                raise GenerationCancelled("stopped: the pending requests were cancelled and nothing was returned")

    def _complete(self, prompt: Sequence[ChatMessage], seed: int, params: SamplingParams) -> Completion:
        body = self._body(prompt, seed, params)
        failures: list[str] = []
        avoid: int | None = None
        while len(failures) <= self.config.max_retries:
            pick = self.fleet.acquire(avoid=avoid)
            if pick.probe:
                failure = self._probe(pick)
                if failure is None or not pick.last_resort:
                    continue  # passed: ask again (it is likely the least loaded now); failed: another is up
                failures.append(failure)
            else:
                try:
                    return self._send(pick.server, body, params)
                except _Retryable as exc:
                    failures.append(str(exc))
                    avoid = pick.server  # the retry goes to another server when one is up
            if len(failures) <= self.config.max_retries:
                delay = random.uniform(0, min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (len(failures) - 1)))
                log.warning("%s; retrying in %.1fs (%d/%d)", failures[-1], delay, len(failures),
                            self.config.max_retries)
                time.sleep(delay)
        down = self.fleet.down_summary()
        fleet = f": every server is down: {down}" if down and len(self.base_urls) > 1 else ""
        raise BackendError(f"{failures[-1]} (gave up after {len(failures)} tries){fleet}: check the servers are up, "
                           "or raise --max-retries / --timeout-s")

    def _send(self, k: int, body: dict[str, Any], params: SamplingParams) -> Completion:
        """POST to server k (its slot taken) and report the outcome to the fleet."""
        started = time.monotonic()
        try:
            completion = self._post(k, body, params)
        except _Retryable as exc:
            self.fleet.failed(k, reason=str(exc))
            raise
        except BaseException:
            self.fleet.answered(k, latency_s=time.monotonic() - started)  # it answered: the request was at fault
            raise
        self.fleet.answered(k, latency_s=time.monotonic() - started)
        return completion

    def _probe(self, pick: Pick) -> str | None:
        """GET the server's /health (vLLM, SGLang), or its /v1/models where it has none; report to the fleet.

        Returns None when it passed, else why it failed."""
        failure: str | None = "its probe was interrupted"
        try:
            failure = self._probe_failure(pick.server)
        finally:  # reported whatever happens: a server left probing would hold every waiting request
            self.fleet.probed(pick.server, ok=failure is None, reason=failure or "")
        return failure

    def _probe_failure(self, k: int) -> str | None:
        base, name = self.base_urls[k], self._names[k]
        root = base[:-3] if base.endswith("/v1") else base
        timeout = PROBE_TIMEOUT_S
        try:
            resp = self._client.get(f"{root}/health", timeout=timeout)
            if resp.status_code in (404, 405):  # no /health route: the model list answers instead
                resp = self._client.get(f"{base}/models", timeout=timeout)
        except self._httpx.TimeoutException:
            return f"server {name} did not answer its probe within {timeout:g}s"
        except self._httpx.HTTPError as exc:
            return f"cannot reach server {name} ({type(exc).__name__})"
        return None if resp.status_code == 200 else f"server {name} answered its probe: HTTP {resp.status_code}"

    def _body(self, prompt: Sequence[ChatMessage], seed: int, params: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model_id, "messages": messages_to_dicts(prompt), "n": 1,
            "seed": int(seed) & 0x7FFF_FFFF,  # servers take a 32-bit seed
            "temperature": params.temperature, "top_p": params.top_p, "max_tokens": params.max_new_tokens,
            "logprobs": True,
        }
        if params.top_k:
            body["top_k"] = params.top_k  # a vLLM/SGLang extension; OpenAI itself has no top-k
        return body

    def _post(self, k: int, body: dict[str, Any], params: SamplingParams) -> Completion:
        url = f"{self.base_urls[k]}/chat/completions"
        try:
            resp = self._client.post(url, json=body)
        except self._httpx.TimeoutException as exc:
            raise _Retryable(f"server {self._names[k]} did not answer within {self.config.timeout_s:g}s") from exc
        except self._httpx.TransportError as exc:
            raise _Retryable(f"cannot reach server {self._names[k]} ({type(exc).__name__})") from exc
        if resp.status_code >= 500:
            raise _Retryable(f"server {self._names[k]} answered HTTP {resp.status_code}")
        payload = _json(resp, self._names[k])
        if resp.status_code != 200:
            raise _client_error(resp.status_code, payload, self._names[k])
        return _completion(payload, self._names[k], want_logprobs=params.logprobs)

    def _get(self, path: str) -> Any:
        """GET `path` from the first server of the fleet that answers (one may be restarting)."""
        failure: BackendError | None = None
        for base in self.base_urls:
            try:
                resp = self._client.get(f"{base}{path}")
            except self._httpx.HTTPError as exc:
                failure = BackendError(f"cannot reach {public_url(base)}{path} ({type(exc).__name__}): "
                                       "check --base-url and that the server is up")
                failure.__cause__ = exc
                continue
            payload = _json(resp, public_url(base))
            if resp.status_code != 200:
                raise _client_error(resp.status_code, payload, public_url(base))
            return payload
        assert failure is not None  # base_urls is never empty
        raise failure

    def _only_model(self) -> str:
        models = [m.get("id") for m in (self._get("/models").get("data") or []) if isinstance(m, dict)]
        if len(models) != 1 or not isinstance(models[0], str):
            raise ConfigError(f"the server at {self._names[0]} serves {len(models)} models "
                              f"({', '.join(map(str, models[:5]))}): pick one with --model")
        return models[0]

    def _context_limit(self) -> int | None:
        if self._max_context is None:
            found = [m for m in (self._get("/models").get("data") or []) if isinstance(m, dict)
                     and m.get("id") == self.model_id]
            self._max_context = int(found[0].get("max_model_len") or 0) if found else 0  # a vLLM field
        return self._max_context or None


def _json(resp: Any, server: str) -> Any:
    try:
        payload = resp.json()
    except (json.JSONDecodeError, ValueError) as exc:
        raise BackendError(f"server {server} answered HTTP {resp.status_code} with malformed JSON "
                           f"({resp.text[:60]!r}...): is --base-url an OpenAI-compatible API root ending in /v1?"
                           ) from exc
    if not isinstance(payload, dict):
        raise BackendError(f"server {server} answered a JSON {type(payload).__name__}, not an object: "
                           "is --base-url an OpenAI-compatible API root?")
    return payload


def _client_error(status: int, payload: dict[str, Any], server: str) -> BackendError:
    err = payload.get("error")
    message = str(err.get("message", err) if isinstance(err, dict) else err or payload.get("message") or payload)[:300]
    if status == 400 and any(w in message.lower() for w in CONTEXT_WORDS):
        return ContextLengthError(f"server {server}: {message}: shorten the query or responses, "
                                  "or lower max_new_tokens")
    if status in (401, 403):
        return BackendError(f"server {server} refused the key (HTTP {status}): set REFLECTRM_OPENAI_API_KEY")
    return BackendError(f"server {server} answered HTTP {status}: {message}")


def _completion(payload: dict[str, Any], server: str, *, want_logprobs: bool) -> Completion:
    try:
        choice = payload["choices"][0]
        text = choice["message"]["content"] or ""
        finish = choice.get("finish_reason") or "stop"
    except (KeyError, IndexError, TypeError) as exc:
        raise BackendError(f"server {server} answered without choices[0].message.content: "
                           "is it an OpenAI-compatible chat-completions server?") from exc
    content = (choice.get("logprobs") or {}).get("content") if isinstance(choice.get("logprobs"), dict) else None
    if not content:
        if want_logprobs and text:
            raise BackendError(f"server {server} returned no log-probs: confidence (Eq. 5) needs them; "
                               "serve the judge with vLLM or SGLang, which return them")
        content = []
    try:
        logprobs = [float(t["logprob"]) for t in content]
    except (KeyError, TypeError, ValueError) as exc:
        raise BackendError(f"server {server} returned malformed log-probs: "
                           "expected logprobs.content[].logprob") from exc
    last = content[-1].get("token") if content and isinstance(content[-1], dict) else None
    if finish == "stop" and content and (not last or not text.endswith(str(last))):
        logprobs.pop()  # vLLM lists the stop token (<|im_end|>), absent from the text: not counted (Eq. 5)
    usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
    num = len(logprobs) if content else int(usage.get("completion_tokens") or 0)
    return Completion(text, tuple(logprobs) if want_logprobs else (), num, "length" if finish == "length" else "stop")
