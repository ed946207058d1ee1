"""`reflectrm serve`: ReflectRM over HTTP, as the reward model of an RL run (FastAPI + uvicorn).

    POST /v1/judge     {"query" | "messages", "response_1", "response_2", "label"?} -> a Judgment's to_dict()
    POST /v1/rewards   {"prompts": [...], "completions": [[...] per prompt], "references"?: [...]}
                       -> {"rewards": [[...] per prompt]}   (win rates, `reflectrm.serving.rewards`)
    POST /get_reward   OpenRLHF's remote reward model: {"query": [prompt + response], "prompts": [...],
                       "labels"?: [...]} -> {"rewards": [...], "scores": [...]}; equal prompts form a group,
                       a non-empty label is the reference answer
    GET  /health       {"status": "ok", "model", "backend", "queued"}
    GET  /metrics      Prometheus text: requests, judgments, rejections, generation seconds

One request generates at a time (the backend batches inside it); up to `max_queue` more wait, and
the next gets 429 at once. A backend failure (an upstream server down) is 503; bad input is 400 or
413, each with {"error": one line}. With a token, every POST needs `Authorization: Bearer TOKEN`.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from reflectrm.backends.base import Backend
from reflectrm.core.config import JudgeConfig
from reflectrm.core.types import Judgment, PreferencePair
from reflectrm.errors import BackendError, InputError, ReflectRMError, require
from reflectrm.serving.rewards import Grouped, RewardConfig, group_by_prompt, group_rewards, judgments_needed

log = logging.getLogger(__name__)

Record = Callable[[Sequence[Judgment], bool], list[int]]
"""Stores judgments (`swapped=True`: [original, swapped] pairs); returns their ids (the store's `record`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeConfig:
    """Limits of the reward service."""

    max_body_bytes: int = 8 << 20  # larger requests get 413
    max_judgments: int = 4096  # judgments one request may cost (see rewards.judgments_needed); more: 413
    max_queue: int = 8  # requests waiting behind the one generating; the next gets 429
    token: str | None = None  # bearer token every POST must carry; None = open (bind to 127.0.0.1 then)


class _Busy(Exception):
    pass


class RewardService:
    """The service behind the routes: admission, one generation at a time, recording, counters."""

    def __init__(self, backend: Backend, *, judge_config: JudgeConfig, reward_config: RewardConfig,
                 config: ServeConfig, record: Record | None = None) -> None:
        self.backend, self.judge_config, self.reward_config = backend, judge_config, reward_config
        self.config, self.record = config, record
        self._slots = threading.BoundedSemaphore(config.max_queue + 1)
        self._generating = threading.Lock()
        self.counters: Counter[str] = Counter()
        self.waiting = 0
        self._lock = threading.Lock()

    def run(self, work: Callable[[], Any]) -> Any:
        """Run `work` when the backend is free; `_Busy` when the queue is full."""
        if not self._slots.acquire(blocking=False):
            raise _Busy
        try:
            with self._lock:
                self.waiting += 1
            with self._generating:
                with self._lock:
                    self.waiting -= 1
                started = time.perf_counter()
                try:
                    return work()
                finally:
                    self.counters["generation_seconds"] += time.perf_counter() - started
        finally:
            self._slots.release()

    def judge(self, payload: dict[str, Any]) -> dict[str, Any]:
        from reflectrm.pipeline import judge_many

        _refuse_unknown(payload, JUDGE_FIELDS, "/v1/judge")
        pair = PreferencePair.from_dict(payload)
        [judgment] = self.run(lambda: list(judge_many([pair], self.backend, self.judge_config)))
        count_judgments(self.counters, [judgment])
        out = judgment.to_dict()
        if self.record is not None:
            out["stored_id"] = self.record([judgment], False)[0]
        return out

    def rewards(self, prompts: Sequence[Any], groups: Sequence[Sequence[str]],
                references: Sequence[str | None] | None) -> list[list[float]]:
        cost = sum(judgments_needed(len(g), config=self.reward_config, reference=bool(references and references[k]))
                   for k, g in enumerate(groups))
        if cost > self.config.max_judgments:
            raise _TooLarge(f"this request needs up to {cost} judgments, over the limit of "
                            f"{self.config.max_judgments}: "
                            "send fewer groups per request, or cap opponents (--opponents)")
        return self.run(lambda: group_rewards(prompts, groups, self.backend, judge_config=self.judge_config,
                                              config=self.reward_config, references=references,
                                              on_judgments=self._keep))

    def _keep(self, judgments: list[Judgment]) -> None:
        count_judgments(self.counters, judgments)
        if self.record is not None:
            self.record(judgments, self.reward_config.both_orders)


class _TooLarge(InputError):
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
    # OpenRLHF sends the prompt and the response as one text: the response is what follows the prompt
    responses = [(q[len(p):] if q.startswith(p) else q).strip() for q, p in zip(queries, prompts)]
    return group_by_prompt(prompts, responses, labels)


JUDGE_FIELDS = ("query", "messages", "response_1", "response_2", "label", "tie", "id", "source", "subset")
REWARDS_FIELDS = ("prompts", "completions", "references")


def _refuse_unknown(payload: dict[str, Any], fields: Sequence[str], route: str) -> None:
    """A field the route does not read is refused, not ignored: {"n": 16} would otherwise judge with the server's n."""
    unknown = [k for k in payload if k not in fields]
    if unknown:
        raise InputError(f"unknown field {unknown[0]!r}: {route} takes {', '.join(fields)}; the judge's settings "
                         "(--n, --strategy, --seed, ...) are the server's, set by `reflectrm serve`")


def _rewards_request(payload: dict[str, Any]) -> tuple[list[Any], list[list[str]], list[str | None] | None]:
    _refuse_unknown(payload, REWARDS_FIELDS, "/v1/rewards")
    prompts, completions = payload.get("prompts"), payload.get("completions")
    if not isinstance(prompts, list) or not isinstance(completions, list):
        raise InputError('send {"prompts": [...], "completions": [[...] per prompt]}')
    if any(not isinstance(g, list) or not all(isinstance(c, str) for c in g) for g in completions):
        raise InputError('"completions" must be a list of lists of strings, one list per prompt')
    references = payload.get("references")
    if references is not None and not isinstance(references, list):
        raise InputError('"references" must be a list (one string or null per prompt)')
    return prompts, completions, references


def build_app(service: RewardService) -> Any:
    """The FastAPI application over `service`."""
    fastapi = require("fastapi", extra="ui")
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, PlainTextResponse

    app = fastapi.FastAPI(title="ReflectRM reward service", docs_url=None, redoc_url=None)

    def error(status: int, message: str, **headers: str) -> Any:
        service.counters[f"rejected_{status}"] += 1
        return JSONResponse({"error": message}, status_code=status, headers=headers or None)

    @app.middleware("http")
    async def guard(request: Any, call_next: Any) -> Any:
        service.counters["requests"] += 1
        if request.method == "POST":
            token = service.config.token
            sent = request.headers.get("authorization", "")
            if token and not hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
                return error(401, "missing or wrong bearer token: send Authorization: Bearer <token>")
            size = int(request.headers.get("content-length") or 0)
            if size > service.config.max_body_bytes:
                return error(413, f"request body is {size} bytes, over the limit of {service.config.max_body_bytes}")
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Any, exc: Any) -> Any:
        return error(400, "the body must be a JSON object: check the request's JSON")

    def answer(work: Callable[[], Any]) -> Any:
        try:
            return work()
        except _Busy:
            return error(429, f"busy: {service.config.max_queue} requests already queued; retry later",
                         **{"Retry-After": "1"})
        except _TooLarge as exc:
            return error(413, str(exc))
        except InputError as exc:  # ContextLengthError included
            return error(400, str(exc))
        except BackendError as exc:
            return error(503, f"the judge's backend failed: {exc}")
        except ReflectRMError as exc:
            return error(400, str(exc))

    @app.post("/v1/judge")
    def judge(payload: dict[str, Any] = fastapi.Body(...)) -> Any:
        return answer(lambda: service.judge(payload))

    @app.post("/v1/rewards")
    def rewards(payload: dict[str, Any] = fastapi.Body(...)) -> Any:
        return answer(lambda: {"rewards": service.rewards(*_rewards_request(payload))})

    @app.post("/get_reward")
    def openrlhf(payload: dict[str, Any] = fastapi.Body(...)) -> Any:
        def work() -> dict[str, Any]:
            grouped = openrlhf_groups(payload)
            flat = grouped.flatten(service.rewards(grouped.prompts, grouped.groups, grouped.references))
            return {"rewards": flat, "scores": flat, "extra_logs": {}}

        return answer(work)

    @app.get("/health")
    def health() -> Any:
        return {"status": "ok", "model": service.backend.model_id, "backend": service.backend.name,
                "queued": service.waiting}

    @app.get("/metrics")
    def metrics() -> Any:
        lines = [f"reflectrm_{name}_total {value:g}" for name, value in sorted(service.counters.items())]
        lines += reflection_parse_rate_lines(service.counters)
        lines.append(f"reflectrm_queued {service.waiting}")
        return PlainTextResponse("\n".join(lines) + "\n")

    return app


def serve(service: RewardService, *, host: str, port: int) -> None:
    """Run the service with uvicorn until interrupted."""
    uvicorn = require("uvicorn", extra="ui")
    uvicorn.run(build_app(service), host=host, port=port, log_level="warning", timeout_keep_alive=30)


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
