"""Schema management with Alembic, configured in code so it works from an installed package.

upgrade(engine)            # create or migrate to the newest schema
model_diffs(engine)        # [] when the models and the migrations agree
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
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


def identity_error(where: str, *, tables: set[str], revision: str | None, create: bool,
                   columns: Mapping[str, set[str]] | None = None) -> str | None:
    """Why the database at `where` (its table names and Alembic revision) is not a store to use; None if it is.

    Decided from what a read-only look gives, so a command refuses a foreign database before any pragma
    or write touches it. `columns` (table -> its column names), when given, must hold every column the
    `IDENTITY_TABLES` have at `revision`: another application's tables may carry the store's names.
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
    expected = columns_at(revision) if columns is not None else {}
    for table in sorted(IDENTITY_TABLES & expected.keys()):
        lacking = sorted(expected[table] - columns.get(table, set()))  # type: ignore[union-attr]
        if lacking:
            return (f"{where} holds a table {table!r} without the store's column {lacking[0]!r}: it is another "
                    "application's database; point --db at a new or ReflectRM one")
    return None


def revision_error(where: str, revision: str | None) -> str | None:
    """Why a store at `revision` cannot be used by this version as it is; None at the head (or empty)."""
    head = head_revision()
    if revision is None or revision == head:
        return None
    if revision in known_revisions():
        return (f"{where} is at schema revision {revision}, this reflectrm needs {head}: back it up with "
                "`reflectrm db backup PATH --db URL`, then run `reflectrm db upgrade --db URL`")
    return f"{where} is at schema revision {revision}, unknown to this reflectrm: upgrade reflectrm"


@functools.cache
def columns_at(revision: str) -> dict[str, frozenset[str]]:
    """Table -> column names of the store at `revision` (the models at the head; older: migrated in memory)."""
    if revision == head_revision():
        return {name: frozenset(t.columns.keys()) for name, t in Base.metadata.tables.items()}
    from sqlalchemy import create_engine

    engine = create_engine("sqlite://")
    try:
        with engine.begin() as connection:
            config = alembic_config()
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
            found = inspect(connection)
            return {name: frozenset(c["name"] for c in found.get_columns(name))
                    for name in found.get_table_names() if name != "alembic_version"}
    finally:
        engine.dispose()


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
    found = inspect(connection)
    tables = set(found.get_table_names())
    columns = {t: {c["name"] for c in found.get_columns(t)} for t in tables & IDENTITY_TABLES}
    error = identity_error(url, tables=tables, revision=revision, create=create, columns=columns)
    if error:
        raise ConfigError(error)


def check_current(engine: Engine, *, shown: str, older_ok: bool = False) -> None:
    """Refuse, without writing, a database that is not a store at this version's revision (read-only use).

    `older_ok`: a store at an older revision of the chain passes too (a backup copies any revision).
    """
    with engine.connect() as connection:
        check_identity(connection, create=False)
        current = MigrationContext.configure(connection).get_current_revision()
    error = None if older_ok and current in known_revisions() else revision_error(shown, current)
    if error:
        raise ConfigError(error)


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
    raise ConfigError(revision_error(url, current) or f"{url} is at schema revision {current}")


def model_diffs(engine: Engine) -> list[Any]:
    """Differences between the models and the database's schema (autogenerate); [] when they agree."""
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return list(compare_metadata(context, Base.metadata))
