"""The question a judgment answers, as one key: what lets reward-service replicas on one store share their work.

A judgment is decided by the pair's content (conversation and both responses, in order), the prompt
templates they are written into, the model (its revision and the backend that runs it), the sampling
settings and the seed (`JudgeConfig`: every sample's seed derives from `seed` and the pair), and, in
the store, whether it is the swapped-order twin of a both-orders audit. `request_key` hashes exactly
those, before anything is generated: a judgment stored under a key is the answer to every later
request with that key, on any replica. A pair's id, source and label are left out (they name a pair,
they do not change what the judge writes), so the same comparison sent in another request, at another
place in a group, is the same question.

Every ReflectRM judgment is seeded (`JudgeConfig.seed` has no "none"), so every one can be keyed;
`request_key` refuses a config without an integer seed rather than key sampling it cannot repeat.

`JudgmentCache` is what the service needs of a store: look keys up, and record judgments under
their keys once (a second writer of a key gets the first one's row). The store implements it
(`reflectrm_db.services.JudgmentStore`); the library never imports the store.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from reflectrm.backends.base import Backend
from reflectrm.core.config import JudgeConfig
from reflectrm.core.prompts import Condition, Task, build_prompt
from reflectrm.core.types import ChatMessage, Judgment, PreferencePair
from reflectrm.errors import ConfigError

KEY_VERSION = 1
"""Bumped when the recipe changes: keys of another version never match, so nothing stale is answered."""


class JudgmentCache(Protocol):
    """A store's side of the cache (`reflectrm_db.services.JudgmentStore` implements it)."""

    def cached(self, keys: Sequence[str]) -> Mapping[str, tuple[int, Judgment]]:
        """The stored (row id, judgment) of each key found; keys not stored are left out."""
        ...

    def record_keyed(self, judgments: Sequence[Judgment], *, swapped: bool, keys: Sequence[str]) -> list[int]:
        """Store judgments under their keys in one transaction; a key already stored keeps its row (its id
        is returned in its place): two writers of one key store one judgment."""
        ...


def template_fingerprint(control_suffix: str) -> str:
    """A sha256 of both prompt templates (Eq. 2 and Eq. 3) rendered around placeholders: any change of wording
    changes it, so a judgment made under other instructions is never answered."""
    query = (ChatMessage("user", "\x00query\x00"),)
    r1, r2, c1, c2 = (f"\x00{name}\x00" for name in ("response_1", "response_2", "critique_1", "critique_2"))
    rendered = [build_prompt(Condition(query), (r1, r2), task=Task.RESPONSE, control_suffix=control_suffix),
                build_prompt(Condition(query, (r1, r2)), (c1, c2), task=Task.ANALYSIS, control_suffix=control_suffix)]
    return _sha256([[[m.role, m.content] for m in prompt] for prompt in rendered])


def request_key(pair: PreferencePair, *, backend: Backend, config: JudgeConfig, swapped: bool = False) -> str:
    """The cache key of judging `pair` (as seen: the swapped pair for a swapped twin) with `backend` and `config`.

    `swapped` is the stored role (the second judgment of a both-orders audit), not the order of the
    responses, which `pair` already holds."""
    if not isinstance(config.seed, int) or isinstance(config.seed, bool):
        raise ConfigError(f"seed {config.seed!r} is not an integer: a judgment without a seed cannot be answered "
                          "from the store; give --seed")
    return _sha256({
        "version": KEY_VERSION,
        "pair": pair.fingerprint(),
        "templates": template_fingerprint(config.control_suffix),
        "model": [backend.name, backend.model_id, backend.model_revision],
        "config": config.to_dict(),  # strategy, n, temperatures, top-k/p, token limits, seed
        "swapped": swapped,
    })


def _sha256(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
