"""A SQLite path, looked at read-only before anything connects to it read-write.

A read-write connection writes before it reads: the store's engine switches a file to WAL when it
connects (its header rewritten, -wal and -shm files made), and SQLite deletes a -wal file it finds
beside an empty database. So every command first opens the path with `mode=ro`, decides what it is,
and refuses what is not a store it may use as it stands, leaving the file and its side files byte for
byte as they were:

    new           no file (or an empty one): a command that creates gets a new store there
    store         a ReflectRM store at this version's revision; at an older one only `reflectrm db
                  upgrade` (and `db backup`) take it; a newer one needs a newer reflectrm
    foreign       another application's database: other tables, or the store's names with other columns
    not SQLite    random bytes, a gzip or text file, a folder
    orphan log    a -wal file whose database is missing or empty (a move or copy left it behind)
    damaged       SQLite finds the file malformed: restore a backup
    not writable  a command that writes, on a file or folder this user cannot write
    busy          another process holds a lock for longer than the busy timeout
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from reflectrm_db import schema
from reflectrm.errors import ConfigError, first_line

# SQLite's primary result codes (`sqlite3.Error.sqlite_errorname` without an extended suffix) -> what to do.
_PROBLEMS = {
    "SQLITE_NOTADB": "is not a SQLite database ({error}): point --db at a ReflectRM store or a new file",
    "SQLITE_CORRUPT": "is damaged ({error}): restore it from a backup; reflectrm will not write to it",
    "SQLITE_BUSY": "is locked by another process ({error}): wait for that process to finish, then retry",
    "SQLITE_LOCKED": "is locked by another process ({error}): wait for that process to finish, then retry",
    "SQLITE_CANTOPEN": ("cannot be opened by this user ({error}): check that the file is readable and its folder "
                        "writable (SQLite keeps its -wal and -shm files there)"),
    "SQLITE_PERM": "cannot be opened by this user ({error}): check the permissions of the file and its folder",
    "SQLITE_READONLY": ("cannot be written ({error}): check the permissions of the file and its folder, or pass "
                        "a writable --db"),
    "SQLITE_FULL": "cannot be written: the disk is full ({error}): free some space and retry",
    "SQLITE_IOERR": "cannot be read or written ({error}): check the disk and the file system it is on",
}


def problem(where: str, exc: sqlite3.Error) -> str:
    """One line for a SQLite error on the database `where`: what happened and what to do (not permissions
    advice for a damaged file, nor "is the server running" for a read-only folder)."""
    name = str(getattr(exc, "sqlite_errorname", "") or "")
    primary = next((code for code in _PROBLEMS if name == code or name.startswith(code + "_")), None)
    error = first_line(exc)
    if primary is None:
        return f"cannot open the store at {where} ({error}): check --db"
    return f"{where} " + _PROBLEMS[primary].format(error=error)


def check_sqlite_file(path: Path, *, create: bool, writes: bool, older_ok: bool = False,
                      timeout_s: float = 5.0) -> None:
    """Refuse, before anything writes to it, a SQLite path that is not a store this command may use as it is.

    Args:
        create: a missing or empty database may become a new store (else it is refused).
        writes: the command writes to the store: the file and its folder must be writable by this user.
        older_ok: a store at an older revision passes (`db upgrade` migrates it, `db backup` copies it).
        timeout_s: how long the read-only look waits on another process's lock.

    Raises:
        ConfigError: one line naming what the path holds and what to do; nothing was written.
    """
    where = repr(str(path))
    _refuse_orphan_log(path, where)
    if not path.exists():
        _check_new(path, where, create=create, writes=writes)
        return
    if not path.is_file():
        raise ConfigError(f"the database {where} is a folder, not a SQLite file: pass a file path to --db")
    tables, columns, revision = _look(path, where, timeout_s=timeout_s)
    error = schema.identity_error(where, tables=tables, revision=revision, create=create, columns=columns)
    if error is None and not (older_ok and revision in schema.known_revisions()):
        error = schema.revision_error(where, revision)
    if error:
        raise ConfigError(error)
    if writes:
        _check_writable(path, where)


def _refuse_orphan_log(path: Path, where: str) -> None:
    """A -wal file beside a missing or empty database holds commits SQLite would discard on the next open."""
    log = Path(f"{path}-wal")
    if log.is_file() and log.stat().st_size > 0 and (not path.exists() or (path.is_file() and not path.stat().st_size)):
        state = "is empty" if path.exists() else "does not exist"
        raise ConfigError(f"the database {where} {state} but its write-ahead log {str(log)!r} holds data: restore the "
                          "database file beside it (or move the -wal file away if it is not wanted)")


def _check_new(path: Path, where: str, *, create: bool, writes: bool) -> None:
    if not create:
        raise ConfigError(f"the database {where} does not exist: check --db (a reading command never creates one)")
    if not path.parent.is_dir():
        raise ConfigError(f"cannot open the store at {where}: its folder does not exist: create it or fix --db")
    if writes and not os.access(path.parent, os.W_OK | os.X_OK):
        raise ConfigError(f"the store at {where} cannot be created: its folder {str(path.parent)!r} is not writable "
                          "by this user: fix its permissions or pass another --db")


def _check_writable(path: Path, where: str) -> None:
    """The file, and its folder (SQLite writes -wal, -shm and journal files there), writable by this user."""
    if not os.access(path, os.W_OK):
        raise ConfigError(f"the store at {where} cannot be written: the file is read-only for this user: fix its "
                          "permissions or pass a writable --db")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise ConfigError(f"the store at {where} cannot be written: its folder {str(path.parent)!r} is read-only for "
                          "this user (SQLite writes its -wal and -shm files there): fix its permissions or pass a "
                          "writable --db")


def _look(path: Path, where: str, *, timeout_s: float) -> tuple[set[str], dict[str, set[str]], str | None]:
    """(table names, the columns of the store's tables, Alembic revision), through a read-only connection."""
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=timeout_s)
        try:
            tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            columns = {t: {row[1] for row in con.execute("SELECT * FROM pragma_table_info(?)", (t,))}
                       for t in tables & schema.IDENTITY_TABLES}
            revision = _alembic_revision(con) if "alembic_version" in tables else None
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise ConfigError(problem(where, exc)) from exc
    return tables, columns, revision


def _alembic_revision(con: sqlite3.Connection) -> str | None:
    """The one revision in `alembic_version` (None when it holds none; a list of heads is not ours)."""
    rows = con.execute("SELECT * FROM alembic_version").fetchall()
    if len(rows) != 1 or len(rows[0]) != 1:
        return None if not rows else f"{len(rows)} rows"
    return str(rows[0][0])
