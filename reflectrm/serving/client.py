"""Clients of `reflectrm serve` for RL frameworks that run the policy elsewhere.

* TRL: `RemotePairwiseReward(url)` is a `GRPOTrainer` reward function that asks the service.
* verl: `verl_compute_score` is a batch `custom_reward_function` (`reward_model.reward_manager=batch`);
  verl does not pass the prompt, so the data set's `extra_info` must carry it (`prompt_key`).
* OpenRLHF needs no client: `--remote_rm_url http://HOST:PORT/get_reward`.

The service's URL and token come from arguments or `REFLECTRM_REWARD_URL` / `REFLECTRM_SERVE_TOKEN`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from reflectrm.errors import BackendError, ConfigError, require
from reflectrm.serving.rewards import completion_text, group_by_prompt


def remote_rewards(url: str, prompts: Sequence[Any], groups: Sequence[Sequence[str]],
                   references: Sequence[str | None] | None = None, *, token: str | None = None,
                   timeout_s: float = 3600.0) -> list[list[float]]:
    """POST /v1/rewards: each completion's win rate in its group; one line on failure."""
    httpx = require("httpx", extra="openai")
    token = token or os.environ.get("REFLECTRM_SERVE_TOKEN")
    body: dict[str, Any] = {"prompts": list(prompts), "completions": [list(g) for g in groups]}
    if references is not None:
        body["references"] = list(references)
    try:
        resp = httpx.post(f"{url.rstrip('/')}/v1/rewards", json=body, timeout=timeout_s,
                          headers={"Authorization": f"Bearer {token}"} if token else None)
    except httpx.HTTPError as exc:
        raise BackendError(f"cannot reach the reward service at {url} ({type(exc).__name__}): "
                           "is `reflectrm serve` up?") from exc
    try:
        payload = resp.json()
    except ValueError as exc:
        raise BackendError(f"the reward service at {url} answered HTTP {resp.status_code} without JSON") from exc
    if resp.status_code != 200:
        raise BackendError(f"the reward service at {url} answered HTTP {resp.status_code}: "
                           f"{payload.get('error', payload)}")
    return payload["rewards"]


def _url(url: str | None) -> str:
    url = url or os.environ.get("REFLECTRM_REWARD_URL")
    if not url:
        raise ConfigError("no reward service URL: pass url= or set REFLECTRM_REWARD_URL=http://HOST:PORT")
    return url


class RemotePairwiseReward:
    """A TRL `GRPOTrainer` reward function backed by `reflectrm serve` (same grouping as `PairwiseReward`)."""

    def __init__(self, url: str | None = None, *, token: str | None = None) -> None:
        self.url, self.token = _url(url), token
        self.__name__ = "reflectrm_pairwise"

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], reference: Sequence[Any] | None = None,
                 **_: Any) -> list[float]:
        grouped = group_by_prompt(prompts, [completion_text(c) for c in completions], reference)
        return grouped.flatten(remote_rewards(self.url, grouped.prompts, grouped.groups, grouped.references,
                                              token=self.token))


def verl_compute_score(data_sources: Sequence[Any], solution_strs: Sequence[str], ground_truths: Sequence[Any],
                       extra_infos: Sequence[Any], *, url: str | None = None, prompt_key: str = "question",
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
    return grouped.flatten(remote_rewards(_url(url), grouped.prompts, grouped.groups, grouped.references))
