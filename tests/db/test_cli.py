"""`reflectrm import / export / db upgrade / db backup` and `judge --db`, through the real entry point."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from reflectrm_app.cli import main
from reflectrm_db.schema import head_revision
from reflectrm_db.services import JudgmentStore
from reflectrm.core.types import Judgment
from tests.db.helpers import scripted_output


def _pairs_file(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


ROWS = [{"q": f"question {k}?", "a": f"A{k}", "b": f"B{k}", "y": 1 + k % 2} for k in range(4)]


def test_import_then_export_through_the_cli(db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _pairs_file(tmp_path / "in.jsonl", ROWS)
    assert (
        main(
            [
                "import",
                str(path),
                "--map",
                "query=q,response_1=a,response_2=b,label=y",
                "--source",
                "hs3",
                "--db",
                db_url,
            ]
        )
        == 0
    )
    assert "imported 4 new pair(s)" in capsys.readouterr().out
    out = tmp_path / "pairs.parquet"
    assert main(["export", "pairs", "--format", "parquet", "--out", str(out), "--db", db_url]) == 0
    assert "exported 4 pairs row(s)" in capsys.readouterr().out
    import pyarrow.parquet as pq

    rows = pq.read_table(out).to_pylist()
    assert [(r["response_1"], r["label"], r["source"]) for r in rows] == [(f"A{k}", 1 + k % 2, "hs3") for k in range(4)]


def test_a_bad_row_exits_2_with_its_row_number_and_imports_nothing(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _pairs_file(tmp_path / "in.jsonl", [*ROWS[:2], {"q": "x", "a": "A", "b": "B", "y": 7}])
    assert main(["import", str(path), "--map", "query=q,response_1=a,response_2=b,label=y", "--db", db_url]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "row 3" in err and "label must be 1 or 2" in err and err.count("\n") == 1
    with JudgmentStore.open(db_url) as store:
        assert store.counts()["pairs"] == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["import", "missing.jsonl"], "does not exist", id="missing-file"),
        pytest.param(["import", "in.txt"], "unknown file type", id="unknown-type"),
        pytest.param(["import", "in.jsonl", "--map", "query"], "FIELD=COLUMN", id="bad-map"),
        pytest.param(["export", "judgments", "--format", "hf", "--out", "x"], "hf format", id="hf-of-judgments"),
        pytest.param(["export", "pairs", "--out", "in.jsonl"], "already exists", id="overwrite"),
    ],
)
def test_cli_errors_are_one_line_with_exit_code_2(
    sqlite_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    _pairs_file(tmp_path / "in.jsonl", ROWS)
    (tmp_path / "in.txt").write_text("x")
    assert main([*argv, "--db", sqlite_url]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_db_upgrade_creates_then_reports_the_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("REFLECTRM_DATABASE_URL", raising=False)
    assert main(["db", "upgrade"]) == 0  # the default: ./reflectrm.db
    assert f"schema empty -> {head_revision()}" in capsys.readouterr().out
    assert (tmp_path / "reflectrm.db").is_file()
    monkeypatch.setenv("REFLECTRM_DATABASE_URL", f"sqlite:///{tmp_path / 'reflectrm.db'}")
    assert main(["db", "upgrade"]) == 0
    assert f"already at {head_revision()}" in capsys.readouterr().out


def test_db_backup_copies_a_store_in_use(sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with JudgmentStore.open(sqlite_url) as store:
        from tests.db.helpers import make_pairs

        store.add_pairs(make_pairs(5))
        backup = tmp_path / "backup.db"
        assert main(["db", "backup", str(backup), "--db", sqlite_url]) == 0  # while this store is open
    con = sqlite3.connect(backup)
    assert con.execute("SELECT count(*) FROM pairs").fetchone() == (5,)
    assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    con.close()
    assert main(["db", "backup", str(backup), "--db", sqlite_url]) == 2
    assert "already exists" in capsys.readouterr().err


def test_db_backup_without_db_backs_up_the_store_the_environment_names(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the trap: backup read the URL off the sectioned settings' top level and died with an AttributeError
    with JudgmentStore.open(sqlite_url) as store:
        from tests.db.helpers import make_pairs

        store.add_pairs(make_pairs(2))
    monkeypatch.setenv("REFLECTRM_DATABASE_URL", sqlite_url)
    assert main(["db", "backup", str(tmp_path / "env-backup.db")]) == 0
    con = sqlite3.connect(tmp_path / "env-backup.db")
    assert con.execute("SELECT count(*) FROM pairs").fetchone() == (2,)
    con.close()


def test_db_backup_of_postgresql_points_to_pg_dump(
    pg_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["db", "backup", str(tmp_path / "b.db"), "--db", f"{pg_server}/postgres"]) == 2
    assert "pg_dump" in capsys.readouterr().err


def test_judge_with_db_stores_what_it_prints(
    db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from reflectrm import backends
    from reflectrm.backends import ScriptedBackend

    monkeypatch.setattr(backends, "load_backend", lambda *a, **k: ScriptedBackend(scripted_output))
    argv = ["judge", "--query", "2+2?", "--response-1", "4", "--response-2", "5", "--json", "--swap", "--db", db_url]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    with JudgmentStore.open(db_url) as store:
        original, swapped = store.load(1), store.load(2)
    assert original.judgment == Judgment.from_dict(printed)
    assert swapped.judgment == Judgment.from_dict(printed["swapped"])
    assert (original.twin_id, swapped.twin_id) == (2, 1)


def test_building_the_parser_loads_no_database_library() -> None:
    # `reflectrm --help` and `reflectrm judge` should not pay for SQLAlchemy or pyarrow.
    code = (
        "import sys, reflectrm_app.cli; reflectrm_app.cli.build_parser(); print([m for m in ('sqlalchemy', 'pyarrow') if m in sys.modules])"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.strip() == "[]"
