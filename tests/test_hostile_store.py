"""Hostile databases and database URLs, third round: a refusal writes nothing, and says what to do.

    decide before writing   what a SQLite path holds (new, this store at the head, an older or newer store,
                            another application's tables, the store's table names with other columns, not
                            SQLite, damaged, an orphan -wal, read-only, locked) is decided through a read-only
                            connection before any read-write one: the engine's WAL switch rewrote a restored
                            backup's header before telling the user to "back it up first"
    say the right thing     a damaged file says "restore a backup", not "check permissions"; only a held
                            lock says "another process"; a SQLite file never says "server running"
    a URL means what it     ?timeout= and ?mode= are applied; any other parameter or a bad value is refused
      says                  by name; an in-memory store, gone when the command exits, is refused
    nothing left behind     an export with nothing to export writes nothing; a failed migration rolls back

The command-line cases run through `main()`, and one case of each class in a real process as well: exit 2, one
line on stderr, no traceback, and every file of the world (the database, its -wal, -shm and -journal files among
them) byte for byte as before.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from reflectrm_db import schema
from reflectrm_db.engine import make_engine
from reflectrm_db.importing import load_pair_file
from reflectrm_db.services import JudgmentStore
from reflectrm.errors import ConfigError
from tests.hostile import assert_refused, copy_world, run_cli, snapshot

PAIR = {"id": "p1", "query": "What is 2 + 2?", "response_1": "4", "response_2": "5", "label": 1}
OLD = "0004"  # a store restored from a backup taken three versions ago


def _journal_delete(path: Path) -> None:
    """Rollback-journal mode, as a copied or restored file often is: a WAL switch would show in its bytes."""
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA journal_mode=DELETE").fetchone() == ("delete",)
    con.close()


def _store_at(path: Path, revision: str) -> None:
    engine = make_engine(f"sqlite:///{path}", wal=False)
    schema.upgrade(engine, revision)
    engine.dispose()
    _journal_delete(path)


def _lookalike(path: Path, revision: str) -> None:
    """Another application's database with every one of the store's table names, but its own columns."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
    con.execute("INSERT INTO alembic_version VALUES (?)", (revision,))
    for table in sorted(schema.IDENTITY_TABLES):
        con.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, payload TEXT)")
    con.commit()
    con.close()


def _damage(path: Path) -> None:
    """Every b-tree page after the first gets an invalid page type: SQLite reports the file malformed."""
    data = bytearray(path.read_bytes())
    for offset in range(4096, len(data), 4096):
        data[offset] = 0x55
    path.write_bytes(bytes(data))


def _damage_table(path: Path, table: str) -> None:
    """Only `table`'s root page damaged: the schema reads, and the failure comes mid-work, from the engine."""
    con = sqlite3.connect(path)
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    size = con.execute("PRAGMA page_size").fetchone()[0]
    con.close()
    data = bytearray(path.read_bytes())
    data[(root - 1) * size] = 0x55
    path.write_bytes(bytes(data))


def _wal_bytes(path: Path) -> bytes:
    """The -wal file of a database with one committed, not yet checkpointed, transaction."""
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute("CREATE TABLE t (x)")
    con.execute("INSERT INTO t VALUES (1)")
    con.commit()
    data = Path(f"{path}-wal").read_bytes()
    con.close()
    return data


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("round3") / "world"
    root.mkdir()
    (root / "pairs.jsonl").write_text(json.dumps(PAIR) + "\n")
    with JudgmentStore.open(f"sqlite:///{root / 'store.db'}") as store:
        store.add_pairs(load_pair_file(root / "pairs.jsonl").pairs)
        store.snapshot("empty")  # no active example yet: a snapshot with nothing in it
    _journal_delete(root / "store.db")
    _store_at(root / "old.db", OLD)
    _lookalike(root / "lookalike.db", schema.head_revision())
    _lookalike(root / "lookalike-old.db", "0003")
    (root / "random.db").write_bytes(random.Random(5).randbytes(3 * 4096))
    (root / "gzip.db").write_bytes(gzip.compress((root / "store.db").read_bytes(), mtime=0))
    (root / "text.db").write_text("id,name\n1,ana\n")
    (root / "folder.db").mkdir()
    (root / "zero.db").write_bytes(b"")
    shutil.copy(root / "store.db", root / "damaged.db")
    _damage(root / "damaged.db")
    shutil.copy(root / "store.db", root / "damaged-rows.db")
    _damage_table(root / "damaged-rows.db", "pairs")
    scratch = root.parent / "scratch.db"
    wal = _wal_bytes(scratch)
    Path(f"{root / 'lone.db'}-wal").write_bytes(wal)  # its database moved away, its log left behind
    (root / "emptied.db").write_bytes(b"")
    Path(f"{root / 'emptied.db'}-wal").write_bytes(wal)
    return root


@pytest.fixture
def world(template: Path, tmp_path: Path) -> Path:
    return copy_world(template, tmp_path)


def _one_line(done: subprocess.CompletedProcess[str], expected: str) -> None:
    assert_refused(done, expected)
    assert "is running" not in done.stderr  # a SQLite file has no server to be running


IMPORT = ["import", "{w}/pairs.jsonl", "--db"]
EXPORT = ["export", "pairs", "--out", "{w}/out.jsonl", "--db"]
UPGRADE = ["db", "upgrade", "--db"]
BACKUP = ["db", "backup", "{w}/copy.db", "--db"]
JUDGE = ["judge", "--query", "2 + 2?", "--response-1", "4", "--response-2", "5", "--db"]

# (command, database, what the one line says): every database here is left byte for byte as it was
REFUSED = [
    # class 5: a restored backup at an old revision, in rollback-journal mode; the WAL switch came first
    pytest.param(IMPORT, "old.db", "back it up with `reflectrm db backup", id="old-store-import"),
    pytest.param(JUDGE, "old.db", "then run `reflectrm db upgrade", id="old-store-judge-db"),
    pytest.param(EXPORT, "old.db", "this reflectrm needs", id="old-store-export"),
    # the store's table names with another application's columns, at our head and at an older revision
    pytest.param(IMPORT, "lookalike.db", "another application's database", id="lookalike-import"),
    pytest.param(UPGRADE, "lookalike.db", "another application's database", id="lookalike-upgrade"),
    pytest.param(UPGRADE, "lookalike-old.db", "another application's database", id="lookalike-old-upgrade"),
    pytest.param(EXPORT, "lookalike-old.db", "another application's database", id="lookalike-old-export"),
    # not SQLite at all
    pytest.param(IMPORT, "random.db", "is not a SQLite database", id="random-bytes-import"),
    pytest.param(UPGRADE, "gzip.db", "is not a SQLite database", id="gzip-upgrade"),
    pytest.param(IMPORT, "text.db", "is not a SQLite database", id="text-file-import"),
    pytest.param(UPGRADE, "folder.db", "is a folder", id="folder-upgrade"),
    pytest.param(EXPORT, "zero.db", "it is empty", id="zero-bytes-export"),  # a reader never creates a store
    pytest.param(BACKUP, "zero.db", "it is empty", id="zero-bytes-backup"),
    # damaged: restore a backup (it said "check the permissions of the file and its folder")
    pytest.param(IMPORT, "damaged.db", "is damaged (database disk image is malformed): restore it from a backup",
                 id="damaged-import"),
    pytest.param(UPGRADE, "damaged.db", "restore it from a backup", id="damaged-upgrade"),
    pytest.param(EXPORT, "damaged.db", "restore it from a backup", id="damaged-export"),
    # damaged where only reading the rows finds it: "check --db, its permissions and the server"
    pytest.param(EXPORT, "damaged-rows.db", "is damaged (database disk image is malformed)", id="damaged-rows-export"),
    # a -wal file whose database is gone or empty: SQLite deleted it on open, and the commits in it with it
    pytest.param(IMPORT, "lone.db", "write-ahead log", id="orphan-wal-import"),
    pytest.param(UPGRADE, "emptied.db", "write-ahead log", id="orphan-wal-beside-empty-upgrade"),
    # URLs: a parameter is applied or refused by name, never dropped
    pytest.param(IMPORT, "sqlite:///{w}/store.db?timeout=abc", "timeout='abc' is not a number", id="url-timeout-abc"),
    pytest.param(EXPORT, "sqlite:///{w}/store.db?timeout=0", "timeout='0' is not a number", id="url-timeout-0"),
    pytest.param(IMPORT, "sqlite:///{w}/store.db?timeout=inf", "timeout='inf' is not a number", id="url-timeout-inf"),
    pytest.param(IMPORT, "sqlite:///{w}/store.db?cache=shared", "parameter 'cache' is not supported",
                 id="url-unknown-parameter"),
    pytest.param(IMPORT, "sqlite:///{w}/store.db?mode=memory", "mode='memory' is not supported", id="url-mode-memory"),
    pytest.param(IMPORT, "sqlite:///{w}/store.db?mode=ro", "cannot be written: the URL opens it read-only",
                 id="url-mode-ro-import"),
    pytest.param(UPGRADE, "sqlite:///{w}/store.db?mode=ro", "cannot be written", id="url-mode-ro-upgrade"),
    pytest.param(IMPORT, "sqlite:///{w}/new.db?mode=rw", "?mode=rw never creates one", id="url-mode-rw-missing"),
    pytest.param(IMPORT, "sqlite:///{w}/store.db?mode=ro&mode=rw", "is given 2 times", id="url-mode-twice"),
    pytest.param(IMPORT, "sqlite:///file:{w}/store.db?uri=true", "URI filenames", id="url-file-uri"),
    # in memory: "imported 1 new pair(s)" into a store that was gone when the command returned
    pytest.param(IMPORT, "sqlite://", "in-memory database", id="in-memory-import"),
    pytest.param(UPGRADE, "sqlite:///:memory:", "in-memory database", id="in-memory-upgrade"),
    pytest.param(JUDGE, "sqlite://", "in-memory database", id="in-memory-judge-db"),
    # an export with nothing to export: it wrote an empty file and said "exported 0"
    pytest.param(["export", "judgments", "--out", "{w}/out.jsonl", "--db"], "store.db",
                 "the store holds no judgments to export: nothing was written", id="export-nothing"),
    pytest.param(["export", "training", "--format", "hf", "--out", "{w}/train", "--db"], "store.db",
                 "holds no active training examples", id="export-nothing-hf"),
    pytest.param(["export", "training", "--snapshot", "empty", "--out", "{w}/out.jsonl", "--db"], "store.db",
                 "snapshot 'empty' holds no training examples", id="export-empty-snapshot"),
]


# One case of each class also runs in a real process: the exit status, stderr and the files as a shell leaves them.
REAL_PROCESS = {"old-store-import", "lookalike-upgrade", "random-bytes-import", "zero-bytes-backup", "damaged-export",
                "orphan-wal-import", "url-timeout-abc", "url-mode-ro-import", "in-memory-judge-db", "export-nothing"}


def _argv(args: list[str], db: str, world: Path) -> list[str]:
    return [a.replace("{w}", str(world)) for a in [*args, db if "://" in db else str(world / db)]]


@pytest.mark.parametrize(("args", "db", "expected"), REFUSED)
def test_a_refusal_is_one_line_and_writes_nothing(args: list[str], db: str, expected: str, world: Path,
                                                  no_reflectrm_environment: None, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from reflectrm_app.cli import main

    monkeypatch.chdir(world)  # as the real process runs: a default ./reflectrm.db would land in the world, and show
    before = snapshot(world)
    code = main(_argv(args, db, world))
    err = capsys.readouterr().err
    _one_line(subprocess.CompletedProcess(args, code, "", err), expected)
    assert snapshot(world) == before


@pytest.mark.parametrize(("args", "db", "expected"), [case for case in REFUSED if case.id in REAL_PROCESS])
def test_a_refusal_in_a_real_process_is_one_line_and_writes_nothing(args: list[str], db: str, expected: str,
                                                                   world: Path) -> None:
    before = snapshot(world)
    done = run_cli(_argv(args, db, world), cwd=world)
    _one_line(done, expected)
    assert snapshot(world) == before


def test_every_real_process_case_names_a_case() -> None:
    assert REAL_PROCESS <= {case.id for case in REFUSED}


def test_an_old_store_is_backed_up_then_upgraded_as_the_refusal_says(world: Path) -> None:
    """The refusal's two steps work on the store it refused (a backup of an older store was refused too)."""
    old = world / "old.db"
    before = hashlib.sha256(old.read_bytes()).hexdigest()
    done = run_cli(["db", "backup", str(world / "copy.db"), "--db", str(old)], cwd=world)
    assert done.returncode == 0, done.stderr
    assert hashlib.sha256(old.read_bytes()).hexdigest() == before  # a backup only reads
    done = run_cli(["db", "upgrade", "--db", str(old)], cwd=world)
    assert done.returncode == 0, done.stderr
    assert f"schema {OLD} -> {schema.head_revision()}" in done.stdout
    done = run_cli(["import", str(world / "pairs.jsonl"), "--db", str(old)], cwd=world)
    assert done.returncode == 0, done.stderr
    assert "imported 1 new pair(s)" in done.stdout
    con = sqlite3.connect(f"file:{world / 'copy.db'}?mode=ro", uri=True)
    assert con.execute("SELECT version_num FROM alembic_version").fetchall() == [(OLD,)]
    con.close()


def test_the_url_options_take_effect(world: Path) -> None:
    """?mode=ro reads without a WAL switch; ?timeout= and ?mode=rw open an existing store."""
    before = snapshot(world)
    done = run_cli([*EXPORT, f"sqlite:///{world}/store.db?mode=ro&timeout=5"], cwd=world)
    assert done.returncode == 0, done.stderr
    assert snapshot(world) == {**before, "out.jsonl": hashlib.sha256((world / "out.jsonl").read_bytes()).hexdigest()}
    done = run_cli([*IMPORT, f"sqlite:///{world}/store.db?mode=rw&timeout=5"], cwd=world)
    assert done.returncode == 0, done.stderr
    assert "imported 0 new pair(s)" in done.stdout  # the pair was stored already


def test_a_failed_migration_is_one_line_and_leaves_the_store_as_it_was(world: Path) -> None:
    """The migration's new tables cannot grow the file past its size (a full disk): one transaction rolls back.

    It runs in the file's own journal mode: a WAL switch before it would have changed the file even when the
    migration failed."""
    old = world / "old.db"
    before = snapshot(world)
    done = run_cli([*UPGRADE, str(old)], cwd=world, limit_file_bytes=old.stat().st_size)
    _one_line(done, f"the upgrade of sqlite:///{old} from revision {OLD} failed")
    assert "nothing was changed" in done.stderr
    assert snapshot(world) == before
    assert run_cli([*UPGRADE, str(old)], cwd=world).returncode == 0  # the retry, with room, succeeds


@pytest.mark.parametrize("args", [
    pytest.param(IMPORT, id="import"),
    pytest.param(EXPORT, id="export"),
    pytest.param(UPGRADE, id="db-upgrade"),
])
def test_a_store_locked_by_another_process_says_so(args: list[str], world: Path) -> None:
    """The only refusal that says "another process": a writer holds the rollback-journal store's lock.

    The files are read before the lock is taken and after it is let go: closing any descriptor of the file
    drops this process's POSIX locks on it."""
    before = snapshot(world)
    holder = sqlite3.connect(world / "store.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        done = run_cli([*args, f"sqlite:///{world}/store.db?timeout=0.2"], cwd=world)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    _one_line(done, "is locked by another process")
    assert snapshot(world) == before


# --- permissions: the decision, on real files (as root the kernel grants every write, so access is faked) ---


@pytest.mark.parametrize(("name", "denied", "expected"), [
    pytest.param("store.db", "file", "the file is read-only for this user", id="read-only-file"),
    pytest.param("store.db", "folder", "is read-only for this user (SQLite writes its -wal", id="read-only-folder"),
    pytest.param("new.db", "folder", "cannot be created: its folder", id="new-store-in-read-only-folder"),
])
def test_an_unwritable_store_is_refused_before_any_write(name: str, denied: str, expected: str, world: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from reflectrm_db import sqlite_files

    target = world / name if denied == "file" else world
    real = os.access
    monkeypatch.setattr(sqlite_files.os, "access",
                        lambda p, mode: False if Path(p) == target and mode & os.W_OK else real(p, mode))
    before = snapshot(world)
    with pytest.raises(ConfigError, match="cannot be") as refused:
        JudgmentStore.open(f"sqlite:///{world / name}")
    assert expected in str(refused.value) and "is running" not in str(refused.value)
    assert snapshot(world) == before
    with JudgmentStore.open(f"sqlite:///{world / 'store.db'}", read_only=True) as store:  # reading needs no write
        assert store.counts()["pairs"] == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes read-only files: the faked test above covers the decision")
def test_a_read_only_folder_is_refused_in_a_real_process(world: Path) -> None:
    before = snapshot(world)
    world.chmod(0o555)
    try:
        done = run_cli([*IMPORT, str(world / "store.db")], cwd=world)
    finally:
        world.chmod(0o755)
    _one_line(done, "is read-only for this user")
    assert snapshot(world) == before
