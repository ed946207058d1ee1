"""The store's own settings: its section read alone from the environment (what `reflectrm db`, `import` and
`export` need), by the same names as the app's sectioned settings."""

from __future__ import annotations

import pytest

from reflectrm_db.settings import StoreSettings, load_store_settings
from reflectrm.errors import ConfigError


pytestmark = pytest.mark.usefixtures("no_reflectrm_environment")


def test_the_defaults_are_the_section_s():
    assert load_store_settings() == StoreSettings()


@pytest.mark.parametrize("env, want", [
    pytest.param({"REFLECTRM_DATABASE_URL": "x.db"}, "sqlite:///x.db", id="short"),
    pytest.param({"REFLECTRM_STORE__DATABASE_URL": "postgresql://u@h/db"}, "postgresql+psycopg://u@h/db", id="nested"),
    # trap: both set; the nested (specific) name must win whatever the order of the environment
    pytest.param({"REFLECTRM_DATABASE_URL": "a.db", "REFLECTRM_STORE__DATABASE_URL": "b.db"}, "sqlite:///b.db",
                 id="nested-wins"),
    pytest.param({"REFLECTRM_STORE": '{"database_url": "j.db"}'}, "sqlite:///j.db", id="section-as-json"),
])
def test_environment_names(monkeypatch: pytest.MonkeyPatch, env: dict, want: str):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert load_store_settings().database_url == want


def test_keywords_win_over_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("REFLECTRM_DATABASE_URL", "env.db")
    monkeypatch.setenv("REFLECTRM_LOCK_RETRY_S", "5")
    s = load_store_settings(database_url="kw.db", sqlite_busy_timeout_s=None)  # None: not given
    assert (s.database_url, s.lock_retry_s, s.sqlite_busy_timeout_s) == ("sqlite:///kw.db", 5.0, 30.0)


@pytest.mark.parametrize("env, message", [
    pytest.param({"REFLECTRM_SQLITE_BUSY_TIMEOUT_S": "0"},
                 "setting store.sqlite_busy_timeout_s (REFLECTRM_STORE__SQLITE_BUSY_TIMEOUT_S or "
                 "REFLECTRM_SQLITE_BUSY_TIMEOUT_S)", id="names-both"),
    pytest.param({"REFLECTRM_DATABASE_URL": "mysql://h/db"}, "is not supported", id="url"),
    pytest.param({"REFLECTRM_STORE": "{bad"}, "REFLECTRM_STORE is not valid JSON", id="section-not-json"),
])
def test_bad_values_say_which_setting(monkeypatch: pytest.MonkeyPatch, env: dict, message: str):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ConfigError) as raised:
        load_store_settings()
    assert message in str(raised.value)


def test_the_store_reads_no_other_section(monkeypatch: pytest.MonkeyPatch):
    # the app's sections are the app's (reflectrm_app.settings): a store command neither needs nor checks them
    monkeypatch.setenv("REFLECTRM_PORT", "99999")
    monkeypatch.setenv("REFLECTRM_JUDGE", "[1")
    monkeypatch.setenv("REFLECTRM_DATABASE_URL", "x.db")
    assert load_store_settings().database_url == "sqlite:///x.db"
