"""Migrations create the schema the models describe; settings and URLs are validated."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from reflectrm_db import schema
from reflectrm_db.engine import make_engine
from reflectrm_db.models import Base
from reflectrm_db.services import JudgmentStore, load_store_settings
from reflectrm_db.settings import normalise_url
from reflectrm.errors import ConfigError


def test_upgrade_head_on_an_empty_database_matches_the_models(empty_db_url: str) -> None:
    engine = make_engine(empty_db_url)
    try:
        assert schema.current_revision(engine) is None
        schema.upgrade(engine)
        assert schema.current_revision(engine) == schema.head_revision()
        assert set(Base.metadata.tables) <= set(inspect(engine).get_table_names())
        assert schema.model_diffs(engine) == []
    finally:
        engine.dispose()


def test_model_diffs_sees_a_schema_that_drifted(sqlite_url: str) -> None:
    # The check above must be able to fail: drop an index behind Alembic's back.
    engine = make_engine(sqlite_url)
    with engine.begin() as c:
        c.execute(text("DROP INDEX ix_judgments_strategy"))
    diffs = schema.model_diffs(engine)
    engine.dispose()
    assert [d[0] for d in diffs] == ["add_index"]


def test_downgrade_to_base_removes_every_table_and_upgrade_restores_them(empty_db_url: str) -> None:
    engine = make_engine(empty_db_url)
    try:
        schema.upgrade(engine)
        schema.downgrade(engine, "base")
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
        schema.upgrade(engine)
        assert schema.model_diffs(engine) == []
    finally:
        engine.dispose()


def test_open_creates_the_schema_on_a_new_database(empty_db_url: str) -> None:
    with JudgmentStore.open(empty_db_url) as store:
        assert store.counts()["judgments"] == 0


def test_open_refuses_an_older_schema_revision_and_names_the_upgrade_command(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    with engine.begin() as c:
        c.execute(text("UPDATE alembic_version SET version_num = 'ffff'"))
    engine.dispose()
    with pytest.raises(ConfigError, match="unknown to this reflectrm"):
        JudgmentStore.open(sqlite_url)


def test_open_refuses_a_database_that_is_not_a_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'other.db'}"
    engine = make_engine(url)
    with engine.begin() as c:
        c.execute(text("CREATE TABLE notes (x TEXT)"))
    engine.dispose()
    with pytest.raises(ConfigError, match="no store schema"):
        JudgmentStore.open(url)


def test_sqlite_connections_use_wal_foreign_keys_and_a_busy_timeout(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    with engine.connect() as c:
        assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert c.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert c.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000
    engine.dispose()


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        pytest.param("sqlite:///x.db", "sqlite:///x.db", id="sqlite-url-kept"),
        pytest.param("data/x.db", "sqlite:///data/x.db", id="plain-path-is-sqlite"),
        # psycopg2 is not installed: a bare postgresql:// must pick psycopg 3
        pytest.param("postgresql://u@h/db", "postgresql+psycopg://u@h/db", id="postgresql-gets-psycopg"),
        pytest.param("postgres://u@h/db", "postgresql+psycopg://u@h/db", id="postgres-alias"),
        pytest.param("postgresql+psycopg://u@h/db", "postgresql+psycopg://u@h/db", id="explicit-driver-kept"),
    ],
)
def test_normalise_url(given: str, expected: str) -> None:
    assert normalise_url(given) == expected


@pytest.mark.parametrize("bad", ["mysql://h/db", "   "])
def test_normalise_url_rejects_unsupported_databases(bad: str) -> None:
    with pytest.raises(ConfigError, match="sqlite:///"):
        normalise_url(bad)


def test_settings_read_the_environment_and_reject_bad_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REFLECTRM_DATABASE_URL", "postgresql://u@h/db")
    assert load_store_settings().database_url == "postgresql+psycopg://u@h/db"
    monkeypatch.setenv("REFLECTRM_SQLITE_SYNCHRONOUS", "sometimes")
    with pytest.raises(ConfigError, match="sqlite_synchronous"):
        load_store_settings()


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("sqlite:////nonexistent-folder/x.db", id="sqlite-folder-missing"),
        pytest.param("postgresql+psycopg://postgres@127.0.0.1:1/none", id="postgresql-server-down"),
    ],
)
def test_open_names_a_database_it_cannot_reach(url: str) -> None:
    with pytest.raises(ConfigError, match="cannot open the store at"):
        JudgmentStore.open(url)


def test_db_upgrade_refuses_a_revision_from_a_newer_version(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from reflectrm_app.cli import main

    engine = make_engine(sqlite_url)
    with engine.begin() as c:
        c.execute(text("UPDATE alembic_version SET version_num = 'ffff'"))
    engine.dispose()
    assert main(["db", "upgrade", "--db", sqlite_url]) == 2
    err = capsys.readouterr().err
    assert "upgrade reflectrm" in err and err.count("\n") == 1
