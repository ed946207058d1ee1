"""Hostile inputs, second round (issue 27): the classes behind the failures, each tested as a class.

    never hang                 a server that accepts and never answers gets a connect time-out
    never change what is not   a foreign database (another app's Alembic head "0005", say) is refused from a
      the command's own        read-only look, byte for byte as it was; reading commands open read-only
    bound every number         seeds, run ids, the LoRA rank and the app API's ids are refused when parsed
    leave nothing behind       a failed backup or judging run leaves no file (a 0-byte one blocked the retry)
    one line for every failure driver URLs, malformed URLs, non-JSON REFLECTRM_ sections, a file of another shape
    who is who                 X-Forwarded-For is believed only from the proxies the operator names

The command-line cases run in a real process: exit 2, one line on stderr, no traceback.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reflectrm_db.services import JudgmentStore
from tests.hostile import assert_refused, copy_world, run_cli, snapshot

PAIR = {"id": "p1", "query": "What is 2 + 2?", "response_1": "4", "response_2": "5", "label": 1}
ONE = ["--query", "What is 2 + 2?", "--response-1", "4", "--response-2", "5"]
HUGE = str(10**29)


def _foreign(path: Path, revision: str) -> None:
    """Another application's SQLite database that Alembic manages too (its own tables, its own head)."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
    con.execute("INSERT INTO alembic_version VALUES (?)", (revision,))
    con.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    con.execute("INSERT INTO customers (name) VALUES ('ana')")
    con.commit()
    con.close()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("round2") / "world"
    root.mkdir()
    (root / "pairs.jsonl").write_text(json.dumps(PAIR) + "\n")
    (root / "data").mkdir()
    _foreign(root / "foreign-0005.db", "0005")  # the head of our own chain, but not our store
    _foreign(root / "foreign-abc.db", "9f3c2a1b7d4e")  # a revision our chain never had
    with JudgmentStore.open(f"sqlite:///{root / 'store.db'}") as store:
        store.add_pairs([])
    shutil.copy(root / "store.db", root / "newer.db")
    con = sqlite3.connect(root / "newer.db")
    con.execute("UPDATE alembic_version SET version_num = '0099'")
    con.commit()
    assert con.execute("PRAGMA journal_mode=DELETE").fetchone() == ("delete",)  # a WAL switch would show in its bytes
    con.close()
    return root


@pytest.fixture
def world(template: Path, tmp_path: Path) -> Path:
    return copy_world(template, tmp_path)


# --- one line for every failure, checked before any model work -------------------------------------------------

ONE_LINE = [
    # URLs naming a driver the store does not ship, or that do not parse: tracebacks from SQLAlchemy's import
    pytest.param(["export", "judgments", "--out", "o.jsonl", "--db", "postgresql+psycopg2://u@127.0.0.1/x"], {},
                 "psycopg 3", id="db-url-psycopg2"),
    pytest.param(["export", "judgments", "--out", "o.jsonl", "--db", "postgresql+asyncpg://u@127.0.0.1/x"], {},
                 "psycopg 3", id="db-url-asyncpg"),
    pytest.param(["export", "judgments", "--out", "o.jsonl", "--db", "postgresql://u:secret@[::1/x"], {},
                 "is malformed", id="db-url-unclosed-bracket"),
    pytest.param(["db", "upgrade", "--db", "postgresql://u:secret@host:port/x"], {}, "is malformed",
                 id="db-url-port-not-a-number"),
    # a section given as JSON that is not JSON: pydantic-settings' SettingsError traceback
    pytest.param(["export", "judgments", "--out", "o.jsonl", "--db", "store.db"], {"REFLECTRM_STORE": "{bad"},
                 "REFLECTRM_STORE is not valid JSON", id="env-store-not-json"),
    # the judge section is the app's (a store command reads only its own): the app refuses it before it starts
    pytest.param(["app", "--port", "0"], {"REFLECTRM_JUDGE": "[1"}, "REFLECTRM_JUDGE is not valid JSON",
                 id="env-judge-not-json"),
    # numbers past what a 64-bit column holds: an OverflowError from the query, or minutes of judging first
    pytest.param(["compare", "123456789012345678901234", "1", "--db", "store.db"], {}, "is not an id",
                 id="compare-24-digit-run-id"),
    pytest.param(["compare", "2.7", "1", "--db", "store.db"], {}, "is not an id", id="compare-fractional-run-id"),
    pytest.param(["judge", *ONE, "--seed", HUGE], {}, "is not a seed", id="judge-seed-1e29"),
    pytest.param(["judge", *ONE, "--seed", "-1"], {}, "is not a seed", id="judge-negative-seed"),
    pytest.param(["judge", *ONE, "--seed", "9" * 5000], {}, "is not a seed", id="judge-5000-digit-seed"),
    pytest.param(["eval", "--data", "pairs.jsonl", "--seed", HUGE], {}, "is not a seed", id="eval-seed-1e29"),
    pytest.param(["train", "--data", "data", "--output", "run", "--seed", HUGE], {}, "is not a seed",
                 id="train-seed-1e29"),
    # LoRA rank 0: peft's ValueError traceback after the model loaded
    pytest.param(["train", "--data", "data", "--output", "run", "--lora", "--lora-r", "0"], {},
                 "not a whole number of at least 1", id="train-lora-r-0"),
    # a pairs file under a benchmark's name: KeyError 'response_A'
    pytest.param(["eval", "--benchmark", "judgebench", "--data", "pairs.jsonl"], {}, "is not a judgebench file",
                 id="eval-judgebench-given-pairs"),
]


@pytest.mark.parametrize(("args", "env", "expected"), ONE_LINE)
def test_every_failure_is_one_line_in_a_real_process(args: list[str], env: dict[str, str], expected: str,
                                                     world: Path) -> None:
    before = snapshot(world)
    done = run_cli(args, cwd=world, env=env)
    assert_refused(done, expected)
    assert "secret" not in done.stderr  # a URL's password is never echoed
    assert snapshot(world) == before


# --- never change what the command does not own ----------------------------------------------------------------

FOREIGN = [
    pytest.param(["export", "judgments", "--out", "{w}/o.jsonl"], id="export"),
    pytest.param(["db", "upgrade"], id="db-upgrade"),
    pytest.param(["db", "backup", "{w}/copy.db"], id="db-backup"),
    pytest.param(["import", "{w}/pairs.jsonl"], id="import"),
    pytest.param(["compare", "1", "2"], id="compare"),
    pytest.param(["judge", *ONE, "--db"], id="judge-db"),
]


@pytest.mark.parametrize(("db", "expected"), [
    # another app's head "0005" is our head's name too: the store is known by its tables, not the name alone
    pytest.param("foreign-0005.db", "another application's database", id="foreign-head-0005"),
    pytest.param("foreign-abc.db", "another application's database", id="foreign-head-unknown"),
    # the store's tables at a revision this version never had: a newer reflectrm's store
    pytest.param("newer.db", "unknown to this reflectrm", id="newer-store"),
])
@pytest.mark.parametrize("args", FOREIGN)
def test_a_database_that_is_not_this_versions_store_is_refused_byte_for_byte(
    args: list[str], db: str, expected: str, world: Path, no_reflectrm_environment: None,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """Refused before any pragma: the WAL switch used to rewrite the file's header (and leave -wal/-shm)."""
    from reflectrm_app.cli import main

    monkeypatch.chdir(world)
    before = snapshot(world)
    code = main(_foreign_argv(args, world / db, world))
    assert_refused(subprocess.CompletedProcess(args, code, "", capsys.readouterr().err), expected)
    assert snapshot(world) == before


@pytest.mark.parametrize(("args", "db", "expected"), [  # each kind of database once more, through a real process
    pytest.param(["export", "judgments", "--out", "{w}/o.jsonl"], "foreign-0005.db", "another application's database",
                 id="export-foreign-head-0005"),
    pytest.param(["import", "{w}/pairs.jsonl"], "foreign-abc.db", "another application's database",
                 id="import-foreign-head-unknown"),
    pytest.param(["db", "upgrade"], "newer.db", "unknown to this reflectrm", id="db-upgrade-newer-store"),
])
def test_a_database_that_is_not_this_versions_store_is_refused_in_a_real_process(args: list[str], db: str,
                                                                                 expected: str, world: Path) -> None:
    before = snapshot(world)
    done = run_cli(_foreign_argv(args, world / db, world), cwd=world)
    assert_refused(done, expected)
    assert snapshot(world) == before


def _foreign_argv(args: list[str], db: Path, world: Path) -> list[str]:
    argv = [*args, "--db", str(db)] if args[-1] != "--db" else [*args, str(db)]
    return [a.replace("{w}", str(world)) for a in argv]


@pytest.mark.parametrize("args", [
    pytest.param(["export", "judgments", "--out", "{w}/out/o.jsonl"], id="export"),
    pytest.param(["db", "backup", "{w}/out/copy.db"], id="db-backup"),
    pytest.param(["compare", "1", "2"], id="compare"),  # refused (no such run), after a read-only look
])
def test_a_reading_command_leaves_the_store_byte_for_byte(args: list[str], world: Path) -> None:
    """A store in rollback-journal mode (a copy, a restore) stays so: a reader opens it `mode=ro`, no WAL switch."""
    con = sqlite3.connect(world / "store.db")
    con.execute("PRAGMA journal_mode=DELETE")
    con.close()
    (world / "out").mkdir()
    before = hashlib.sha256((world / "store.db").read_bytes()).hexdigest()
    run_cli([*args, "--db", str(world / "store.db")], cwd=world)
    assert hashlib.sha256((world / "store.db").read_bytes()).hexdigest() == before
    assert sorted(p.name for p in world.glob("store.db*")) == ["store.db"]


# --- never hang -------------------------------------------------------------------------------------------------


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never says a word (a firewall, a wedged server)."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(timeout=5)
    for conn in held:
        conn.close()
    server.close()


@pytest.mark.parametrize("args", [
    pytest.param(["export", "judgments", "--out", "o.jsonl"], id="export"),
    pytest.param(["db", "upgrade"], id="db-upgrade"),
    pytest.param(["import", "pairs.jsonl"], id="import"),
])
def test_a_server_that_never_answers_is_a_one_line_time_out(args: list[str], silent_server: int, world: Path) -> None:
    # bounded: without a connect time-out the process waits for ever and `timeout` fails the test
    done = run_cli([*args, "--db", f"postgresql://u:secret@127.0.0.1:{silent_server}/x"], cwd=world,
                env={"REFLECTRM_CONNECT_TIMEOUT_S": "2"}, timeout=120)
    assert_refused(done, "timeout expired")
    assert "secret" not in done.stderr


def test_the_connect_time_out_is_a_setting_with_a_floor() -> None:
    from reflectrm.errors import ConfigError
    from reflectrm_db.settings import load_store_settings

    assert load_store_settings().connect_timeout_s == 10
    with pytest.raises(ConfigError, match="connect_timeout_s"):
        load_store_settings(connect_timeout_s=0)  # libpq reads 0 as "wait for ever"


# --- leave nothing behind -----------------------------------------------------------------------------------------


def test_a_backup_to_a_full_disk_is_one_line_and_leaves_nothing(world: Path) -> None:
    """The file-size limit makes every write past 64 KiB fail as a full disk does (room for SQLite's 32 KiB
    shared-memory file); the store is bigger, so its copy cannot fit."""
    assert (world / "store.db").stat().st_size > 64 * 1024
    (world / "backups").mkdir()
    done = run_cli(["db", "backup", "{w}/backups/copy.db", "--db", "{w}/store.db"], cwd=world,
                limit_file_bytes=64 * 1024)
    assert_refused(done, "nothing was written")
    assert list((world / "backups").iterdir()) == []  # no 0-byte "backup" blocks the retry
    done = run_cli(["db", "backup", "{w}/backups/copy.db", "--db", "{w}/store.db"], cwd=world)
    assert done.returncode == 0, done.stderr
    assert [p.name for p in (world / "backups").iterdir()] == ["copy.db"]
    with JudgmentStore.open(f"sqlite:///{world / 'backups' / 'copy.db'}", read_only=True) as copy:
        assert copy.counts() is not None


def test_a_judging_run_that_fails_before_its_first_line_leaves_no_output(
    world: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import reflectrm.backends
    from reflectrm.backends import ScriptedBackend
    from reflectrm_app.cli import main
    from tests.db.helpers import scripted_output

    monkeypatch.setattr(reflectrm.backends, "load_backend", lambda *a, **k: ScriptedBackend(scripted_output))

    def disk_full(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(JudgmentStore, "record", disk_full)
    out = world / "judged.jsonl"
    code = main(["judge", "--input", str(world / "pairs.jsonl"), "--output", str(out), "--db", str(world / "store.db")])
    assert code == 2 and "No space left" in capsys.readouterr().err
    assert not out.exists()  # a 0-byte output read as "judged, nothing to redo"


# --- numbers and ids, typed where they are read ---------------------------------------------------------------


@pytest.mark.parametrize(("value", "ok"), [
    pytest.param(0, True, id="zero"),
    pytest.param(2**63 - 1, True, id="largest"),
    pytest.param(2**63, False, id="past-64-bit"),
    pytest.param(10**29, False, id="1e29"),
    pytest.param(-1, False, id="negative"),
    pytest.param(True, False, id="bool"),
    pytest.param(1.0, False, id="float"),
])
def test_a_seed_is_a_64_bit_whole_number_everywhere(value: Any, ok: bool) -> None:
    from reflectrm.core.config import JudgeConfig
    from reflectrm.errors import ConfigError
    from reflectrm.training.grpo import TrainConfig

    for config in (JudgeConfig, TrainConfig):
        if ok:
            assert config(seed=value).seed == value
        else:
            with pytest.raises(ConfigError, match="seed"):
                config(seed=value)


@pytest.mark.parametrize("value", [
    pytest.param(2.7, id="fraction"),  # used to correct judgment 2
    pytest.param(2.0, id="integral-float"),
    pytest.param("2", id="string"),
    pytest.param(True, id="bool"),  # True == 1: judgment 1
    pytest.param(10**30, id="past-64-bit"),
    pytest.param(0, id="zero"),
    pytest.param(None, id="null"),
])
def test_the_app_api_takes_ids_as_json_integers_only(value: Any) -> None:
    from reflectrm.errors import InputError
    from reflectrm_app.ui.api import _row_id, _verdict

    with pytest.raises(InputError, match="judgment_id must be a whole number"):
        _row_id(value, name="judgment_id")
    with pytest.raises(InputError, match="verdict must be 1 or 2"):
        _verdict(value if value not in (2.0, True) else 1.0)
    assert _row_id(2, name="judgment_id") == 2 and _verdict(2) == 2


# --- who is who: the login throttle's address -------------------------------------------------------------------


def _login_stack(trusted: str | None, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The ASGI app uvicorn serves, built the way Gradio builds it (uvicorn.Config after `launch_options`)."""
    import uvicorn

    from reflectrm_app.ui.login import FailureCounter, LoginThrottleMiddleware
    from reflectrm_app.settings import load_settings
    from reflectrm_app.ui.blocks import launch_options

    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "127.0.0.1")  # uvicorn's default; recorded, so teardown restores it
    launch_options(load_settings(auth="ana:secret", **({} if trusted is None else {"trusted_proxies": trusted})))

    async def wrong_password(scope: dict, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 400, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    config = uvicorn.Config(LoginThrottleMiddleware(wrong_password, FailureCounter(max_failures=3)))
    config.load()
    return config.loaded_app


def _login(app: Any, peer: str, forwarded: str) -> int:
    scope = {"type": "http", "method": "POST", "path": "/login", "client": (peer, 5000), "scheme": "http",
             "headers": [(b"x-forwarded-for", forwarded.encode())], "query_string": b"", "asgi": {"version": "3.0"}}
    status = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    asyncio.run(app(scope, receive, send))
    return status[0]


def test_a_rotated_forwarded_header_does_not_get_round_the_throttle(monkeypatch: pytest.MonkeyPatch) -> None:
    """By default no proxy is trusted: a local client inventing a new X-Forwarded-For each time is one address."""
    app = _login_stack(None, monkeypatch)
    codes = [_login(app, "127.0.0.1", f"203.0.113.{k}") for k in range(5)]
    assert codes == [400, 400, 400, 429, 429]
    assert os.environ["FORWARDED_ALLOW_IPS"] == ""


def test_a_named_proxy_is_believed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Behind a proxy the operator names, clients are told apart by the header that proxy sets."""
    app = _login_stack("127.0.0.1", monkeypatch)
    assert [_login(app, "127.0.0.1", f"203.0.113.{k}") for k in range(5)] == [400] * 5
    assert [_login(app, "127.0.0.1", "198.51.100.7") for _ in range(4)] == [400, 400, 400, 429]


@pytest.mark.parametrize("value", ["*", "proxy.example", "10.0.0.0/33"])
def test_a_trusted_proxy_must_be_an_address(value: str) -> None:
    from reflectrm.errors import ConfigError
    from reflectrm_app.settings import load_settings

    with pytest.raises(ConfigError, match="REFLECTRM_TRUSTED_PROXIES"):
        load_settings(trusted_proxies=value)
