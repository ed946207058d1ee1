"""Engine and session factory: SQLite in WAL mode with foreign keys and a busy timeout, or PostgreSQL.

SQLite transactions that write begin with `BEGIN IMMEDIATE`: the write lock is taken up front, so
two writers queue on the busy timeout instead of deadlocking when both try to upgrade a read lock
(an error SQLite reports at once, whatever the timeout). `run_transaction` retries the few
lock errors that can still happen (a wait longer than the timeout) so they never reach a caller.

It also reruns a transaction once after a unique-key conflict: two writers that both checked "no
such row yet" (two corrections of one judgment, two snapshots of one name on PostgreSQL) race to
insert it, and the loser's rerun sees the winner's row and takes the ordinary path (an existing id,
or a one-line `InputError`) instead of surfacing a raw `IntegrityError`.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import URL, Engine, create_engine, event, make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from reflectrm_db.settings import StoreSettings, sqlite_options, without_query
from reflectrm.errors import ReflectRMError

log = logging.getLogger(__name__)

T = TypeVar("T")

_BEGIN_OPTION = "sqlite_begin"
_LOCKED_MESSAGES = ("database is locked", "database table is locked", "database is busy")
_RETRYABLE_SQLSTATES = ("40001", "40P01")  # PostgreSQL serialization failure, deadlock


class DatabaseBusyError(ReflectRMError):
    """The database stayed locked by other writers for longer than `StoreSettings.lock_retry_s`."""


def make_engine(url: str, settings: StoreSettings | None = None, *, read_only: bool = False,
                wal: bool = True) -> Engine:
    """An engine for `url` (already normalised) with the store's connection settings.

    Every connection has a bound: SQLite waits `sqlite_busy_timeout_s` (or the URL's `?timeout=`) on a
    lock, a server gets `connect_timeout_s` to answer. `read_only` (export, backup's source, reading
    commands; a SQLite URL's `?mode=ro`) opens a SQLite file with `mode=ro`, without the WAL switch that
    rewrites its header, and makes a PostgreSQL session read-only: a reading command cannot change the
    database it reads. `wal=False` leaves a SQLite file in its journal mode (`db upgrade` migrates in it,
    so that a failed migration rolls back to the very same bytes).
    """
    settings = settings or StoreSettings()
    if not url.startswith("sqlite"):
        connect_args: dict[str, Any] = {"connect_timeout": settings.connect_timeout_s}
        if read_only:
            connect_args["options"] = "-c default_transaction_read_only=on"
        return create_engine(url, pool_pre_ping=True, connect_args=connect_args)
    options = sqlite_options(url)
    url = without_query(url)  # the options are applied here; the driver would ignore or misread them
    in_memory = url in ("sqlite://", "sqlite:///:memory:")
    read_only = (read_only or options.mode == "ro") and not in_memory
    engine = create_engine(
        _read_only_sqlite(url) if read_only else url,
        connect_args={"timeout": options.timeout_s or settings.sqlite_busy_timeout_s, "check_same_thread": False},
        poolclass=StaticPool if in_memory else None,
    )
    _configure_sqlite(engine, synchronous=settings.sqlite_synchronous, wal=wal and not (in_memory or read_only))
    return engine


def _read_only_sqlite(url: str) -> str | URL:
    """The SQLite URL that opens the same file read-only (`file:PATH?mode=ro` as a URI filename)."""
    parsed = make_url(url)
    if parsed.database is None or parsed.database.startswith("file:"):
        return url  # already a URI filename: the caller chose its mode
    uri = Path(parsed.database).resolve().as_uri()
    return parsed.set(database=f"{uri}?mode=ro", query={"uri": "true"})


def _configure_sqlite(engine: Engine, *, synchronous: str, wal: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # the driver stops issuing BEGIN; `_on_begin` does it
        cursor = dbapi_connection.cursor()
        if wal:
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        mode = connection.get_execution_options().get(_BEGIN_OPTION, "")
        connection.exec_driver_sql(f"BEGIN {mode}".strip())


def session_factories(engine: Engine) -> tuple[sessionmaker[Session], sessionmaker[Session]]:
    """(writes, reads): sessions whose SQLite transactions begin IMMEDIATE, and plain ones."""
    writer = engine.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"}) if engine.dialect.name == "sqlite" else engine
    return (
        sessionmaker(writer, expire_on_commit=False),
        sessionmaker(engine, expire_on_commit=False),
    )


def is_retryable(exc: BaseException) -> bool:
    """Whether `exc` is a lock or serialization conflict worth retrying the whole transaction for."""
    if isinstance(exc, OperationalError) and any(m in str(exc.orig).lower() for m in _LOCKED_MESSAGES):
        return True
    return isinstance(exc, DBAPIError) and getattr(exc.orig, "sqlstate", None) in _RETRYABLE_SQLSTATES


def _is_unique_violation(exc: IntegrityError) -> bool:
    if getattr(exc.orig, "sqlstate", None) == "23505":  # PostgreSQL unique_violation
        return True
    return "unique constraint failed" in str(exc.orig).lower()  # SQLite


def run_transaction(sessions: sessionmaker[Session], work: Callable[[Session], T], *, retry_s: float) -> T:
    """Run `work` in one transaction (`with sessions.begin()`), retrying it on lock conflicts.

    Raises:
        DatabaseBusyError: still locked after `retry_s` seconds of retries.
    """
    deadline = time.monotonic() + retry_s
    delay = 0.005
    unique_reruns = 1  # a second conflict is not a race the rerun could settle: let it surface
    while True:
        try:
            with sessions.begin() as session:
                return work(session)
        except IntegrityError as exc:
            if not unique_reruns or not _is_unique_violation(exc):
                raise
            unique_reruns -= 1
            log.info("unique-key conflict with a concurrent writer (%s); rerunning the transaction", exc.orig)
        except DBAPIError as exc:
            if not is_retryable(exc):
                raise
            if time.monotonic() + delay > deadline:
                raise DatabaseBusyError(
                    f"the database stayed locked for {retry_s:.0f} s ({exc.orig}): another process holds it; "
                    "retry later or raise REFLECTRM_LOCK_RETRY_S"
                ) from exc
            log.info("database busy (%s); retrying in %.3f s", exc.orig, delay)
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.5)
