"""The reward service's cache key (`reflectrm.serving.cache.request_key`): what makes two requests one question.

Each case changes one thing about a judged pair or the judge and says whether the stored judgment still
answers it. A key that ignored a sampling setting would answer with another judge's judgment; one that
held a pair's id would regenerate the same comparison sent at another place in a group.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from reflectrm.backends import ScriptedBackend
from reflectrm.core.config import JudgeConfig
from reflectrm.core.types import PreferencePair
from reflectrm.errors import ConfigError
from reflectrm.serving.cache import request_key, template_fingerprint
from reflectrm.serving.client import reward_urls

PAIR = PreferencePair.from_dict({"query": "What is 2 + 2?", "response_1": "4", "response_2": "5", "id": "g0:0:1",
                                 "source": "reward"})
CONFIG = JudgeConfig(n=2, max_new_tokens=16)


def _key(pair=PAIR, config=CONFIG, *, revision="r1", name="scripted", swapped=False) -> str:
    backend = ScriptedBackend(lambda *a: "unused")
    backend.name, backend.model_revision = name, revision
    return request_key(pair, backend=backend, config=config, swapped=swapped)


@pytest.mark.parametrize(("changed", "same"), [
    # what names a pair, not what the judge reads: the same question
    pytest.param(lambda: _key(replace(PAIR, id="g3:1:0")), True, id="another-id-same-question"),
    pytest.param(lambda: _key(replace(PAIR, source="import", subset="math")), True, id="another-source"),
    pytest.param(lambda: _key(replace(PAIR, label=1)), True, id="a-label-does-not-change-generation"),
    # what the judge reads or how it samples: another question
    pytest.param(lambda: _key(PAIR.swapped()), False, id="responses-in-the-other-order"),
    pytest.param(lambda: _key(replace(PAIR, response_2="5 ")), False, id="one-space-more"),
    pytest.param(lambda: _key(config=CONFIG.with_(seed=1)), False, id="another-seed"),
    pytest.param(lambda: _key(config=CONFIG.with_(temperature=0.7)), False, id="another-temperature"),
    pytest.param(lambda: _key(config=CONFIG.with_(n=3)), False, id="another-n"),
    pytest.param(lambda: _key(config=CONFIG.with_(max_new_tokens=17)), False, id="another-token-limit"),
    pytest.param(lambda: _key(config=CONFIG.with_(strategy="majority")), False, id="another-strategy"),
    pytest.param(lambda: _key(config=CONFIG.with_(control_suffix="")), False, id="another-prompt-suffix"),
    pytest.param(lambda: _key(revision="r2"), False, id="another-model-revision"),
    pytest.param(lambda: _key(name="vllm"), False, id="another-backend"),
    pytest.param(lambda: _key(swapped=True), False, id="the-swapped-twin-role"),
])
def test_the_key_changes_exactly_with_what_decides_the_judgment(changed, same):
    assert (changed() == _key()) is same


def test_the_key_is_stable_and_the_templates_are_in_it():
    assert _key() == _key() and len(_key()) == 64
    assert template_fingerprint("/no_think") != template_fingerprint("")  # the suffix is part of the prompt


@pytest.mark.parametrize(("urls", "want"), [
    pytest.param("http://a:1", ("http://a:1",), id="one"),
    pytest.param("http://a:1/, http://b:2", ("http://a:1", "http://b:2"), id="comma-separated-trailing-slash"),
    pytest.param(["http://a:1", "https://b"], ("http://a:1", "https://b"), id="a-list"),
    # each refused in one line naming the fix
    pytest.param("http://a:1,,http://b:2", "empty", id="an-empty-entry"),
    pytest.param("a:1", "no http://", id="no-scheme"),
    pytest.param("http://a:1,http://a:1/", "twice", id="the-same-replica-twice"),
    pytest.param([None], "non-text", id="not-text"),
    pytest.param("", "no reward service URL", id="empty-means-unset"),
])
def test_the_clients_urls(urls, want, monkeypatch):
    monkeypatch.delenv("REFLECTRM_REWARD_URL", raising=False)
    if isinstance(want, tuple):
        assert reward_urls(urls) == want
        return
    with pytest.raises(ConfigError, match=want) as err:
        reward_urls(urls or None)
    assert "\n" not in str(err.value)
