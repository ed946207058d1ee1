"""Concurrent writers never see "database is locked"; a killed writer leaves a consistent database."""

from __future__ import annotations

import itertools
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from reflectrm_db import models as m
from reflectrm_db.engine import run_transaction, session_factories
from reflectrm_db.services import JudgmentStore
from reflectrm_db.settings import StoreSettings
from tests.db.store_writer import big_pair, write

ROOT = Path(__file__).resolve().parents[2]
THREADS, PROCESSES, PER_WRITER, CORRECTED = 8, 2, 15, 5


def _spawn(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.db.store_writer", *args],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize(
    "busy_timeout_s",
    [
        pytest.param(30.0, id="default-busy-timeout"),
        # SQLite gives up on a lock after 1 ms, so "database is locked" happens all the time: the
        # service-level retry must keep every one of them from reaching a caller
        pytest.param(0.001, id="busy-timeout-1ms"),
    ],
)
def test_eight_threads_and_two_processes_write_one_sqlite_file(
    sqlite_url: str, busy_timeout_s: float, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="reflectrm_db.engine")
    env = {"REFLECTRM_SQLITE_BUSY_TIMEOUT_S": str(busy_timeout_s)}
    processes = [_spawn(sqlite_url, f"proc{k}", str(PER_WRITER), str(CORRECTED), env=env) for k in range(PROCESSES)]
    for p in processes:  # every process is up before anyone writes, so they all overlap
        assert p.stdout is not None and p.stdout.readline().strip() == "ready", p.stderr.read() if p.stderr else ""
    errors: list[BaseException] = []
    settings = StoreSettings(database_url=sqlite_url, sqlite_busy_timeout_s=busy_timeout_s)
    with JudgmentStore.open(sqlite_url, settings=settings) as store:  # one store shared by the threads, as in the app

        def run(k: int) -> None:
            try:
                write(store, f"thread{k}", PER_WRITER, CORRECTED)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(k,)) for k in range(THREADS)]
        for t in threads:
            t.start()
        for p in processes:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        for t in threads:
            t.join()
        outputs = [p.communicate(timeout=120) for p in processes]
        counts = store.counts()
        order = [s.judgment.pair.id.split("-")[0] for s in store.load_many(list(range(1, counts["judgments"] + 1)))]
    assert errors == []
    for p, (out, err) in zip(processes, outputs):
        assert p.returncode == 0 and out.strip() == "done", err
        assert "locked" not in err
    writers = THREADS + PROCESSES
    assert counts["judgments"] == counts["pairs"] == writers * PER_WRITER
    assert counts["samples"] == 8 * writers * PER_WRITER
    assert counts["corrections"] == counts["preference_examples"] == writers * CORRECTED
    retries = sum("retrying" in r.getMessage() for r in caplog.records)
    if busy_timeout_s < 0.01:
        assert retries > 0  # the locks did happen; none reached a caller
    switches = sum(a != b for a, b in itertools.pairwise(order))
    assert switches > writers  # the writers' transactions interleaved rather than ran one after another


def test_a_writer_killed_mid_stream_leaves_every_committed_judgment_whole(sqlite_url: str) -> None:
    writer = _spawn(sqlite_url, "stream", "0", "0")
    committed = []
    assert writer.stdout is not None
    for line in writer.stdout:
        committed.append(int(line))
        if len(committed) == 6:
            time.sleep(0.003)  # into the next transaction
            break
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)
    assert writer.returncode == -signal.SIGKILL
    path = sqlite_url.removeprefix("sqlite:///")
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert con.execute("PRAGMA foreign_key_check").fetchall() == []
    con.close()
    with JudgmentStore.open(sqlite_url) as store:
        counts = store.counts()
        stored = store.load_many(list(range(1, counts["judgments"] + 1)))
    assert set(committed) <= {s.id for s in stored}
    for s in stored:  # whatever is there is whole: its pair, all eight samples, its reflections
        assert s.judgment.pair == big_pair(s.id - 1)
        assert len(s.judgment.rollouts) == 8
    assert counts["samples"] == 8 * counts["judgments"]
    assert counts["reflections"] == sum(len(s.judgment.reflections) for s in stored)


def test_a_write_waits_out_a_lock_held_longer_than_the_busy_timeout(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The busy timeout is 50 ms; another connection holds the write lock for 400 ms. The retry loop
    # must absorb the "database is locked" errors SQLite raises meanwhile.
    settings = StoreSettings(database_url=sqlite_url, sqlite_busy_timeout_s=0.05, lock_retry_s=10)
    path = sqlite_url.removeprefix("sqlite:///")
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    threading.Timer(0.4, blocker.rollback).start()
    with caplog.at_level(logging.INFO, logger="reflectrm_db.engine"), \
            JudgmentStore.open(sqlite_url, settings=settings) as store:
        report = store.add_pairs([big_pair(0)])
    blocker.close()
    assert report.added == 1
    assert any("database busy" in r.getMessage() for r in caplog.records)  # it met the lock and retried


def test_the_retry_gives_up_with_a_clear_error(sqlite_url: str) -> None:
    from reflectrm_db.engine import DatabaseBusyError, make_engine

    path = sqlite_url.removeprefix("sqlite:///")
    engine = make_engine(sqlite_url, StoreSettings(database_url=sqlite_url, sqlite_busy_timeout_s=0.01))
    writes, _ = session_factories(engine)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(DatabaseBusyError, match="stayed locked"):
            run_transaction(writes, lambda s: s.execute(select(m.Pair.id)).all(), retry_s=0.2)
    finally:
        blocker.rollback()
        blocker.close()
        engine.dispose()
