"""`reflectrm serve`: ReflectRM over HTTP, as the reward model of an RL run (FastAPI + uvicorn).

    POST /v1/judge     {"query" | "messages", "response_1", "response_2", "label"?, "id"?} -> a Judgment's to_dict()
    POST /v1/rewards   {"prompts": [...], "completions": [[...] per prompt], "references"?: [...]}
                       -> {"rewards": [[...] per prompt]}   (win rates, `reflectrm.serving.rewards`)
    POST /get_reward   OpenRLHF's remote reward model: {"query": [prompt + response], "prompts": [...],
                       "labels"?: [...]} -> {"rewards": [...], "scores": [...]}; equal prompts form a group,
                       a non-empty label is the reference answer
    GET  /health       {"status": "ok" | "draining", "model", "backend", "queued"} (503 while draining)
    GET  /metrics      Prometheus text: requests, judgments, rejections, batches, generation seconds; with
                       --backend openai each upstream server's state, in flight, errors and latency

Requests are batched across clients (`reflectrm.serving.batcher`): those that arrive while the
backend is busy, or within `batch_window_s` when it is idle, are judged together in one stage-1 and
one stage-2 batch, each answered with its own result, identical to what it gets alone. Up to
`max_queue` requests wait for the next batch; the next gets 429 with Retry-After at once. A body is
counted while it streams (413 past `max_body_bytes`, chunked or not; 408 when it stalls for
`body_timeout_s`); a full queue refuses before reading the body, so a flood costs little more than its
connections; a connection whose request line and headers are not whole within `header_timeout_s`
gets 408 and is closed (`serve`'s HTTP protocol), however slowly it drips them. A client that
disconnects is dropped from the queue, and its batch stops when no batchmate remains. SIGTERM
drains: no new work (503 + Retry-After, /health "draining"), admitted
requests are answered within `drain_timeout_s` (the rest get 503 + Retry-After, nothing of theirs
stored), then the process exits 0. A backend failure (an upstream server down) is 503; bad input is
400 or 413, each with {"error": one line}. With a token, every POST needs `Authorization: Bearer TOKEN`.

No web page can drive it (`reflectrm.serving.hosts`): a Host that is not this service's (DNS rebinding) and a
POST from another site's page get 403, a POST body not declared `application/json` gets 415, each before the
body is read. `ServeConfig.access` allows more names and origins (the latter also answered for CORS).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from reflectrm.backends.base import Backend
from reflectrm.backends.fleet import Fleet
from reflectrm.core.config import JudgeConfig
from reflectrm.core.types import Judgment, PreferencePair
from reflectrm.errors import BackendError, Cancelled, ConfigError, InputError, ReflectRMError, require
from reflectrm.files.inputs import unique_keys
from reflectrm.serving.batcher import Batcher, Busy, Draining, Job
from reflectrm.serving.cache import JudgmentCache, request_key
from reflectrm.serving.guard import AccessGuard
from reflectrm.serving.hosts import AccessConfig, Refusal, json_body_refusal
from reflectrm.serving.rewards import (Grouped, RewardConfig, completion_text, conversation_of, group_by_prompt,
                                       judgments_needed, plan_rewards)

log = logging.getLogger(__name__)

Record = Callable[[Sequence[Judgment], bool], list[int]]
"""Stores judgments (`swapped=True`: [original, swapped] pairs); returns their ids (the store's `record`)."""

Answer = Callable[[list[Judgment], "list[int] | None", "int | None"], dict[str, Any]]
"""A request's reply from its judgments, their stored ids (None: not stored) and how many of them the store
answered (None: no cache)."""

RETRY_AFTER_S = 1  # what a 429 or a draining 503 tells the client to wait


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeConfig:
    """Limits of the reward service."""

    max_body_bytes: int = 8 << 20  # larger requests get 413 (counted while the body streams)
    max_judgments: int = 4096  # judgments one request may cost (see rewards.judgments_needed); more: 413
    max_queue: int = 64  # requests waiting for the next batch; the next gets 429
    token: str | None = None  # bearer token every POST must carry; None = open (bind to 127.0.0.1 then)
    batch_window_s: float = 0.01  # an idle backend waits this long after a request for batchmates
    round_judgments: int = 4096  # most judgments one batch holds; a larger backlog waits for the next
    round_requests: int | None = None  # most requests one batch holds (1: one at a time, the old design)
    body_timeout_s: float = 30.0  # a body that stalls this long between chunks gets 408
    header_timeout_s: float = 30.0  # a request line and headers not whole this long after the connection
    # opened (or after its last answer) get 408 and the connection closes (`http_protocol`)
    drain_timeout_s: float = 60.0  # on SIGTERM, how long admitted requests have to finish
    access: AccessConfig = AccessConfig()  # hosts and origins answered beyond this service's own (`hosts`)

    def __post_init__(self) -> None:
        # the messages name the `reflectrm serve` flags, which are derived from these fields
        if self.token is not None:
            check_token(self.token, name="token")
        if not (_whole(self.max_queue) and self.max_queue >= 0):
            raise ConfigError(f"--max-queue {self.max_queue!r} is not a queue length: give 0 or more")
        if not (_whole(self.max_judgments) and self.max_judgments >= 1):
            raise ConfigError(f"--max-judgments {self.max_judgments!r} is too few: give at least 1 per request")
        if not (_number(self.batch_window_s) and 0 <= self.batch_window_s <= 10):
            raise ConfigError(f"--batch-window-ms {self.batch_window_s * 1000 if _number(self.batch_window_s) else self.batch_window_s!r} is "
                              "out of range: give 0-10000 milliseconds")
        if not (_number(self.drain_timeout_s) and 0 <= self.drain_timeout_s <= 86_400):
            raise ConfigError(f"--drain-timeout-s {self.drain_timeout_s!r} is out of range: give 0-86400 seconds")


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


MIN_TOKEN_CHARS = 16
"""The shortest bearer token the service accepts: a guessable one would guard nothing."""

TOKEN_FIX = "generate one with python -c 'import secrets; print(secrets.token_urlsafe())'"


def check_token(token: str, *, name: str) -> str:
    """Refuse a bearer token that is blank, holds a space or control character, or is shorter than MIN_TOKEN_CHARS.

    `name` is what the message calls it (an environment variable); the token itself is never shown."""
    if not token.strip():
        raise ConfigError(f"{name} is set but blank: give a bearer token or unset it ({TOKEN_FIX})")
    if any(c.isspace() or not c.isprintable() for c in token):
        raise ConfigError(f"{name} holds a space, line break or control character (a header cannot carry it): "
                          f"{TOKEN_FIX}")
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"{name} is {len(token)} characters, under the minimum of {MIN_TOKEN_CHARS}: {TOKEN_FIX}")
    return token


class RewardService:
    """The service behind the routes: validation, admission, batching (`Batcher`), recording, counters."""

    def __init__(self, backend: Backend, *, judge_config: JudgeConfig, reward_config: RewardConfig,
                 config: ServeConfig, record: Record | None = None, cache: JudgmentCache | None = None) -> None:
        if record is not None and cache is not None:
            raise ConfigError("give the service a record function or a cache (a store), not both: the cache stores")
        self.backend, self.judge_config, self.reward_config = backend, judge_config, reward_config
        self.config, self.record, self.cache = config, record, cache
        self.counters: Counter[str] = Counter()
        self.batcher = Batcher(backend, judge_config, max_queue=config.max_queue, window_s=config.batch_window_s,
                               round_judgments=config.round_judgments, round_requests=config.round_requests,
                               counters=self.counters)

    @property
    def waiting(self) -> int:
        return self.batcher.queued

    def judge_job(self, payload: Any) -> Job:
        """/v1/judge: one pair, answered with its judgment's anatomy (and `stored_id`, `from_store` with a store)."""
        payload = _object(payload)
        _refuse_unknown(payload, JUDGE_FIELDS, "/v1/judge")
        for name in ("response_1", "response_2"):
            if name in payload and not isinstance(payload[name], str):
                raise InputError(f"{name!r} must be a string, got {_kind(payload[name])}")
        pair = PreferencePair.from_dict(payload)  # an id of 0, false or 0.0 is kept as written (core.types.id_text)

        def answer(judgments: list[Judgment], ids: list[int] | None, hits: int | None) -> dict[str, Any]:
            out = judgments[0].to_dict()
            if ids is not None:
                out["stored_id"] = ids[0]
            if hits is not None:
                out["from_store"] = bool(hits)  # answered from the store, not generated again
            return out

        return self._job([pair], swapped=False, answer=answer)

    def rewards_job(self, prompts: Sequence[Any], groups: Sequence[Sequence[str]],
                    references: Sequence[str | None] | None, *, grouped: Grouped | None = None) -> Job:
        """/v1/rewards (and /get_reward with `grouped`): each completion's win rate in its group."""
        cost = sum(judgments_needed(len(g), config=self.reward_config, reference=bool(references and references[k]))
                   for k, g in enumerate(groups))
        if cost > self.config.max_judgments:
            raise _TooLarge(f"this request needs up to {cost} judgments, over the limit of "
                            f"{self.config.max_judgments}: "
                            "send fewer groups per request, or cap opponents (--opponents)")
        plan = plan_rewards(prompts, groups, config=self.reward_config, references=references)

        def answer(judgments: list[Judgment], ids: list[int] | None, hits: int | None) -> dict[str, Any]:
            rewards = plan.rewards(judgments)
            out: dict[str, Any] = {"rewards": rewards} if grouped is None else \
                {"rewards": grouped.flatten(rewards), "scores": grouped.flatten(rewards), "extra_logs": {}}
            if hits is not None:
                out["from_store"] = hits  # how many of the request's judgments the store answered
            return out

        return self._job(plan.pairs, swapped=self.reward_config.both_orders, answer=answer)

    def _job(self, pairs: list[PreferencePair], *, swapped: bool, answer: Answer) -> Job:
        """A job that generates only the judgments the store lacks (`cache`), stores the rest once, then answers.

        `swapped`: the pairs are [original, swapped] twins. Without a cache every pair is generated and,
        with `record`, stored as before."""
        keys = [request_key(p, backend=self.backend, config=self.judge_config, swapped=swapped and k % 2 == 1)
                for k, p in enumerate(pairs)] if self.cache is not None else []
        found = self.cache.cached(keys) if self.cache is not None and keys else {}
        hits = [found.get(key) for key in keys] if keys else [None] * len(pairs)
        # a hit answers as the request asked it (its id, label, source), with the stored generations
        known = [None if hit is None else replace(hit[1], pair=p) for p, hit in zip(pairs, hits)]

        def finish(generated: list[Judgment]) -> dict[str, Any]:
            fresh = iter(generated)
            judgments = [next(fresh) if j is None else j for j in known]
            out = answer(judgments, None, None)
            json.dumps(out, ensure_ascii=False).encode("utf-8")  # the answer must encode before anything is stored
            ids = self._store(judgments, swapped=swapped, keys=keys, hits=hits, generated=bool(generated))
            count_judgments(self.counters, generated)
            if self.cache is not None:
                self.counters["store_hits"] += len(pairs) - len(generated)
            if ids is None:
                return out
            return answer(judgments, ids, None if self.cache is None else len(pairs) - len(generated))

        return Job([p for p, j in zip(pairs, known) if j is None], finish)

    def _store(self, judgments: list[Judgment], *, swapped: bool, keys: list[str],
               hits: list[tuple[int, Judgment] | None], generated: bool) -> list[int] | None:
        """Store a request's judgments (all of them or none); their row ids, or None without a store."""
        if self.cache is not None:
            if not generated:  # every one came from the store: nothing to write
                return [hit[0] for hit in hits if hit is not None]
            return self.cache.record_keyed(judgments, swapped=swapped, keys=keys)
        if self.record is not None and judgments:
            return self.record(judgments, swapped)
        return None

    def drain(self) -> bool:
        """Stop admitting; finish what was admitted within `drain_timeout_s`; True when nothing was refused."""
        return self.batcher.drain(self.config.drain_timeout_s)


class _TooLarge(InputError):
    pass


class _Stalled(InputError):
    pass


def openrlhf_groups(payload: dict[str, Any]) -> Grouped:
    """OpenRLHF's flat {"query": [prompt + response], "prompts", "labels"?} as groups; a label is a reference."""
    queries, prompts = payload.get("query"), payload.get("prompts")
    if not isinstance(queries, list) or not isinstance(prompts, list) or len(queries) != len(prompts):
        raise InputError('send {"query": [prompt + response, ...], "prompts": [prompt, ...]} of equal length')
    if not all(isinstance(x, str) for x in [*queries, *prompts]):
        raise InputError('"query" and "prompts" must hold strings')
    labels = payload.get("labels")
    if labels is not None and (not isinstance(labels, list) or len(labels) != len(queries)):
        raise InputError('"labels" must be a list as long as "query" (null or "" for no reference)')
    if labels is not None and not all(x is None or isinstance(x, str) for x in labels):
        raise InputError('"labels" must hold strings (null or "" for no reference)')
    # OpenRLHF sends the prompt and the response as one text: the response is what follows the prompt
    responses = [(q[len(p):] if q.startswith(p) else q).strip() for q, p in zip(queries, prompts)]
    return group_by_prompt(prompts, responses, labels)


JUDGE_FIELDS = ("query", "messages", "response_1", "response_2", "label", "tie", "id", "source", "subset")
REWARDS_FIELDS = ("prompts", "completions", "references")
OPENRLHF_FIELDS = ("query", "prompts", "labels")


def _refuse_unknown(payload: dict[str, Any], fields: Sequence[str], route: str) -> None:
    """A field the route does not read is refused, not ignored: {"n": 16} would otherwise judge with the server's n."""
    unknown = [k for k in payload if k not in fields]
    if unknown:
        raise InputError(f"unknown field {unknown[0]!r}: {route} takes {', '.join(fields)}; the judge's settings "
                         "(--n, --strategy, --seed, ...) are the server's, set by `reflectrm serve`")


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _object(payload: Any) -> dict[str, Any]:
    if not isinstance(payload, dict):
        raise InputError(f"the body must be a JSON object, got {_kind(payload)}: check the request's JSON")
    return payload


def _prompt(value: Any, k: int) -> Any:
    """A prompt: a string, or {"role", "content"} messages ending in a user turn."""
    ok = isinstance(value, str) or (isinstance(value, list) and value and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value))
    if not ok:
        raise InputError(f'prompts[{k}] must be a string or a list of {{"role", "content"}} messages of strings, '
                         f"got {_kind(value)}")
    conversation_of(value)  # a conversation must end in a user turn: one line here, not a failed batch
    return value


def _completion(value: Any, k: int, i: int) -> str:
    """A completion: a string, or messages whose last one holds the text (TRL's conversational format)."""
    if isinstance(value, list) and value and all(isinstance(m, dict) for m in value) \
            and isinstance(value[-1].get("content"), str):
        return completion_text(value)
    if not isinstance(value, str):
        raise InputError(f"completions[{k}][{i}] must be a string or a list of messages, got {_kind(value)}")
    return value


def _rewards_request(payload: Any) -> tuple[list[Any], list[list[str]], list[str | None] | None]:
    payload = _object(payload)
    _refuse_unknown(payload, REWARDS_FIELDS, "/v1/rewards")
    prompts, completions = payload.get("prompts"), payload.get("completions")
    if not isinstance(prompts, list) or not isinstance(completions, list):
        raise InputError('send {"prompts": [...], "completions": [[...] per prompt]}')
    if any(not isinstance(g, list) for g in completions):
        raise InputError('"completions" must be a list of lists of strings, one list per prompt')
    if len(prompts) != len(completions):
        raise InputError(f"{len(prompts)} prompts but {len(completions)} completion groups: give one group per prompt")
    prompts = [_prompt(p, k) for k, p in enumerate(prompts)]
    groups = [[_completion(c, k, i) for i, c in enumerate(g)] for k, g in enumerate(completions)]
    references = payload.get("references")
    if references is not None:
        if not isinstance(references, list) or len(references) != len(prompts):
            raise InputError(f'"references" must be a list of {len(prompts)} (one string or null per prompt)')
        if not all(r is None or isinstance(r, str) for r in references):
            raise InputError('"references" must hold strings or null (one per prompt)')
    return prompts, groups, references


def parse_json(body: bytes) -> Any:
    """The body's JSON, or one line saying what is wrong with it (never a traceback)."""
    try:
        payload = json.loads(body, object_pairs_hook=unique_keys)  # {"label": 1, "label": 2} is refused, not guessed
    except InputError as exc:
        raise InputError(f"the body's JSON: {exc}") from None
    except RecursionError as exc:
        raise InputError("the body's JSON nests too deeply: send a flat JSON object") from exc
    except ValueError as exc:  # bad JSON, bad UTF-8, an integer of thousands of digits
        raise InputError(f"the body is not valid JSON ({str(exc).splitlines()[0][:160]}): check the request") from exc
    try:
        json.dumps(payload, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start:exc.end]
        raise InputError(f"a string holds a lone surrogate ({bad.encode('unicode_escape').decode()}): "
                         "send text as valid UTF-8 (a surrogate only in a \\ud800-\\udbff + \\udc00-\\udfff pair)"
                         ) from exc
    return payload


def build_app(service: RewardService) -> Any:
    """The FastAPI application over `service`."""
    fastapi = require("fastapi", extra="serve")
    from fastapi.responses import JSONResponse, PlainTextResponse
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import ClientDisconnect, Request

    app = fastapi.FastAPI(title="ReflectRM reward service", docs_url=None, redoc_url=None)
    config = service.config

    def error(status: int, message: str, *, retry: bool = False) -> Any:
        service.counters[f"rejected_{status}"] += 1
        headers = {"Retry-After": str(RETRY_AFTER_S)} if retry else None
        return JSONResponse({"error": message}, status_code=status, headers=headers)

    def guard_reply(refusal: Refusal) -> tuple[str, bytes]:
        """A request the access guard refuses, in the service's error shape and counted like any refusal."""
        service.counters["requests"] += 1
        service.counters[f"rejected_{refusal.status}"] += 1
        return "application/json", json.dumps({"error": refusal.message}).encode()

    def refusal(exc: BaseException) -> Any:
        """Every failure as its status and one line (the order matters: a ContextLengthError is an InputError)."""
        if isinstance(exc, Busy):
            return error(429, f"busy: {config.max_queue} requests already queued; retry later", retry=True)
        if isinstance(exc, Draining):
            return error(503, "draining: this server is shutting down; retry (on another server, or after its "
                              "restart)", retry=True)
        if isinstance(exc, _TooLarge):
            return error(413, str(exc))
        if isinstance(exc, _Stalled):
            return error(408, str(exc))
        if isinstance(exc, Cancelled):
            return error(499, "the client left before its rewards were judged")
        if isinstance(exc, InputError) or (isinstance(exc, ReflectRMError) and not isinstance(exc, BackendError)):
            return error(400, str(exc))
        if isinstance(exc, BackendError):
            return error(503, f"the judge's backend failed: {exc}")
        log.error("internal error: %s: %s", type(exc).__name__, exc, exc_info=exc)
        return error(500, f"internal error ({type(exc).__name__}: {str(exc)[:200]}): see the server's log")

    async def read_body(request: Request) -> bytes:
        """The body, counted as it streams: chunked or not, no more than `max_body_bytes` is ever held."""
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > config.max_body_bytes):
            raise _TooLarge(f"request body is {declared} bytes, over the limit of {config.max_body_bytes}")
        chunks, size = [], 0
        stream = request.stream().__aiter__()
        while True:
            try:
                chunk = await asyncio.wait_for(stream.__anext__(), config.body_timeout_s)
            except StopAsyncIteration:
                return b"".join(chunks)
            except asyncio.TimeoutError:
                raise _Stalled(f"the body stalled for {config.body_timeout_s:g}s: send the whole request at once")
            size += len(chunk)
            if size > config.max_body_bytes:
                raise _TooLarge(f"request body is over the limit of {config.max_body_bytes} bytes")
            chunks.append(chunk)

    async def handle(request: Request, make_job: Callable[[Any], Job]) -> Any:
        service.counters["requests"] += 1
        if (unsupported := json_body_refusal(request.headers.get("content-type"))) is not None:
            return error(unsupported.status, unsupported.message)  # a page's form or text/plain POST: never read
        token, sent = config.token, request.headers.get("authorization", "")
        if token and not hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
            return error(401, "missing or wrong bearer token: send Authorization: Bearer <token>")
        try:
            service.batcher.check_room()  # before the body is read or parsed: a flood costs its connections only
            body = await read_body(request)
            job = await run_in_threadpool(lambda: make_job(parse_json(body)))  # CPU work off the event loop
            if job.pairs:
                service.batcher.submit(job)
            else:  # nothing to generate (every judgment from the store, or ties only): answered without a round
                await run_in_threadpool(service.batcher.finish, job)
        except ClientDisconnect:
            service.counters["disconnected"] += 1
            return error(499, "the client left while sending its request")
        except Exception as exc:  # noqa: BLE001 - every failure is one line, never a traceback
            return refusal(exc)
        return await answer(request, job)

    async def answer(request: Request, job: Job) -> Any:
        """Wait for the job; a client that leaves meanwhile cancels it (its batchmates go on)."""
        result = asyncio.wrap_future(job.future)
        result.add_done_callback(lambda f: f.cancelled() or f.exception())  # read, even when nobody waits
        while not result.done():
            await asyncio.wait({result}, timeout=0.25)
            if not result.done() and await request.is_disconnected():
                job.cancel()
                service.counters["disconnected"] += 1
                return error(499, "the client left before its rewards were judged")
        if result.exception() is not None:
            return refusal(result.exception())
        return JSONResponse(result.result())

    async def judge(request: Request) -> Any:
        return await handle(request, service.judge_job)

    async def rewards(request: Request) -> Any:
        return await handle(request, lambda payload: service.rewards_job(*_rewards_request(payload)))

    async def openrlhf(request: Request) -> Any:
        def job(payload: Any) -> Job:
            grouped = openrlhf_groups(_object(payload))
            return service.rewards_job(grouped.prompts, grouped.groups, grouped.references, grouped=grouped)

        return await handle(request, job)

    add_refusal_handlers(app, error)
    # plain Starlette routes: each reads its own body (streamed and counted), so FastAPI's parsing is bypassed
    app.add_route("/v1/judge", judge, methods=["POST"])
    app.add_route("/v1/rewards", rewards, methods=["POST"])
    app.add_route("/get_reward", openrlhf, methods=["POST"])

    @app.get("/health")
    def health() -> Any:
        service.counters["requests"] += 1
        draining = service.batcher.draining
        return JSONResponse({"status": "draining" if draining else "ok", "model": service.backend.model_id,
                             "backend": service.backend.name, "queued": service.waiting},
                            status_code=503 if draining else 200)

    @app.get("/metrics")
    def metrics() -> Any:
        service.counters["requests"] += 1
        lines = [f"reflectrm_{name}_total {value:g}" for name, value in sorted(service.counters.items())]
        lines += reflection_parse_rate_lines(service.counters)
        lines.append(f"reflectrm_queued {service.waiting}")
        lines.append(f"reflectrm_draining {int(service.batcher.draining)}")
        fleet = getattr(service.backend, "fleet", None)  # the openai backend's servers: in flight, errors, latency
        if isinstance(fleet, Fleet):
            lines += fleet.metric_lines()
        return PlainTextResponse("\n".join(lines) + "\n")

    origins = config.access.allowed_origins
    if origins:  # a page of an allowed origin may call the service from a browser: answer its CORS preflight
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=["*"] if "*" in origins else list(origins),
                           allow_methods=["GET", "POST"], allow_headers=["Authorization", "Content-Type"])
    app.add_middleware(AccessGuard, access=config.access, reply=guard_reply)  # outermost: before CORS and routes
    return app


ROUTES = "POST /v1/judge, /v1/rewards, /get_reward; GET /health, /metrics"
"""What the service answers, as a 404 names it."""


def add_refusal_handlers(app: Any, error: Callable[..., Any]) -> None:
    """Every refusal FastAPI or Starlette makes itself (404, 405, 422, 500) in the service's shape: {"error": one line}.

    A client of the service reads `error` on every status; FastAPI's own {"detail": ...} would read as no reason.
    A 422 names the field and the problem, never the value sent (data, perhaps a secret)."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException

    async def http_refusal(request: Any, exc: HTTPException) -> Any:
        response = error(exc.status_code, http_message(exc.status_code, request.method, exc.headers or {}))
        response.headers.update({k: v for k, v in (exc.headers or {}).items() if k.lower() == "allow"})
        return response

    async def invalid(request: Any, exc: RequestValidationError) -> Any:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ())) or "the request"
        return error(422, f"{where}: {str(first.get('msg', 'invalid')).splitlines()[0][:160]}: fix that field")

    async def internal(request: Any, exc: Exception) -> Any:
        log.error("internal error: %s: %s", type(exc).__name__, exc, exc_info=exc)
        return error(500, f"internal error ({type(exc).__name__}): see the server's log")

    app.add_exception_handler(HTTPException, http_refusal)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(Exception, internal)


def http_message(status: int, method: str, headers: Any) -> str:
    """One line for a refusal the framework makes: what was wrong and what the service answers instead."""
    if status == 404:
        return f"no such route: this service answers {ROUTES}"
    if status == 405:
        allowed = headers.get("allow") or headers.get("Allow") or "another method"
        return f"method {method[:16]!r} is not allowed on this route: use {allowed} ({ROUTES})"
    return f"refused with HTTP {status}: this service answers {ROUTES}"


_HEADER_TIMEOUT_REPLY = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
                         b"content-length: %d\r\n\r\n%s")


def http_protocol(header_timeout_s: float) -> type:
    """uvicorn's HTTP protocol (httptools when installed, else h11) with a deadline on every request's head.

    uvicorn times out an idle keep-alive connection, but not one that sends part of a request line or
    headers and then nothing, or drips them a byte at a time (each byte restarts its idle timer): each
    such connection is held open for ever. Here the head of each request must be whole within
    `header_timeout_s` of the connection opening (or of the previous answer); otherwise the connection
    closes, with a one-line 408 when part of a request came (an idle one closes silently, as uvicorn's
    keep-alive timer does). The body has its own limit (`ServeConfig.body_timeout_s`).
    """
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    except ImportError:  # httptools is optional in uvicorn
        from uvicorn.protocols.http.h11_impl import H11Protocol as base

    message = json.dumps({"error": f"the request's headers were not whole within {header_timeout_s:g}s: "
                                   "send the request at once"}).encode()

    class HeadDeadline(base):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm_head_deadline()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm_head_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_head_deadline()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            self._head_bytes = True
            super().data_received(data)

        def _arm_head_deadline(self) -> None:
            self._disarm_head_deadline()
            self._head_bytes = False
            waiting_for = self.cycle  # a new request's head replaces it
            self._head_deadline = self.loop.call_later(header_timeout_s, self._head_overdue, waiting_for)

        def _disarm_head_deadline(self) -> None:
            if (deadline := getattr(self, "_head_deadline", None)) is not None:
                deadline.cancel()
                self._head_deadline = None

        def _head_overdue(self, waiting_for: Any) -> None:
            self._head_deadline = None
            if self.cycle is not waiting_for or self.transport.is_closing():
                return  # a request's head arrived in time
            if self._head_bytes:  # part of a request came: say why; a connection that sent nothing just closes
                log.info("closing a connection whose request headers were not whole within %gs", header_timeout_s)
                self.transport.write(_HEADER_TIMEOUT_REPLY % (len(message), message))
            self.transport.close()

    return HeadDeadline


def uvicorn_config(service: RewardService, *, host: str, port: int, log_level: str = "warning",
                   timeout_keep_alive: int = 30) -> Any:
    """The uvicorn configuration `serve` runs: the app over `service`, with its head deadline."""
    uvicorn = require("uvicorn", extra="serve")
    return uvicorn.Config(build_app(service), host=host, port=port, log_level=log_level,
                          timeout_keep_alive=timeout_keep_alive, timeout_graceful_shutdown=10,
                          http=http_protocol(service.config.header_timeout_s))


def serve(service: RewardService, *, host: str, port: int) -> None:
    """Run the service with uvicorn; SIGTERM or Ctrl-C drains it (`RewardService.drain`), a second one stops at once."""
    server = draining_server(uvicorn_config(service, host=host, port=port), service)
    server.run()


def draining_server(config: Any, service: RewardService) -> Any:
    """A uvicorn server whose first SIGTERM/SIGINT drains the service before it stops, then exits normally (0)."""
    import uvicorn

    class DrainingServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            if service.batcher.draining:  # a second signal: stop now
                self.should_exit = True
                self.force_exit = True
                return
            threading.Thread(target=self._drain, name="reflectrm-drain", daemon=True).start()

        def _drain(self) -> None:
            finished = service.drain()
            log.warning("drained: %s", "every admitted request answered" if finished else
                        "requests past the drain time-out were refused with 503 + Retry-After")
            self.should_exit = True  # uvicorn exits normally: the signal is not re-raised, so the status is 0

    return DrainingServer(config)


def count_judgments(counters: Counter[str], judgments: Sequence[Judgment]) -> None:
    """Count judgments and their stage 2: reflections, unparseable ones, judgments where every one failed."""
    counters["judgments"] += len(judgments)
    for j in judgments:
        counters["reflections"] += len(j.reflections)
        counters["reflection_parse_failures"] += j.reflection_failures
        counters["stage2_failed_judgments"] += j.reflections_all_failed


def reflection_parse_rate_lines(counters: Counter[str]) -> list[str]:
    """The reflection parse rate as a gauge (absent until a reflection was generated)."""
    total = counters["reflections"]
    return [f"reflectrm_reflection_parse_rate {1 - counters['reflection_parse_failures'] / total:.4f}"] if total else []
