"""The terminal and reports: text from data never reaches them with raw control characters, and printing never fails.

A pair's query and responses, the model's output, its name, a data set's subset names, a training run's
state and error, and error messages that quote any of them go through one function
(`reflectrm.display.printable`). Each hostile string below is planted in every field an output shows, and
the output is checked: no raw control character (newline and tab only where the text spans lines), the
string shown as its escape, JSON still JSON with the same values, report.md clean.

Then the streams: an encoding stdout cannot print in (PYTHONIOENCODING=ascii) and a reader that went
away (`| head`) end a judgment that was stored as a success, not as "bad input", and store one row.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import reflectrm.backends
from reflectrm_app.commands import judge, running
from reflectrm.backends import ScriptedBackend
from reflectrm.core.types import PreferencePair
from reflectrm.display import printable
from reflectrm.errors import InputError
from reflectrm_app.cli import main
from tests.conftest import critique_output, response_output

ROOT = Path(__file__).resolve().parents[1]

HOSTILE = [
    pytest.param("\x1b[2J\x1b[H", id="esc-clear-screen"),  # ESC sequences: wipe what the user was reading
    pytest.param("\x1b]0;owned\x07", id="osc-window-title"),  # OSC ... BEL: retitles the window (or worse)
    pytest.param("\x07", id="bel"),  # rings, again and again on a long file
    pytest.param("\x9b31m", id="c1-csi"),  # the one-byte CSI of 8-bit terminals: a filter of ESC alone lets it by
    pytest.param("\rFinal verdict: Response 2", id="carriage-return"),  # overwrites the line it sits in
    pytest.param("4\x08\x08\x085", id="backspace"),  # rubs out the characters before it
    pytest.param("a\x00b", id="nul"),  # ends the string for any C reader of the output
    pytest.param("\u202eevil", id="rtl-override"),  # U+202E reorders the line as drawn: shown as an escape
    pytest.param("x\nFinal verdict: Response 2 is better", id="newline-in-a-field"),  # fakes a line of the anatomy
]
"""Hostile strings, each planted in every field an output shows."""

RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""What must never reach a terminal or report.md raw (newline and tab may: the outputs below span lines)."""


def _clean(text: str, hostile: str) -> None:
    assert not RAW.search(text), repr(RAW.search(text))
    shown = printable(hostile)
    assert shown != hostile and shown in text, f"{shown!r} is not shown in {text[:3000]!r}"


@pytest.fixture
def planted_judge(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    """A scripted judge whose name and every analysis hold the hostile string."""
    hostile = request.param

    def responder(prompt: str, seed: int, params: object) -> str:
        if "## Critiques for Judgment" in prompt:
            return critique_output(1 + seed % 2) + hostile
        return response_output(1 + seed % 2, f"analysis {hostile}")

    monkeypatch.setattr(reflectrm.backends, "load_backend",
                        lambda *a, **k: ScriptedBackend(responder, model_id=f"judge{hostile}"))
    return hostile


def _one_pair(hostile: str) -> list[str]:
    return ["judge", "--query", f"What is 2 + 2? {hostile}", "--response-1", f"4{hostile}", "--response-2", "5"]


@pytest.mark.parametrize("planted_judge", HOSTILE, indirect=True)
def test_judge_anatomy_shows_data_escaped(planted_judge: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_one_pair(planted_judge)) == 0
    out = capsys.readouterr().out
    _clean(out, planted_judge)
    assert sum(line.startswith("Final verdict:") for line in out.splitlines()) == 1  # no field fakes the verdict
    assert f"Model: judge{printable(planted_judge)}" in out
    assert f"Query: {printable(' '.join(f'What is 2 + 2? {planted_judge}'.split()))}" in out  # short fields: one line


@pytest.mark.parametrize("planted_judge", HOSTILE, indirect=True)
def test_judge_json_stays_json_with_the_same_values(planted_judge: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*_one_pair(planted_judge), "--json", "--swap"]) == 0
    out = capsys.readouterr().out
    assert not RAW.search(out) and out.count("\n") == 1  # one line, no raw control (JSON escapes C0; we the rest)
    got = json.loads(out)
    assert PreferencePair.from_dict(got["pair"]).query == f"What is 2 + 2? {planted_judge}"  # the exact text
    assert got["model"] == f"judge{planted_judge}" and planted_judge in got["rollouts"][0]["text"]


@pytest.mark.parametrize("planted_judge", HOSTILE, indirect=True)
def test_eval_report_and_its_terminal_output_show_data_escaped(
    planted_judge: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile = planted_judge
    rows = [{"id": f"p{k}{hostile}", "query": f"What is {k} + 1? {hostile}", "response_1": f"{k + 1}{hostile}",
             "response_2": str(k + 2), "label": 1, "subset": f"math{hostile}"} for k in range(3)]
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert main(["eval", "--benchmark", "file", "--data", str(data), "--strategies", "reflectrm", "--n", "4",
                 "--db", str(tmp_path / "e.db"), "--out", str(tmp_path / "report")]) == 0
    captured = capsys.readouterr()
    report_md = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    for text in (report_md, captured.out):
        _clean(text, hostile)
        assert f"| math{printable(hostile)} |" in text  # the subset name: one cell, escaped
    assert not RAW.search(captured.err.replace("\r", ""))  # the progress counter rewrites its own line
    json.loads((tmp_path / "report" / "report.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("hostile", HOSTILE)
def test_train_status_shows_the_run_folder_escaped(hostile: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """status.json is a file anyone can write: its state and error are data."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text("{}")
    (run / "status.json").write_text(json.dumps({"state": f"failed{hostile}", "step": 1, "error": f"boom {hostile}"}))
    assert main(["train-status", str(run)]) == 0
    out = capsys.readouterr().out
    _clean(out, hostile)
    assert len(out.splitlines()) == 2  # the state and the error: nothing more, whatever they hold
    assert main(["train-status", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["error"] == f"boom {hostile}"


@pytest.mark.parametrize("hostile", HOSTILE)
def test_every_error_line_is_escaped(hostile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Messages quote data (a cell, a file name, a server's reply): the one place that prints them escapes them."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise InputError(f"row 3: label {hostile} is not 1 or 2: fix the row")

    monkeypatch.setattr(judge, "read_pairs", refuse)
    (tmp_path / "p.jsonl").write_text("{}\n")
    assert main(["judge", "--input", str(tmp_path / "p.jsonl")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("error: row 3: label ")
    assert not RAW.search(err) and "\t" not in err


@pytest.mark.parametrize("hostile", HOSTILE)
def test_import_names_the_file_and_skipped_rows_escaped(hostile: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    if "\x00" in hostile or "\n" in hostile:
        pytest.skip("not in a file name")  # the skip reasons below still carry it
    data = tmp_path / f"pairs{hostile}.jsonl"
    rows = [{"query": "q", "response_1": "a", "response_2": "b", "label": 1},
            {"query": "q", "response_1": "a", "response_2": "b", "label": f"first{hostile}"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert main(["import", str(data), "--skip-invalid", "--db", str(tmp_path / "s.db")]) == 0
    captured = capsys.readouterr()
    _clean(captured.out, hostile)  # "imported 1 new pair(s) from pairs<escaped>.jsonl"
    assert not RAW.search(captured.err) and len(captured.err.splitlines()) == 1


def test_log_records_are_escaped_and_keep_their_lines() -> None:
    import logging

    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "snapshot %s\nsecond line", ("a\x1b[2Jb",), None)
    text = running.PrintableFormatter("%(message)s").format(record)
    assert text == "snapshot a\\u001b[2Jb\nsecond line"


# --- the streams: printing after a judgment was stored never fails ---------------------------------------------

SCRIPTED = r"""
import sys
import reflectrm.backends
from reflectrm.backends import ScriptedBackend
from reflectrm.core.types import PreferencePair
from tests.db.helpers import scripted_output
reflectrm.backends.load_backend = lambda *a, **k: ScriptedBackend(scripted_output)
from reflectrm_app.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def _popen(args: list[str], *, cwd: Path, env: dict[str, str] | None = None, **kwargs: object) -> subprocess.Popen:
    base = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-c", SCRIPTED, *args], cwd=cwd, env={**base, **(env or {})},
                            stderr=subprocess.PIPE, **kwargs)  # type: ignore[call-overload]


def _stored(db: Path) -> int:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT count(*) FROM judgments").fetchone()[0]
    finally:
        con.close()


# outside ASCII and Latin-1: a coffee cup, a Hebrew letter, and past the BMP (whose escape JSON spells as two \u)
ONE = ["judge", "--query", "Caf\u00e9 \u2615: what is 2 + 2? \u05d0", "--response-1", "4 \U0001f600", "--response-2", "5"]


@pytest.mark.parametrize("as_json", [pytest.param([], id="anatomy"), pytest.param(["--json"], id="json")])
@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_a_stdout_that_cannot_encode_the_text_still_prints_and_stores_once(
    tmp_path: Path, encoding: str, as_json: list[str]
) -> None:
    """It used to fail with "not valid UTF-8: save files as UTF-8" after the judgment was stored (exit 2),
    and every retry stored another row."""
    db = tmp_path / "s.db"
    proc = _popen([*ONE, *as_json, "--db", str(db)], cwd=tmp_path, env={"PYTHONIOENCODING": encoding},
                  stdout=subprocess.PIPE)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode(errors="replace")[-3000:]
    assert err == b""
    text = out.decode("ascii" if encoding == "ascii" else "latin-1")
    assert "\\u2615" in text  # shown as an escape, not an error
    if as_json:
        got = json.loads(text)  # still JSON, with the same text
        pair = PreferencePair.from_dict(got["pair"])
        assert pair.query == ONE[2] and pair.response_1 == ONE[4]
    assert _stored(db) == 1


def test_a_reader_that_went_away_ends_quietly_with_the_judgment_stored_once(tmp_path: Path) -> None:
    """`reflectrm judge ... | head -0`: no "Broken pipe: check the path" message, no traceback, exit 141."""
    db = tmp_path / "s.db"
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the judge prints
    proc = _popen([*ONE, "--db", str(db)], cwd=tmp_path, stdout=write)
    os.close(write)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 141, err.decode(errors="replace")[-3000:]
    assert err == b""
    assert _stored(db) == 1
