"""The generic reader: formats, value-mapped labels, ties; and `reflectrm import` storing ties."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from reflectrm.errors import InputError
from reflectrm.files.labels import read_label
from reflectrm.files.readers import parse_mapping, read_pairs


@pytest.mark.parametrize(
    ("value", "scheme", "expected"),
    [
        pytest.param(1, "auto", (1, False), id="int-1"),
        pytest.param("2", "auto", (2, False), id="text-2"),
        pytest.param(2.0, "auto", (2, False), id="float-from-parquet"),
        pytest.param("A", "auto", (1, False), id="letter-A"),
        pytest.param(" b ", "auto", (2, False), id="letter-b-spaced"),
        pytest.param("A>B", "auto", (1, False), id="judgebench-A>B"),
        pytest.param("B>A", "auto", (2, False), id="judgebench-B>A"),
        pytest.param("model_a", "auto", (1, False), id="arena-model_a"),
        pytest.param("model_b", "auto", (2, False), id="arena-model_b"),
        pytest.param("tie (bothbad)", "auto", (None, True), id="arena-tie-bothbad"),
        pytest.param("TIE", "auto", (None, True), id="tie-upper"),
        pytest.param(0, "index0", (1, False), id="index0-0"),
        pytest.param(1, "index0", (2, False), id="index0-1-is-second"),  # trap: 1 means response_2 here
        pytest.param("1", "index0", (2, False), id="index0-text-1"),
        pytest.param(0, "012", (None, True), id="012-0-is-tie"),
        pytest.param(2, "012", (2, False), id="012-2"),
        pytest.param(-3, "score", (1, False), id="score-negative-prefers-1"),
        pytest.param(2, "score", (2, False), id="score-positive-prefers-2"),
        pytest.param(0, "score", (None, True), id="score-zero-tie"),
        pytest.param("", "auto", (None, False), id="empty-cell"),
        pytest.param(None, "auto", (None, False), id="missing"),
    ],
)
def test_label_values_map_to_a_side_or_a_tie(value, scheme, expected) -> None:
    assert read_label(value, scheme) == expected


@pytest.mark.parametrize(
    ("value", "scheme", "message"),
    [
        pytest.param(0, "auto", "ambiguous", id="zero-needs-a-scheme"),
        pytest.param(3, "auto", "label must be 1 or 2", id="three"),
        pytest.param("C", "auto", "label must be 1 or 2", id="unknown-letter"),
        pytest.param(True, "auto", "boolean", id="bool"),
        pytest.param(2, "index0", "not valid under --labels index0", id="index0-two"),
        pytest.param(1, "nope", "scheme 'nope' is unknown", id="bad-scheme"),
    ],
)
def test_bad_labels_say_what_is_accepted(value, scheme, message) -> None:
    with pytest.raises(InputError, match=message):
        read_label(value, scheme)


ROWS = [
    {"the question": "q1", "answer a": "x", "answer b": "y", "winner": "model_a", "uid": "r1"},
    {"the question": "q2", "answer a": "x", "answer b": "z", "winner": "tie", "uid": "r2"},
    {"the question": "q3", "answer a": "w", "answer b": "y", "winner": "B", "uid": "r3"},
]
MAPPING = "query=the question, response_1=answer a, response_2=answer b, label=winner, id=uid"


def _write(path: Path, rows: list[dict]) -> Path:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows), encoding="utf-8")
    elif path.suffix == ".csv":
        with path.open("w", encoding="utf-8-sig", newline="") as fh:  # Excel's byte-order mark
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    elif path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        import datasets

        datasets.Dataset.from_list(rows).save_to_disk(str(path))
    return path


@pytest.mark.parametrize("name", ["d.jsonl", "d.json", "d.csv", "d.parquet", "saved_dataset"])
def test_every_format_reads_mapped_columns_with_spaces_and_keeps_ties(tmp_path: Path, name: str) -> None:
    pairs = read_pairs(_write(tmp_path / name, ROWS), mapping=parse_mapping(MAPPING))
    assert [(p.id, p.query, p.label, p.tie) for p in pairs] == [
        ("r1", "q1", 1, False), ("r2", "q2", None, True), ("r3", "q3", 2, False)]
    assert pairs[1].swapped().tie  # a tie stays a tie in the other order


def test_a_datasets_dict_folder_takes_the_test_split_or_the_named_one(tmp_path: Path) -> None:
    import datasets

    folder = tmp_path / "dd"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS[:1]),
                          "test": datasets.Dataset.from_list(ROWS[1:])}).save_to_disk(str(folder))
    assert [p.id for p in read_pairs(folder, mapping=parse_mapping(MAPPING))] == ["r2", "r3"]
    assert [p.id for p in read_pairs(folder, mapping=parse_mapping(MAPPING), split="train")] == ["r1"]


def test_a_signed_score_column(tmp_path: Path) -> None:
    rows = [{"context": f"q{v}", "response1": "a", "response2": "b", "overall_preference": v} for v in (-2, 0, 3)]
    pairs = read_pairs(_write(tmp_path / "hs3.jsonl", rows), labels="score",
                       mapping=parse_mapping("query=context,response_1=response1,response_2=response2,"
                                             "label=overall_preference"))
    assert [(p.label, p.tie) for p in pairs] == [(1, False), (None, True), (2, False)]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        pytest.param("x.json", '{"query": "q"}', "array of objects", id="json-object-not-array"),
        pytest.param("x.json", "[1, 2]", "row 1: a row must be a JSON object", id="json-array-of-numbers"),
        pytest.param("x.json", "[{", "not valid JSON", id="json-broken"),
        pytest.param("x.txt", "hello", "unknown file type", id="unknown-suffix"),
    ],
)
def test_bad_files_are_named_with_the_fix(tmp_path: Path, name: str, content: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError, match=message):
        read_pairs(path)


def test_reflectrm_import_stores_ties_and_reads_them_back(tmp_path: Path, capsys) -> None:
    from reflectrm_app.cli import main
    from reflectrm_db.services import JudgmentStore

    data = _write(tmp_path / "arena.csv", ROWS)
    url = f"sqlite:///{tmp_path / 's.db'}"
    assert main(["import", str(data), "--map", MAPPING, "--db", url]) == 0
    with JudgmentStore.open(url) as store:
        stored = {p.pair.id: p.pair for p in store.list_pairs()}
    assert (stored["r2"].label, stored["r2"].tie) == (None, True)
    assert (stored["r1"].label, stored["r1"].tie) == (1, False)
    assert main(["import", str(data), "--map", MAPPING.replace("winner", "nope"), "--db", url]) == 2
    assert "no column 'nope'" in capsys.readouterr().err
