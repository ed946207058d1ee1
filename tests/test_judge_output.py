"""`reflectrm judge --input --output [--db]`: the output file and the store agree after any failure.

The judge is the scripted backend (the real pipeline over a deterministic fake model), so each test
runs in well under a second; tests/test_cli.py runs the same paths on the demo judge.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

import reflectrm.backends
from reflectrm_app.commands import judge
import reflectrm.files.outputs
from reflectrm_app.cli import main
from reflectrm_db.services import JudgmentStore
from reflectrm.backends import ScriptedBackend
from tests.db.helpers import scripted_output

PAIRS = [{"id": f"p{k}", "query": f"What is {k} + 1?", "response_1": str(k + 1), "response_2": str(k + 2), "label": 1}
         for k in range(4)]


@pytest.fixture(autouse=True)
def scripted_judge(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reflectrm.backends, "load_backend", lambda *a, **k: ScriptedBackend(scripted_output))


@pytest.fixture
def pairs(tmp_path: Path) -> Path:
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    return path


def _stable(path: Path) -> list[dict]:
    """The file's judgments without their timings (the only field a rerun does not reproduce)."""
    return [{k: v for k, v in json.loads(line).items() if k != "timings"} for line in path.read_text().splitlines()]


def _ids(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text().splitlines()]


@pytest.mark.parametrize("swap", [pytest.param(False, id="one-order"), pytest.param(True, id="both-orders")])
def test_a_failure_between_storing_and_writing_never_duplicates_on_rerun(
    pairs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], swap: bool
) -> None:
    out, db = tmp_path / "out.jsonl", tmp_path / "store.db"
    argv = ["judge", "--input", str(pairs), "--output", str(out), "--db", str(db), *(["--swap"] if swap else [])]
    real_line, calls = reflectrm.files.outputs.json_line, []

    def disk_full_on_the_third(obj: dict) -> bytes:
        calls.append(obj["id"])
        if len(calls) == 3:  # the third pair is stored, then its line cannot be written
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_line(obj)

    monkeypatch.setattr(reflectrm.files.outputs, "json_line", disk_full_on_the_third)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err
    assert _ids(out) == ["p0", "p1"]
    monkeypatch.setattr(reflectrm.files.outputs, "json_line", real_line)
    assert main(argv) == 0
    assert _ids(out) == ["p0", "p1", "p2", "p3"]
    with JudgmentStore.open(str(db)) as store:
        counts = store.counts()
        stored = store.load_many(list(range(1, counts["judgments"] + 1)))
    assert counts["judgments"] == len(PAIRS) * (2 if swap else 1)  # p2 once, though it was judged twice
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    originals = [s.judgment for s in stored if not s.swapped]
    assert [j.pair.id for j in originals] == [x["id"] for x in lines]
    assert [j.verdict for j in originals] == [x["verdict"] for x in lines]  # the file and the store agree


def test_a_torn_last_line_is_cut_and_its_pair_judged_again(pairs: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    assert main(["judge", "--input", str(pairs), "--output", str(out)]) == 0
    whole, expected = out.read_text().splitlines(), _stable(out)
    out.write_text(whole[0] + "\n" + whole[1] + "\n" + whole[2][:50])  # killed in the middle of the third
    assert main(["judge", "--input", str(pairs), "--output", str(out)]) == 0
    assert out.read_text().splitlines()[:2] == whole[:2]
    assert _stable(out) == expected


def test_a_whole_last_line_without_its_newline_is_kept(pairs: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    assert main(["judge", "--input", str(pairs), "--output", str(out)]) == 0
    whole, expected = out.read_text().splitlines(), _stable(out)
    out.write_text("\n".join(whole[:2]))  # an editor dropped the final newline
    assert main(["judge", "--input", str(pairs), "--output", str(out)]) == 0
    assert out.read_text().splitlines()[:2] == whole[:2]
    assert _stable(out) == expected


@pytest.mark.parametrize(
    "tail",
    [
        pytest.param("my notes\n", id="a-text-line-after-judgments"),
        pytest.param("my notes", id="a-text-last-line-without-newline"),  # must not be cut as a torn judgment
        pytest.param('{"id": "x"}\n', id="an-object-that-is-not-a-judgment"),
    ],
)
def test_a_file_that_is_not_all_judgments_is_refused_and_left_as_it_was(
    pairs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], tail: str
) -> None:
    out = tmp_path / "out.jsonl"
    assert main(["judge", "--input", str(pairs), "--output", str(out)]) == 0
    out.write_text(out.read_text().splitlines()[0] + "\n" + tail)
    before = out.read_bytes()
    assert main(["judge", "--input", str(pairs), "--output", str(out)]) == 2
    assert "not a judgment line" in capsys.readouterr().err
    assert out.read_bytes() == before


def test_a_rerun_with_other_options_is_refused(pairs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.jsonl"
    assert main(["judge", "--input", str(pairs), "--output", str(out), "--seed", "1"]) == 0
    before = out.read_bytes()
    assert main(["judge", "--input", str(pairs), "--output", str(out), "--seed", "2"]) == 2
    assert "judged with seed=1, this run has seed=2" in capsys.readouterr().err
    assert main(["judge", "--input", str(pairs), "--output", str(out), "--seed", "1", "--swap"]) == 2
    assert "without --swap" in capsys.readouterr().err
    assert out.read_bytes() == before


def test_a_lone_surrogate_from_a_stored_pair_is_written_as_an_escape(tmp_path: Path) -> None:
    from reflectrm.files.outputs import json_line

    line = json_line({"id": "p", "text": "a\ud800b"})
    assert json.loads(line) == {"id": "p", "text": "a\ud800b"}
    line.decode("utf-8")  # valid UTF-8: the rerun can read it back


def test_an_input_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + (json.dumps(PAIRS[0]) + "\n").encode())
    assert [p.id for p in judge.read_pairs(path)] == ["p0"]
