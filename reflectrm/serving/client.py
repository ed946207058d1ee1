"""Clients of `reflectrm serve` for RL frameworks that run the policy elsewhere.

* TRL: `RemotePairwiseReward(url)` is a `GRPOTrainer` reward function that asks the service.
* verl: `verl_compute_score` is a batch `custom_reward_function` (`reward_model.reward_manager=batch`);
  verl does not pass the prompt, so the data set's `extra_info` must carry it (`prompt_key`).
* OpenRLHF needs no client: `--remote_rm_url http://HOST:PORT/get_reward`.

The service's URL and token come from arguments or `REFLECTRM_REWARD_URL` / `REFLECTRM_SERVE_TOKEN`.
Several replicas (`reflectrm serve` processes on one store) are several URLs: a list, or one string
with commas. `RewardClient` sends each request to the replica with the fewest in flight
(`reflectrm.backends.fleet`, as the OpenAI-compatible backend does); a request that fails there
(connection error, timeout, HTTP 5xx, 429) is sent again to another, up to `max_retries` more tries with
jittered backoff, and the failed replica gets no requests until its cool-down ends and `GET /health`
passes. A retry costs no second judgment: with a store, the replica that answers it finds what the
failed one stored (`reflectrm.serving.cache`). A refusal (HTTP 4xx but 429) is the request's fault and is
raised at once.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Sequence
from typing import Any

from reflectrm.backends.engine import EngineConfig
from reflectrm.backends.fleet import Fleet, Pick
from reflectrm.backends.openai_backend import BACKOFF_BASE_S, BACKOFF_MAX_S, PROBE_TIMEOUT_S
from reflectrm.errors import BackendError, ConfigError, require
from reflectrm.serving.rewards import completion_text, group_by_prompt

log = logging.getLogger(__name__)

URL_ENV = "REFLECTRM_REWARD_URL"
RETRIED_STATUSES = (429, 500, 502, 503, 504)  # busy, draining, a failed backend, a proxy's gateway errors


class RewardClient:
    """POSTs to one or more reward-service replicas, spread by load, a failed request retried on another.

    Args:
        urls: each replica's root (http://host:port), a comma-separated string, or None for `REFLECTRM_REWARD_URL`.
        token: the bearer token (None: `REFLECTRM_SERVE_TOKEN`, or none).
        timeout_s: one request, connect to last byte (a large group takes long to judge).
        max_retries: further tries after a failure, each on another replica when one is up (`EngineConfig`'s).
        cooldown_s: a failed replica gets no requests this long, then a probe; doubles per failure in a row.
    """

    def __init__(self, urls: str | Sequence[str] | None = None, *, token: str | None = None,
                 timeout_s: float = 3600.0, max_retries: int = EngineConfig().max_retries,
                 cooldown_s: float = EngineConfig().cooldown_s) -> None:
        self.urls = reward_urls(urls)
        if not (isinstance(max_retries, int) and max_retries >= 0):
            raise ConfigError(f"max_retries {max_retries!r} is not a count: give 0 or more further tries")
        self.token = token or os.environ.get("REFLECTRM_SERVE_TOKEN")
        self.timeout_s, self.max_retries = timeout_s, max_retries
        self.fleet = Fleet(self.urls, max_in_flight=1 << 20, cooldown_s=cooldown_s,
                           cooldown_max_s=EngineConfig().cooldown_max_s)
        self._httpx = require("httpx", extra="openai")
        self._local = threading.local()  # one connection pool per thread (a trainer may call from several)

    def rewards(self, prompts: Sequence[Any], groups: Sequence[Sequence[str]],
                references: Sequence[str | None] | None = None) -> list[list[float]]:
        """POST /v1/rewards: each completion's win rate in its group; one line on failure."""
        body: dict[str, Any] = {"prompts": list(prompts), "completions": [list(g) for g in groups]}
        if references is not None:
            body["references"] = list(references)
        return self.post("/v1/rewards", body)["rewards"]

    def post(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST `body` to `route` of the least loaded replica, retried elsewhere on a failure; the JSON answer."""
        failures: list[str] = []
        avoid: int | None = None
        while len(failures) <= self.max_retries:
            pick = self.fleet.acquire(avoid=avoid)
            if pick.probe:
                failure = self._probe(pick)
                if failure is None or not pick.last_resort:
                    continue  # passed: ask again; failed: another replica is up
                failures.append(failure)
            else:
                answer, failure = self._send(pick.server, route, body)
                if failure is None:
                    return answer  # type: ignore[return-value]
                failures.append(failure)
                avoid = pick.server  # the retry goes to another replica when one is up
            if len(failures) <= self.max_retries:
                delay = random.uniform(0, min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (len(failures) - 1)))
                log.warning("%s; retrying in %.1fs (%d/%d)", failures[-1], delay, len(failures), self.max_retries)
                time.sleep(delay)
        raise BackendError(f"{failures[-1]} (gave up after {len(failures)} tries): is `reflectrm serve` up at "
                           f"{', '.join(self.urls)}?")

    def _send(self, k: int, route: str, body: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
        """(the answer, None), or (None, why it is worth another try); a refusal raises `BackendError` at once."""
        url, started = self.urls[k], time.monotonic()
        try:
            resp = self._client().post(f"{url}{route}", json=body, timeout=self.timeout_s,
                                       headers={"Authorization": f"Bearer {self.token}"} if self.token else None)
        except self._httpx.HTTPError as exc:
            reason = f"cannot reach the reward service at {url} ({type(exc).__name__})"
            self.fleet.failed(k, reason=reason)
            return None, reason
        if resp.status_code in RETRIED_STATUSES:
            reason = f"the reward service at {url} answered HTTP {resp.status_code}: {_error(resp)}"
            self.fleet.failed(k, reason=reason)
            return None, reason
        self.fleet.answered(k, latency_s=time.monotonic() - started)
        if resp.status_code != 200:
            raise BackendError(f"the reward service at {url} answered HTTP {resp.status_code}: {_error(resp)}")
        try:
            return resp.json(), None
        except ValueError as exc:
            raise BackendError(f"the reward service at {url} answered HTTP 200 without JSON") from exc

    def _probe(self, pick: Pick) -> str | None:
        """GET /health of a replica whose cool-down ended; None when it is back (a draining one answers 503)."""
        url, failure = self.urls[pick.server], "its probe was interrupted"
        try:
            resp = self._client().get(f"{url}/health", timeout=PROBE_TIMEOUT_S)
            failure = None if resp.status_code == 200 else f"the reward service at {url} answered its probe: " \
                                                           f"HTTP {resp.status_code}"
        except self._httpx.HTTPError as exc:
            failure = f"cannot reach the reward service at {url} ({type(exc).__name__})"
        finally:  # reported whatever happens: a replica left probing would hold every waiting request
            self.fleet.probed(pick.server, ok=failure is None, reason=failure or "")
        return failure

    def _client(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = self._httpx.Client()
        return client


def _error(resp: Any) -> str:
    """The service's one-line `error` (never the body of something else answering on that port)."""
    try:
        payload = resp.json()
    except ValueError:
        return "no JSON"
    return str(payload.get("error", "no error line"))[:300] if isinstance(payload, dict) else "no error line"


def reward_urls(urls: str | Sequence[str] | None) -> tuple[str, ...]:
    """The replicas' roots from an argument (a list, or a comma-separated string) or `REFLECTRM_REWARD_URL`."""
    if urls is None:
        urls = os.environ.get(URL_ENV)
        if not urls:
            raise ConfigError(f"no reward service URL: pass url= or set {URL_ENV}=http://HOST:PORT "
                              "(several replicas: comma-separated)")
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    out = tuple(u.strip().rstrip("/") for u in items if isinstance(u, str) and u.strip())
    if len(out) != len(items) or not out:
        raise ConfigError(f"the reward service URLs hold an empty or non-text entry: give http://HOST:PORT, "
                          "comma-separated for several replicas")
    for u in out:
        if not u.startswith(("http://", "https://")):
            raise ConfigError(f"reward service URL {u[:80]!r} has no http:// or https://: give http://HOST:PORT")
    if len(set(out)) != len(out):
        raise ConfigError("a reward service URL is given twice: give each replica once")
    return out


def remote_rewards(url: str | Sequence[str] | None, prompts: Sequence[Any], groups: Sequence[Sequence[str]],
                   references: Sequence[str | None] | None = None, *, token: str | None = None,
                   timeout_s: float = 3600.0) -> list[list[float]]:
    """POST /v1/rewards once (through a `RewardClient` over `url`, one replica or several); one line on failure."""
    return RewardClient(url, token=token, timeout_s=timeout_s).rewards(prompts, groups, references)


class RemotePairwiseReward:
    """A TRL `GRPOTrainer` reward function backed by `reflectrm serve` (same grouping as `PairwiseReward`)."""

    def __init__(self, url: str | Sequence[str] | None = None, *, token: str | None = None) -> None:
        self.client = RewardClient(url, token=token)  # kept: a failed replica stays out across calls
        self.__name__ = "reflectrm_pairwise"

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], reference: Sequence[Any] | None = None,
                 **_: Any) -> list[float]:
        grouped = group_by_prompt(prompts, [completion_text(c) for c in completions], reference)
        return grouped.flatten(self.client.rewards(grouped.prompts, grouped.groups, grouped.references))


def verl_compute_score(data_sources: Sequence[Any], solution_strs: Sequence[str], ground_truths: Sequence[Any],
                       extra_infos: Sequence[Any], *, url: str | Sequence[str] | None = None, prompt_key: str = "question",
                       use_reference: bool = False, **_: Any) -> list[float]:
    """verl's batch reward function: rows of one prompt (extra_info[prompt_key]) form a group.

    `use_reference=True` judges each response against its ground truth instead of its group.
    """
    prompts = []
    for k, info in enumerate(extra_infos):
        if not isinstance(info, dict) or not isinstance(info.get(prompt_key), (str, list)):
            raise ConfigError(f"row {k}: extra_info has no {prompt_key!r}: put each row's prompt in the data set's "
                              f"extra_info (or pass prompt_key=...)")
        prompts.append(info[prompt_key])
    grouped = group_by_prompt(prompts, list(solution_strs), ground_truths if use_reference else None)
    return grouped.flatten(remote_rewards(url, grouped.prompts, grouped.groups, grouped.references))
