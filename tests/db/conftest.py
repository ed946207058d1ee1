"""Fixtures for the store's tests: a real PostgreSQL server (started once per session from `initdb`)
and SQLite files, each test on a fresh database with the schema; judgments made by the real
pipeline on a scripted backend."""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from reflectrm_db import schema
from reflectrm_db.engine import make_engine
from reflectrm_db.services import JudgmentStore
from reflectrm.backends import ScriptedBackend
from reflectrm.core.config import JudgeConfig
from reflectrm.core.types import Judgment, PreferencePair
from reflectrm.pipeline import judge_many
from tests.db.helpers import JudgeFn, scripted_output

BACKENDS = ("sqlite", "postgresql")
_counter = itertools.count()


# --- PostgreSQL --------------------------------------------------------------------------------------


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name) or sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if isinstance(found, list):
        return found[-1] if found else None
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The URL of a throwaway PostgreSQL server on 127.0.0.1 (its own cluster in a temp dir)."""
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if initdb is None or pg_ctl is None:
        reason = "PostgreSQL tests skipped: `initdb` not found (apt-get install postgresql)"
        print(reason)
        pytest.skip(reason)
    root = Path(tempfile.mkdtemp(prefix="reflectrm-pg-"))
    as_root = os.geteuid() == 0  # the server refuses to run as root: run it as `postgres`
    user = "postgres" if as_root else None
    if as_root:
        shutil.chown(root, "postgres")
    port, data = _free_port(), root / "data"

    def run(*args: str) -> None:
        subprocess.run(args, check=True, user=user, capture_output=True, cwd=root)

    run(initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
    run(pg_ctl, "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "start")
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}"
    finally:
        run(pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_template(pg_server: str) -> str:
    """Name of a PostgreSQL database with the schema, copied for each test."""
    admin = create_engine(f"{pg_server}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text("CREATE DATABASE reflectrm_template"))
    admin.dispose()
    engine = make_engine(f"{pg_server}/reflectrm_template")
    schema.upgrade(engine)
    engine.dispose()
    return "reflectrm_template"


@contextmanager
def _pg_database(server: str, template: str = "template0") -> Iterator[str]:
    """A new database (a copy of `template`), dropped afterwards: each copy takes about 8 MB of disk."""
    name = f"t{os.getpid()}_{next(_counter)}"
    admin = create_engine(f"{server}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f"CREATE DATABASE {name} TEMPLATE {template}"))
    try:
        yield f"{server}/{name}"
    finally:
        with admin.connect() as c:
            c.execute(text(f"DROP DATABASE {name} WITH (FORCE)"))
        admin.dispose()


# --- SQLite ------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "template.db"
    engine = make_engine(f"sqlite:///{path}")
    schema.upgrade(engine)
    engine.dispose()
    return path


# --- databases per test ------------------------------------------------------------------------------


@pytest.fixture(params=BACKENDS)
def backend_name(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def empty_db_url(backend_name: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of a new, empty database (no schema) on each backend."""
    if backend_name == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    with _pg_database(request.getfixturevalue("pg_server")) as url:
        yield url


@pytest.fixture
def db_url(backend_name: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of a new database with the schema, on each backend."""
    if backend_name == "sqlite":
        path = tmp_path / "store.db"
        shutil.copy(request.getfixturevalue("sqlite_template"), path)
        yield f"sqlite:///{path}"
        return
    with _pg_database(request.getfixturevalue("pg_server"), request.getfixturevalue("pg_template")) as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path: Path, sqlite_template: Path) -> str:
    """A SQLite file with the schema (for SQLite-only tests)."""
    path = tmp_path / "store.db"
    shutil.copy(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def store(db_url: str) -> Iterator[JudgmentStore]:
    with JudgmentStore.open(db_url) as s:
        yield s


# --- judgments ---------------------------------------------------------------------------------------


@pytest.fixture
def scripted_backend() -> ScriptedBackend:
    return ScriptedBackend(scripted_output, max_context_chars=50_000_000)


@pytest.fixture
def judge_pairs(scripted_backend: ScriptedBackend) -> JudgeFn:
    """judge_pairs(pairs, strategy=..., swap=False) -> judgments from the real pipeline."""

    def run(
        pairs: Sequence[PreferencePair], *, strategy: str = "reflectrm", swap: bool = False, **config: object
    ) -> list[Judgment]:
        expanded = [q for p in pairs for q in ((p, p.swapped()) if swap else (p,))]
        return list(judge_many(expanded, scripted_backend, JudgeConfig(strategy=strategy, **config)))  # type: ignore[arg-type]

    return run
