"""Schema management with Alembic, configured in code so it works from an installed package.

upgrade(engine)            # create or migrate to the newest schema
model_diffs(engine)        # [] when the models and the migrations agree
"""

from __future__ import annotations

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
    """Migrate the database to `revision` (creating every table on an empty database)."""
    _run(engine, command.upgrade, revision)


def downgrade(engine: Engine, revision: str) -> None:
    """Migrate the database back to `revision` ("base" drops every table)."""
    _run(engine, command.downgrade, revision)


def _run(engine: Engine, fn: Any, revision: str) -> None:
    config = alembic_config()
    with _locked(engine) as connection:
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
        current = MigrationContext.configure(connection).get_current_revision()
        if current is None and not inspect(connection).get_table_names():
            config = alembic_config()
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
            return
    if current == head:
        return
    url = engine.url.render_as_string(hide_password=True)
    if current is None:
        raise ConfigError(f"{url} holds tables but no store schema: point --db at a new or ReflectRM database")
    known = {s.revision for s in ScriptDirectory.from_config(alembic_config()).walk_revisions()}
    if current in known:
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
