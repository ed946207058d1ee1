"""Any labelled file, imported as it is: value maps, several annotators, ties, skipped rows, round trips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reflectrm_app.cli import main
from reflectrm_db.services import JudgmentStore
from reflectrm.core.types import PreferencePair
from reflectrm.errors import InputError
from reflectrm.files.labels import read_label
from reflectrm.files.readers import majority, read_pairs


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


AUTO_J = [{"prompt": f"What is {k} + 1?", "a": f"{k + 1}", "b": f"{k + 2}", "winner": w}
          for k, w in enumerate([0, 1, 2, 0, 2])]  # Auto-J: 0 = the first is better, 1 = the second, 2 = a tie
AUTO_J_MAP = "query=prompt,response_1=a,response_2=b,label=winner"


# each case: a value, the scheme, and what it must read as; the traps are values the named schemes misread
@pytest.mark.parametrize(
    ("value", "scheme", "expected"),
    [
        pytest.param(0, "0=1,1=2,2=tie", (1, False), id="auto-j-0-first"),
        pytest.param(1, "0=1,1=2,2=tie", (2, False), id="auto-j-1-second"),  # trap: --labels 012 read 1 as first
        pytest.param(2, "0=1,1=2,2=tie", (None, True), id="auto-j-2-tie"),  # trap: --labels 012 read 2 as second
        pytest.param("2", "0=1,1=2,2=tie", (None, True), id="a-string-cell"),  # CSV cells are text
        pytest.param(2.0, "0=1,1=2,2=tie", (None, True), id="a-float-cell"),  # pandas widens int columns with NaN
        pytest.param("", "0=1,1=2,2=tie", (None, False), id="an-empty-cell-is-unlabelled"),
        pytest.param("Win", "win=1,lose=2,draw=tie,skip=none", (1, False), id="words-any-case"),
        pytest.param("skip", "win=1,lose=2,draw=tie,skip=none", (None, False), id="a-value-meaning-none"),
    ],
)
def test_a_value_map_reads_each_value_as_stated(value, scheme: str, expected) -> None:
    assert read_label(value, scheme) == expected


@pytest.mark.parametrize(
    ("value", "scheme", "message"),
    [
        pytest.param(3, "0=1,1=2,2=tie", "not in --labels 0=1,1=2,2=tie", id="a-value-the-map-lacks"),
        pytest.param("A", "0=1,1=2,2=tie", "not in --labels", id="a-side-name-is-not-guessed-under-a-map"),
        pytest.param(1, "0=1,1=first,0=2", "names the value '0' twice", id="a-value-given-twice"),
        pytest.param(1, "0=left", "not VALUE=MEANING", id="an-unknown-meaning"),
        # trap: the old message suggested --labels index0 (refuses 2) and --labels 012 (imports every label wrong)
        pytest.param(0, "auto", "--labels 0=1,1=2,2=tie", id="zero-suggests-a-value-map"),
    ],
)
def test_a_bad_value_or_map_says_how_to_fix_it(value, scheme: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as info:
        read_label(value, scheme)
    assert "index0" not in str(info.value) and "--labels 012" not in str(info.value)


# annotators' (label, tie) votes; the trap in each: a split must be a tie, never the first side by default
@pytest.mark.parametrize(
    ("votes", "expected"),
    [
        pytest.param([(1, False), (1, False), (2, False)], (1, False), id="two-of-three-first"),
        pytest.param([(2, False), (None, True), (2, False)], (2, False), id="two-of-three-second-over-a-tie"),
        pytest.param([(1, False), (2, False), (None, True)], (None, True), id="a-three-way-split-is-a-tie"),
        pytest.param([(1, False), (2, False), (None, False)], (None, True), id="one-each-and-an-empty-cell"),
        pytest.param([(None, True), (None, True), (1, False)], (None, True), id="most-say-tie"),
        pytest.param([(None, False)] * 3, (None, False), id="nobody-labelled"),
    ],
)
def test_several_annotators_take_the_majority_and_a_split_is_a_tie(votes, expected) -> None:
    assert majority(votes) == expected


def test_a_pandalm_style_file_joins_instruction_and_input_and_takes_the_annotators_majority(tmp_path: Path) -> None:
    rows = [{"idx": 0, "instruction": "Translate", "input": "bonjour", "output_1": "hello", "output_2": "bye",
             "annotator1": 1, "annotator2": 1, "annotator3": 2},
            {"idx": 1, "instruction": "Say hi", "input": "", "output_1": "hi", "output_2": "hello",
             "annotator1": 0, "annotator2": 1, "annotator3": 2}]
    path = _jsonl(tmp_path / "pandalm.jsonl", rows)
    mapping = {"id": "idx", "query": "instruction+input", "response_1": "output_1", "response_2": "output_2",
               "label": "annotator1+annotator2+annotator3"}
    pairs = read_pairs(path, labels="012", mapping=mapping)
    assert [p.query for p in pairs] == ["Translate\n\nbonjour", "Say hi"]  # an empty input adds nothing
    assert [(p.id, p.label, p.tie) for p in pairs] == [("0", 1, False), ("1", None, True)]


def test_an_auto_j_file_imports_with_its_ties_by_one_command_and_prints_counts_per_label(
        sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _jsonl(tmp_path / "autoj.jsonl", AUTO_J)
    assert main(["import", str(path), "--map", AUTO_J_MAP, "--labels", "0=1,1=2,2=tie", "--db", sqlite_url]) == 0
    out = capsys.readouterr().out
    assert "imported 5 new pair(s)" in out and "labels: first 2, second 1, tie 2, none 0" in out
    with JudgmentStore.open(sqlite_url) as store:
        stored = sorted((p.response_1, p.label, p.tie) for p in store.pairs_by_id(store.pair_ids("autoj")))
    assert stored == [("1", 1, False), ("2", 2, False), ("3", None, True), ("4", 1, False), ("5", None, True)]


def test_tie_true_is_honoured_and_ties_survive_an_export_import_round_trip(
        sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{"id": 0, "query": "q1", "response_1": "a", "response_2": "b", "tie": True},  # trap: id 0 is an id
            {"id": "x", "query": "q2", "response_1": "a", "response_2": "b", "label": 2}]
    assert main(["import", str(_jsonl(tmp_path / "t.jsonl", rows)), "--db", sqlite_url]) == 0
    assert "labels: first 0, second 1, tie 1, none 0" in capsys.readouterr().out
    for fmt in ("jsonl", "parquet"):
        out = tmp_path / f"pairs.{fmt}"
        assert main(["export", "pairs", "--format", fmt, "--out", str(out), "--db", sqlite_url]) == 0
        again = sorted((p.id, p.query, p.label, p.tie) for p in read_pairs(out))
        assert again == [("0", "q1", None, True), ("x", "q2", 2, False)], fmt
        second = f"sqlite:///{tmp_path / f'again-{fmt}.db'}"
        assert main(["import", str(out), "--db", second]) == 0
        assert "labels: first 0, second 1, tie 1, none 0" in capsys.readouterr().out


def test_a_tie_pair_keeps_its_tie_in_the_judgment_parquet(sqlite_url: str, tmp_path: Path, judge_pairs) -> None:
    import pyarrow.parquet as pq

    pair = PreferencePair.from_query("q", "a", "b", id="t", tie=True)
    with JudgmentStore.open(sqlite_url) as store:
        store.record(judge_pairs([pair], strategy="greedy"), swapped=False)
        store.export("judgments", fmt="parquet", out=tmp_path / "j.parquet")
    (row,) = pq.read_table(tmp_path / "j.parquet").to_pylist()
    assert row["pair"]["tie"] is True and row["pair"]["label"] is None


def test_skip_invalid_reports_each_skipped_row_and_the_default_stays_strict(
        sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{"query": f"q{k}", "response_1": "a", "response_2": "b", "label": 1} for k in range(5)]
    rows[2]["response_2"] = ""  # one bad row must not block the good ones
    path = _jsonl(tmp_path / "one-bad.jsonl", rows)
    with path.open("a") as fh:
        fh.write("{not json\n")  # row 6
    assert main(["import", str(path), "--db", sqlite_url]) == 2
    assert "row 3: response_2 is empty" in capsys.readouterr().err
    assert main(["import", str(path), "--skip-invalid", "--db", sqlite_url]) == 0
    captured = capsys.readouterr()
    assert "imported 4 new pair(s)" in captured.out and "2 invalid row(s) skipped" in captured.out
    assert "skipped row 3: response_2 is empty" in captured.err and "skipped row 6: not valid JSON" in captured.err


@pytest.mark.parametrize(
    ("content", "args"),
    [
        pytest.param('{"query": "q", "response_1": "a", "response_2": ""}\n', [], id="a-bad-row"),
        pytest.param('{"query": "q", "response_1": "a", "response_2": "b", "label": 0}\n', [], id="an-ambiguous-label"),
        pytest.param('{"query": "q", "response_1": "a", "response_2": "b"}\n', ["--labels", "0=left"], id="a-bad-map"),
    ],
)
def test_a_failed_import_leaves_no_new_store_file(tmp_path: Path, content: str, args: list[str]) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    db = tmp_path / "new.db"
    assert main(["import", str(path), *args, "--db", f"sqlite:///{db}"]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]  # no new.db, -wal or -shm
