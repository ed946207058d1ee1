"""`reflectrm app --backend openai --base-url ...`: the app's judge goes through the engine backend."""

from __future__ import annotations

import pytest

from reflectrm_app.settings import load_settings
from reflectrm.core import PreferencePair
from reflectrm.errors import ConfigError
from tests.engines.fake_server import FakeServer


def test_the_app_judges_through_an_openai_server(tmp_path):
    from reflectrm_app.services import Services

    server = FakeServer()
    try:
        settings = load_settings(backend="openai", engine={"base_urls": [server.url]}, warm_up=False, n=2,
                                 database_url=f"sqlite:///{tmp_path / 'app.db'}", max_new_tokens=16)
        services = Services.start(settings)
        try:
            result = services.judging.judge(PreferencePair.from_query("q", "a", "b"))
            assert result.judgment.backend == "openai" and result.judgment.model == "judge"
            assert len(result.judgment.rollouts) == 2 and len(server.bodies) >= 2
            assert services.runtime.store.load(result.judgment_id).judgment.backend == "openai"  # in the History
        finally:
            services.close()
    finally:
        server.close()


def test_a_bad_engine_option_is_refused_at_start():
    with pytest.raises(ConfigError, match="must start with http"):
        load_settings(backend="openai", engine={"base_urls": ["gpu1:8000"]})
