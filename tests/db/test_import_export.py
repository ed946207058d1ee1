"""Import is all-or-nothing; exports load with `datasets` in TRL's format; hostile text survives."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from reflectrm_db.importing import parse_mapping, read_pair_file
from reflectrm_db.services import JudgmentStore
from reflectrm.core.prompts import reflection_prompt, response_prompt
from reflectrm.core.types import Judgment, PreferencePair, messages_to_dicts
from reflectrm.errors import InputError
from reflectrm.pipeline import judge
from tests.conftest import response_output
from tests.db.helpers import make_pairs, scripted_rollouts

ROWS = [
    {"question": "What is 2 + 2?", "a": "4", "b": "5", "pref": 1, "uid": "r1"},
    {"question": "Capital of France?", "a": "Lyon", "b": "Paris", "pref": 2, "uid": "r2"},
    {"question": "Say hi", "a": "hi", "b": "hello", "pref": None, "uid": "r3"},
]
MAPPING = "query=question,response_1=a,response_2=b,label=pref,id=uid"


def _write(path: Path, rows: list[dict]) -> Path:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    elif path.suffix == ".csv":
        with path.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows([{k: "" if v is None else v for k, v in r.items()} for r in rows])
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_import_maps_columns_from_every_format(store: JudgmentStore, tmp_path: Path, suffix: str) -> None:
    path = _write(tmp_path / f"data{suffix}", ROWS)
    report = store.import_pairs(path, mapping=parse_mapping(MAPPING))
    assert (report.added, report.already_present) == (3, 0)
    stored = [p.pair for p in store.list_pairs()]
    assert [(p.id, p.query, p.response_1, p.response_2, p.label, p.source) for p in stored] == [
        ("r1", "What is 2 + 2?", "4", "5", 1, "data"),
        ("r2", "Capital of France?", "Lyon", "Paris", 2, "data"),
        ("r3", "Say hi", "hi", "hello", None, "data"),
    ]
    again = store.import_pairs(path, mapping=parse_mapping(MAPPING), source="data")
    assert (again.added, again.already_present) == (0, 3)


@pytest.mark.parametrize(
    ("suffix", "bad_row", "message"),
    [
        # each trap sits in row 3, after two good rows that must not be written
        pytest.param(
            ".jsonl",
            {"question": "q", "a": "", "b": "x", "pref": 1, "uid": "x"},
            "response_1 is empty",
            id="jsonl-empty-response",
        ),
        pytest.param(
            ".csv",
            {"question": "q", "a": "a", "b": "b", "pref": 3, "uid": "x"},
            "label must be 1 or 2",
            id="csv-bad-label",
        ),
        pytest.param(
            ".parquet",
            {"question": None, "a": "a", "b": "b", "pref": 1, "uid": "x"},
            "query",
            id="parquet-missing-query",
        ),
        pytest.param(
            ".jsonl", {"question": "q", "a": "a", "b": "b", "pref": 1, "uid": "r1"}, "also row 1", id="duplicate-id"
        ),
    ],
)
def test_a_malformed_row_aborts_the_import_with_its_row_number_and_writes_nothing(
    store: JudgmentStore, tmp_path: Path, suffix: str, bad_row: dict, message: str
) -> None:
    path = _write(tmp_path / f"data{suffix}", [*ROWS[:2], bad_row, ROWS[2]])
    with pytest.raises(InputError, match=f"row 3: .*{message}"):
        store.import_pairs(path, mapping=parse_mapping(MAPPING))
    assert store.counts()["pairs"] == 0


def test_a_broken_jsonl_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"query": "q", "response_1": "a", "response_2": "b"}\n{"query": oops}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"row 2: not valid JSON"):
        read_pair_file(path)


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        pytest.param("query", "not FIELD=COLUMN", id="no-equals"),
        pytest.param("question=query", "field 'question' is unknown", id="unknown-field"),
        pytest.param("query=a,query=b", "twice", id="duplicate-field"),
    ],
)
def test_bad_mappings_are_refused(mapping: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_mapping(mapping)


def test_a_mapped_column_missing_from_the_file_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.jsonl", ROWS)
    with pytest.raises(InputError, match=r"row 1: no column 'prompt' \(from --map query=prompt\)"):
        read_pair_file(path, mapping=parse_mapping("query=prompt"))


def test_messages_column_as_json_text_in_csv(tmp_path: Path) -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi, there"}]
    path = _write(tmp_path / "m.csv", [{"messages": json.dumps(messages), "response_1": "a", "response_2": "b"}])
    [pair] = read_pair_file(path)
    assert messages_to_dicts(pair.conversation) == messages


def _add_corrections(store: JudgmentStore) -> JudgmentStore:
    """Two corrected judgments: 2 preference examples and 4 + 2 reflection pairs."""
    # eight samples cycle through four texts: repeated texts count once, so 2 x 2 distinct pairs
    outputs = [response_output(1, "x1"), response_output(2, "x2"), response_output(1, "x3"), response_output(2, "x4")]
    ids = store.record([judge(p, scripted_rollouts(outputs)) for p in make_pairs(2)], swapped=False)
    store.correct(ids[0], verdict=1, author="ana", seed=1)  # right {x1, x3} x wrong {x2, x4}: 4 pairs
    store.correct(ids[1], verdict=2, author="ana", seed=2, max_pairs=2)
    return store


@pytest.fixture
def corrected_store(store: JudgmentStore) -> JudgmentStore:
    """A store (on each backend) with two corrected judgments: 2 preference examples, 6 reflection pairs."""
    return _add_corrections(store)


def test_hf_export_loads_with_datasets_in_trl_conversational_format(
    corrected_store: JudgmentStore, tmp_path: Path
) -> None:
    from datasets import load_from_disk
    from trl.data_utils import is_conversational

    n = corrected_store.export("training", fmt="hf", out=tmp_path / "train")
    ds = load_from_disk(str(tmp_path / "train"))
    assert n == len(ds) == 2 + 6
    assert {"prompt", "label", "task"} <= set(ds.column_names)
    assert all(is_conversational(row) for row in ds)
    assert sorted(ds["task"]) == ["analysis"] * 6 + ["response"] * 2
    assert set(ds["label"]) <= {1, 2}
    stored = {s.pair.id: s.pair for s in corrected_store.list_pairs()}
    first = next(r for r in ds if r["task"] == "response" and r["label"] == 1)
    assert first["prompt"] == messages_to_dicts(response_prompt(stored["p-0"]))
    reflection = corrected_store.examples("reflection")[0]
    row = next(r for r in ds if r["task"] == "analysis" and r["example_id"] == reflection.id)
    judgment = corrected_store.load(reflection.judgment_id)
    analyses = {sid: r.analysis for sid, r in zip(judgment.sample_ids, judgment.judgment.rollouts)}
    expected = reflection_prompt(judgment.judgment.pair, *(analyses[c] for c in reflection.critiques))
    assert row["prompt"] == messages_to_dicts(expected)


@pytest.mark.parametrize("kind", ["preference-examples", "reflection-pairs"])
def test_hf_export_of_one_kind(corrected_store: JudgmentStore, tmp_path: Path, kind: str) -> None:
    from datasets import load_from_disk

    n = corrected_store.export(kind, fmt="hf", out=tmp_path / kind)
    ds = load_from_disk(str(tmp_path / kind))
    assert n == len(ds) == {"preference-examples": 2, "reflection-pairs": 6}[kind]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
@pytest.mark.parametrize(
    ("kind", "rows"),
    [
        ("pairs", 2),
        ("judgments", 2),
        ("corrections", 2),
        ("preference-examples", 2),
        ("reflection-pairs", 6),
        ("training", 8),
    ],
)
def test_every_kind_exports_as_jsonl_and_parquet(
    corrected_store: JudgmentStore, tmp_path: Path, kind: str, rows: int, fmt: str
) -> None:
    out = tmp_path / f"out.{fmt}"
    assert corrected_store.export(kind, fmt=fmt, out=out) == rows
    loaded = _read(out)
    assert len(loaded) == rows


def _read(path: Path) -> list[dict]:
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return pq.read_table(path).to_pylist()


def test_excluded_examples_leave_the_export_unless_asked_and_snapshots_export_frozen(
    corrected_store: JudgmentStore, tmp_path: Path
) -> None:
    snap = corrected_store.snapshot("all")
    first = corrected_store.examples("reflection")[0].id
    corrected_store.exclude_examples("reflection", [first])
    assert corrected_store.export("reflection-pairs", fmt="jsonl", out=tmp_path / "a.jsonl") == 5
    everything = (
        _read(tmp_path / "b.jsonl")
        if corrected_store.export("reflection-pairs", fmt="jsonl", out=tmp_path / "b.jsonl", include_inactive=True)
        else []
    )
    assert {r["state"] for r in everything} == {"active", "excluded"} and len(everything) == 6
    assert corrected_store.export("training", fmt="jsonl", out=tmp_path / "s.jsonl", snapshot=snap.name) == 8


def test_export_refuses_to_overwrite_and_unknown_kinds(corrected_store: JudgmentStore, tmp_path: Path) -> None:
    out = tmp_path / "x.jsonl"
    out.write_text("keep me")
    with pytest.raises(InputError, match="already exists"):
        corrected_store.export("pairs", fmt="jsonl", out=out)
    assert out.read_text() == "keep me"
    with pytest.raises(InputError, match="export kind 'nope' is unknown"):
        corrected_store.export("nope", fmt="jsonl", out=tmp_path / "y.jsonl")
    with pytest.raises(InputError, match="hf format holds training prompts"):
        corrected_store.export("judgments", fmt="hf", out=tmp_path / "z")
    with pytest.raises(InputError, match="snapshot 'none' does not exist"):
        corrected_store.export("training", fmt="jsonl", out=tmp_path / "w.jsonl", snapshot="none")
    assert not (tmp_path / "w.jsonl").exists()


# --- hostile text --------------------------------------------------------------------------------------

PLANES = "".join(chr(plane * 0x10000 + 0x100) for plane in range(17)) + "\U0010fffd"
HOSTILE = [
    pytest.param("nul\x00in\x00the middle\x00", id="nul-bytes"),
    pytest.param(PLANES, id="every-unicode-plane"),
    pytest.param("<script>alert('x')</script><img src=x onerror=alert(1)>", id="script-tags"),
    # controls, BOM, line/paragraph separators, bidi override, noncharacters, CRLF, our own escape marker
    pytest.param("\ufeff\u2028\u2029\u202e\ufffe\uffff\r\n\t\x1b[31m\x7f", id="controls-and-specials"),
    pytest.param('\ufdd0json:"looks escaped"', id="escape-marker-prefix"),
]


def _hostile_pair(text: str, *, big: bool) -> PreferencePair:
    response = ("x" * 1_000_000 + text) if big else f"one {text}"
    return PreferencePair.from_query(
        f"query {text}", response, f"two {text}", label=2, id=f"id-{text}", source=f"s{text}"
    )


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_text_round_trips_through_store_export_and_import(
    store: JudgmentStore, tmp_path: Path, text: str
) -> None:
    pair = _hostile_pair(text, big=True)
    outputs = [response_output(1 + k % 2, f"{text} a{k}") for k in range(4)]
    judgment = judge(pair, scripted_rollouts(outputs))
    [jid] = store.record([judgment], swapped=False)
    assert store.load(jid).judgment == judgment  # store: exact, NUL and 1 MB included
    store.correct(jid, verdict=2, author=f"ana {text}", note=text, seed=1)
    # export -> file -> Judgment again
    store.export("judgments", fmt="jsonl", out=tmp_path / "j.jsonl")
    [line] = (tmp_path / "j.jsonl").read_text(encoding="utf-8").splitlines()
    assert Judgment.from_dict(json.loads(line)) == judgment
    [row] = pq.read_table(_export(store, "judgments", "parquet", tmp_path)).to_pylist()
    assert row["pair"]["response_1"] == pair.response_1 and row["rollouts"][0]["text"] == judgment.rollouts[0].text
    [note] = _read(_export(store, "corrections", "jsonl", tmp_path))
    assert (note["note"], note["author"]) == (text, f"ana {text}")
    # export -> import into a new store -> equal pairs
    for fmt in ("jsonl", "parquet"):
        exported = _export(store, "preference-examples", fmt, tmp_path)
        [back] = read_pair_file(exported)
        assert back == pair
        assert back.response_1.encode("utf-8") == pair.response_1.encode("utf-8")
    from datasets import load_from_disk

    ds = load_from_disk(str(_export(store, "training", "hf", tmp_path)))
    assert any(text in m["content"] for row in ds for m in row["prompt"])


def _export(store: JudgmentStore, kind: str, fmt: str, tmp_path: Path) -> Path:
    out = tmp_path / f"{kind}.{fmt}"
    if out.exists():
        return out
    store.export(kind, fmt=fmt, out=out)
    return out


def test_hostile_pairs_imported_from_a_file_round_trip(store: JudgmentStore, tmp_path: Path) -> None:
    pairs = [_hostile_pair(p.values[0], big=False) for p in HOSTILE]
    path = tmp_path / "hostile.jsonl"
    path.write_text("".join(json.dumps(p.to_dict(), ensure_ascii=False) + "\n" for p in pairs), encoding="utf-8")
    store.import_pairs(path)
    assert [p.pair for p in store.list_pairs()] == pairs
    store.export("pairs", fmt="parquet", out=tmp_path / "p.parquet")
    assert read_pair_file(tmp_path / "p.parquet") == pairs


def test_a_lone_surrogate_is_stored_losslessly_and_survives_jsonl(store: JudgmentStore, tmp_path: Path) -> None:
    # Not Unicode (UTF-8 cannot encode it) but a Python string can hold one, and model output is data.
    pair = PreferencePair.from_query("half an emoji: \ud83d", "a\ud800b", "ok", id="surrogate", source="model")
    store.add_pairs([pair])
    assert [p.pair for p in store.list_pairs()] == [pair]
    store.export("pairs", fmt="jsonl", out=tmp_path / "s.jsonl")
    assert read_pair_file(tmp_path / "s.jsonl") == [pair]
    with pytest.raises(InputError, match="lone surrogate"):
        store.export("pairs", fmt="parquet", out=tmp_path / "s.parquet")
    assert not (tmp_path / "s.parquet").exists()


def test_hostile_text_is_stored_as_is_in_sqlite_unless_it_must_be_escaped(sqlite_url: str) -> None:
    # The escape is only for what the database cannot hold: plain SQL still reads ordinary text.
    import sqlite3

    with JudgmentStore.open(sqlite_url) as store:
        store.add_pairs([PreferencePair.from_query("<script>é\U0001f600", "nul\x00", "plain", id="x")])
    con = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))
    response_1, response_2 = con.execute("SELECT response_1, response_2 FROM pairs").fetchone()
    con.close()
    assert response_2 == "plain" and response_1 == '\ufdd0json:"nul\\u0000"'


def test_preference_examples_parquet_carries_pair_ids_labels_and_states(
    corrected_store: JudgmentStore, tmp_path: Path
) -> None:
    corrected_store.export("preference-examples", fmt="parquet", out=tmp_path / "p.parquet")
    rows = pq.read_table(tmp_path / "p.parquet").to_pylist()
    assert [(r["id"], r["label"], r["state"]) for r in rows] == [("p-0", 1, "active"), ("p-1", 2, "active")]


@pytest.mark.slow
def test_the_hf_export_trains_a_grpo_step_without_conversion(sqlite_url: str, tmp_path: Path) -> None:
    from datasets import load_from_disk

    from reflectrm.core.parsing import parse_output
    from reflectrm.core.prompts import Task
    from reflectrm.demo import DEMO_MODEL_DIR

    if not (DEMO_MODEL_DIR / "config.json").is_file():
        pytest.skip("the demo judge is not built: python -m research.demojudge.build")
    from trl import GRPOConfig, GRPOTrainer

    with JudgmentStore.open(sqlite_url) as store:  # the export is the same on either database
        _add_corrections(store).export("training", fmt="hf", out=tmp_path / "train")
    seen: list[tuple[int, str]] = []

    def reward(prompts: list, completions: list, label: list[int], task: list[str], **_: object) -> list[float]:
        seen.extend(zip(label, task))
        choices = [parse_output(c[0]["content"], task=Task(t)).choice for c, t in zip(completions, task)]
        return [float(c == y) for c, y in zip(choices, label)]

    args = GRPOConfig(
        output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=2, num_generations=2,
        max_completion_length=8, use_cpu=True, bf16=False, report_to="none", save_strategy="no",
    )  # fmt: skip
    trainer = GRPOTrainer(model=str(DEMO_MODEL_DIR), reward_funcs=[reward], args=args,
                          train_dataset=load_from_disk(str(tmp_path / "train")))  # fmt: skip
    trainer.train()
    assert seen and all(y in (1, 2) and t in ("response", "analysis") for y, t in seen)


def test_training_rows_are_read_by_the_training_data_builder(corrected_store: JudgmentStore, tmp_path: Path) -> None:
    from reflectrm.training.data import read_examples

    corrected_store.export("training", fmt="hf", out=tmp_path / "train")
    corrected_store.export("training", fmt="jsonl", out=tmp_path / "train.jsonl")
    from_hf, from_jsonl = read_examples(tmp_path / "train"), read_examples(tmp_path / "train.jsonl")
    assert from_hf == from_jsonl and len(from_hf) == 8
    assert {e.origin for e in from_hf} == {"correction"}
    assert {e.pair_id for e in from_hf} == {"p-0", "p-1"}
