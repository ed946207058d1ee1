"""Schema management with Alembic, configured in code so it works from an installed package.

upgrade(engine)            # create or migrate to the newest schema
model_diffs(engine)        # [] when the models and the migrations agree
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect

from reflectrm_db.models import Base
from reflectrm.errors import ConfigError

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_PG_SCHEMA_LOCK = 0x5245464C  # pg_advisory_xact_lock key held while the schema changes ("REFL")


IDENTITY_TABLES = frozenset({
    "pairs", "judgments", "samples", "reflections", "corrections", "correction_marks", "preference_examples",
    "reflection_pairs", "dataset_snapshots", "snapshot_members", "training_runs", "eval_runs",
})
"""Tables a ReflectRM store holds at every revision (migration 0001 creates them; a test keeps this true).

A database is the store's own when its Alembic revision is one of ours AND it holds these tables:
another application's Alembic database may well be at a revision named "0005" too.
"""


def identity_error(where: str, *, tables: set[str], revision: str | None, create: bool) -> str | None:
    """Why the database at `where` (its table names and Alembic revision) is not a store to use; None if it is.

    Decided from what a read-only look gives, so a command refuses a foreign database before any pragma
    or write touches it.
    """
    tables = tables - {"alembic_version"}
    if not tables:
        return None if create or revision is not None else f"{where} holds no ReflectRM store (it is empty): check --db"
    missing = sorted(IDENTITY_TABLES - tables)
    if revision is None or missing:
        what = f"Alembic revision {revision!r} but not the store's tables (no {missing[0]!r})" if revision else \
            "tables but no store schema"
        return f"{where} holds {what}: it is another application's database; point --db at a new or ReflectRM one"
    if revision not in known_revisions():
        return (f"{where} is at schema revision {revision}, unknown to this reflectrm: upgrade reflectrm (or, if it "
                "is not a ReflectRM store, point --db at one)")
    return None


@functools.cache
def known_revisions() -> frozenset[str]:
    """Every revision id of the store's migration chain."""
    return frozenset(s.revision for s in ScriptDirectory.from_config(alembic_config()).walk_revisions())


def shown_url(url: Any) -> str:
    """An engine's URL as messages show it: the password hidden, a read-only SQLite URI as its file."""
    database = url.database or ""
    if url.get_backend_name() == "sqlite" and database.startswith("file:"):
        from urllib.parse import unquote, urlsplit

        return f"sqlite:///{unquote(urlsplit(database.split('?', 1)[0]).path)}"
    return url.render_as_string(hide_password=True)


def alembic_config() -> Config:
    """An Alembic `Config` for the store's migrations (the caller sets `attributes["connection"]`)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "os")
    return config


def head_revision() -> str:
    """The newest migration's revision id."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "db/migrations/versions holds no migration"
    return head


def current_revision(engine: Engine) -> str | None:
    """The database's revision; None for a database Alembic never touched."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate the database to `revision` (creating every table on an empty database).

    Raises:
        ConfigError: the database is not a ReflectRM store (`identity_error`), checked under the schema lock.
    """
    _run(engine, command.upgrade, revision)


def downgrade(engine: Engine, revision: str) -> None:
    """Migrate the database back to `revision` ("base" drops every table)."""
    _run(engine, command.downgrade, revision)


def _run(engine: Engine, fn: Any, revision: str) -> None:
    config = alembic_config()
    with _locked(engine) as connection:
        check_identity(connection, create=True)
        config.attributes["connection"] = connection
        fn(config, revision)


@contextmanager
def _locked(engine: Engine) -> Iterator[Connection]:
    """A transaction that holds the database's schema lock: concurrent upgrades run one after another."""
    if engine.dialect.name == "sqlite":
        with _sqlite_foreign_keys_off(engine.execution_options(sqlite_begin="IMMEDIATE")) as connection:
            yield connection
        return
    with engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_SCHEMA_LOCK})")
        yield connection


@contextmanager
def _sqlite_foreign_keys_off(engine: Engine) -> Iterator[Connection]:
    """A SQLite transaction with foreign keys off (checked before commit), as batch migrations need.

    A batch migration copies a table and drops the old one; with foreign keys on, dropping a table that
    other rows reference fails. The pragma only changes outside a transaction, so it is set on the
    driver's connection before BEGIN, and `foreign_key_check` proves the result consistent before commit.
    """
    with engine.connect() as connection:
        driver = connection.connection.driver_connection
        driver.execute("PRAGMA foreign_keys=OFF")
        try:
            with connection.begin():
                yield connection
                broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                if broken:
                    raise ConfigError(f"the migration left {len(broken)} broken reference(s) (first: {broken[0]}): "
                                      "nothing was changed; report this with the database's revision")
        finally:
            driver.execute("PRAGMA foreign_keys=ON")


def check_identity(connection: Connection, *, create: bool) -> None:
    """Refuse a database that is not a ReflectRM store (see `identity_error`); reads only."""
    url = shown_url(connection.engine.url)
    revision = MigrationContext.configure(connection).get_current_revision()
    error = identity_error(url, tables=set(inspect(connection).get_table_names()), revision=revision, create=create)
    if error:
        raise ConfigError(error)


def check_current(engine: Engine, *, shown: str) -> None:
    """Refuse, without writing, a database that is not a store at this version's revision (read-only use)."""
    with engine.connect() as connection:
        check_identity(connection, create=False)
        current = MigrationContext.configure(connection).get_current_revision()
    if current != head_revision():
        raise ConfigError(
            f"{shown} is at schema revision {current}, this reflectrm needs {head_revision()}: back it up with "
            f"`reflectrm db backup PATH --db URL`, then run `reflectrm db upgrade --db URL`"
        )


def ensure_schema(engine: Engine) -> None:
    """Create the schema on an empty database; refuse a database at another revision.

    Raises:
        ConfigError: the database predates this version (upgrade it) or is newer (upgrade reflectrm),
            or it holds tables that are not the store's.
    """
    head = head_revision()
    if current_revision(engine) == head:
        return
    with _locked(engine) as connection:  # re-checked under the lock: another process may have just created it
        check_identity(connection, create=True)
        current = MigrationContext.configure(connection).get_current_revision()
        if current is None and not inspect(connection).get_table_names():
            config = alembic_config()
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
            return
    if current == head:
        return
    url = shown_url(engine.url)
    if current is None:
        raise ConfigError(f"{url} holds tables but no store schema: point --db at a new or ReflectRM database")
    if current in known_revisions():
        raise ConfigError(
            f"{url} is at schema revision {current}, this reflectrm needs {head}: back it up with "
            f"`reflectrm db backup PATH --db URL`, then run `reflectrm db upgrade --db URL`"
        )
    raise ConfigError(f"{url} is at schema revision {current}, unknown to this reflectrm: upgrade reflectrm")


def model_diffs(engine: Engine) -> list[Any]:
    """Differences between the models and the database's schema (autogenerate); [] when they agree."""
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return list(compare_metadata(context, Base.metadata))
