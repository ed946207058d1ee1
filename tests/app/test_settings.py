"""The app's one settings object in sections: nested and short environment names, keyword overrides, one set of rules."""

from __future__ import annotations

from dataclasses import fields

import pytest

from reflectrm_app.settings import SECTIONS, SHORT_NAMES, Settings, load_settings
from reflectrm.core.config import JudgeConfig
from reflectrm_db.settings import section_fields
from reflectrm.errors import ConfigError


pytestmark = pytest.mark.usefixtures("no_reflectrm_environment")


def test_short_names_are_unique_across_sections():
    total = sum(len(section_fields(kind)) for kind in SECTIONS.values())
    assert len(SHORT_NAMES) == total  # a clash would route one section's field into another


def test_the_judge_section_is_the_library_config():
    assert load_settings().judge == JudgeConfig()  # defaults stated once, in the dataclass


@pytest.mark.parametrize("env, where, want", [
    pytest.param({"REFLECTRM_JUDGE__N": "4"}, ("judge", "n"), 4, id="nested"),
    pytest.param({"REFLECTRM_N": "4"}, ("judge", "n"), 4, id="short"),
    # trap: both set; the nested (specific) name must win whatever the order of the environment
    pytest.param({"REFLECTRM_N": "3", "REFLECTRM_JUDGE__N": "5"}, ("judge", "n"), 5, id="nested-wins"),
    pytest.param({"REFLECTRM_MAX_NEW_TOKENS": "96"}, ("judge", "reflection_max_new_tokens"), 96, id="short-tied"),
    pytest.param({"REFLECTRM_MAX_NEW_TOKENS": "96", "REFLECTRM_JUDGE__REFLECTION_MAX_NEW_TOKENS": "200"},
                 ("judge", "reflection_max_new_tokens"), 200, id="tie-yields-to-explicit"),
    pytest.param({"REFLECTRM_STORE__DATABASE_URL": "postgresql://u@h/db"}, ("store", "database_url"),
                 "postgresql+psycopg://u@h/db", id="store-nested"),
    pytest.param({"REFLECTRM_APP__PORT": "8080"}, ("app", "port"), 8080, id="app-nested"),
    pytest.param({"REFLECTRM_GENERATION__DEVICE": "cuda"}, ("generation", "device"), "cuda", id="generation"),
    # the app once refused n=1 for every strategy; the library's rule allows it where no anchor is needed
    pytest.param({"REFLECTRM_STRATEGY": "greedy", "REFLECTRM_N": "1"}, ("judge", "n"), 1, id="greedy-n1"),
])
def test_environment_names(monkeypatch: pytest.MonkeyPatch, env: dict, where: tuple, want: object):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    section, name = where
    assert getattr(getattr(load_settings(), section), name) == want


def test_keywords_win_over_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("REFLECTRM_APP__PORT", "8080")
    monkeypatch.setenv("REFLECTRM_JUDGE__SEED", "7")
    s = load_settings(port=9000, n=4)
    assert (s.app.port, s.judge.n, s.judge.seed) == (9000, 4, 7)
    assert Settings(judge=JudgeConfig(n=3), seed=2).judge == JudgeConfig(n=3, seed=2)


@pytest.mark.parametrize("env, message", [
    pytest.param({"REFLECTRM_N": "1"}, "n must be >= 2", id="anchor-needs-two"),
    pytest.param({"REFLECTRM_JUDGE__TOP_P": "2"}, "top_p must be in (0, 1]", id="judge-rule"),
    pytest.param({"REFLECTRM_APP__PORT": "99999"}, "REFLECTRM_APP__PORT or REFLECTRM_PORT", id="names-both"),
])
def test_bad_values_say_which_setting(monkeypatch: pytest.MonkeyPatch, env: dict, message: str):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("]", r"\]")):
        load_settings()


def test_the_store_section_is_the_store_s_own_settings():
    # no field restated: the app's store section is the type the store reads alone for `reflectrm db`
    from reflectrm_db.settings import StoreSettings, load_store_settings

    assert SECTIONS["store"] is StoreSettings
    assert load_settings().store == load_store_settings()
