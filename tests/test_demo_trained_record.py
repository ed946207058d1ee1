"""What a running-sum judge's build trained on is read from the record beside its card, not replayed every time.

`reflectrm.demo.heldout.trained_problems` replays every lesson of a build (seconds of pure Python for the shipped
judge's five stages) unless the judge's folder holds `TRAINED_FILE` written for the same training streams. Every
other file (none, another build's, a damaged one) falls back to the replay: slower, never a different answer.
And `reflectrm eval --benchmark demo` refuses a store it cannot use before it generates the benchmark.
"""

from __future__ import annotations

import gzip
import logging
from pathlib import Path

import pytest

import reflectrm.defaults
import reflectrm.demo
import reflectrm.demo.heldout as heldout
from reflectrm.demo import DEMO_MODEL_DIR, read_card
from reflectrm.demo.heldout import TRAINED_FILE, replay_trained_problems, streams_key, trained_problems, \
    write_trained_problems
from reflectrm_app.cli import main
from tests.hostile import assert_one_line_refusal, snapshot

PRIOR = {"build_args": {"pairs": 40, "seed": 5, "misread_frac": 0.0}}
CARD = {"domain": "running-sums", "build_args": {"pairs": 60, "seed": 6, "carry_drop": 0.7, "prior": PRIOR}}
OTHER = {"domain": "running-sums", "build_args": {"pairs": 60, "seed": 7}}


def no_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heldout, "lessons", lambda *a, **k: pytest.fail("the build's lessons were replayed"))


@pytest.mark.slow  # one replay of the shipped judge's five stages (about 14 s)
def test_the_shipped_record_is_read_and_equals_a_fresh_replay_of_the_shipped_card(monkeypatch):
    card = read_card(DEMO_MODEL_DIR)
    assert (DEMO_MODEL_DIR / TRAINED_FILE).is_file()  # shipped as package data beside the card
    replayed = replay_trained_problems(card)  # the slow way, once (about 14 s)
    no_replay(monkeypatch)
    assert trained_problems(card) == replayed and len(replayed) > 70_000


def test_a_build_writes_its_record_whole_and_the_same_bytes_every_time(tmp_path, monkeypatch):
    path = write_trained_problems(CARD, tmp_path)
    first = path.read_bytes()
    assert write_trained_problems(CARD, tmp_path).read_bytes() == first  # no time stamp, sorted lines
    assert sorted(p.name for p in tmp_path.iterdir()) == [TRAINED_FILE]  # no part file left
    expected = replay_trained_problems(CARD)
    no_replay(monkeypatch)
    assert trained_problems(CARD, folder=tmp_path) == expected


def _other_build(folder: Path) -> None:
    write_trained_problems(OTHER, folder)


def _garbage(folder: Path) -> None:
    (folder / TRAINED_FILE).write_bytes(b"not gzip at all")


def _truncated(folder: Path) -> None:
    write_trained_problems(CARD, folder)
    data = (folder / TRAINED_FILE).read_bytes()
    (folder / TRAINED_FILE).write_bytes(data[: len(data) // 2])


def _bad_line(folder: Path) -> None:
    text = f"{heldout.TRAINED_FORMAT} {streams_key(CARD)}\n12 +3 -4 +5\n12 *3 x\n"
    (folder / TRAINED_FILE).write_bytes(gzip.compress(text.encode()))


def _other_format(folder: Path) -> None:
    text = f"reflectrm-demo-trained-problems-v0 {streams_key(CARD)}\n12 +3 -4 +5\n"
    (folder / TRAINED_FILE).write_bytes(gzip.compress(text.encode()))


def _a_folder(folder: Path) -> None:
    (folder / TRAINED_FILE).mkdir()


@pytest.mark.parametrize(("make", "warns"), [
    pytest.param(lambda folder: None, False, id="no-record"),
    pytest.param(_other_build, False, id="another-builds-record"),
    pytest.param(_other_format, False, id="another-format"),
    pytest.param(_garbage, True, id="not-gzip"),
    pytest.param(_truncated, True, id="truncated"),
    pytest.param(_bad_line, True, id="a-line-not-a-problem"),
    pytest.param(_a_folder, True, id="a-folder-by-that-name"),
])
def test_any_other_record_falls_back_to_the_replay(make, warns, tmp_path, caplog):
    make(tmp_path)
    with caplog.at_level(logging.WARNING, logger=heldout.__name__):
        assert trained_problems(CARD, folder=tmp_path) == replay_trained_problems(CARD)
    assert bool(caplog.records) == warns
    assert not any("12 *3" in r.getMessage() or "12 +3" in r.getMessage() for r in caplog.records)  # no contents


def _stage(card: dict, **changes: object) -> dict:
    return {**card, "build_args": {**card["build_args"], **changes}}


@pytest.mark.parametrize(("other", "same"), [
    pytest.param({**CARD, "eval": {"accuracy": 0.9}, "what": "renamed"}, True, id="figures-and-words-ignored"),
    pytest.param(_stage(CARD, out="elsewhere", lr=0.5, steps=3), True, id="training-only-arguments-ignored"),
    pytest.param(_stage(CARD, misread_frac=0.0, ranges="narrow"), True, id="defaults-spelled-out"),
    pytest.param(_stage(CARD, pairs=61), False, id="pairs"),
    pytest.param(_stage(CARD, seed=1234), False, id="seed"),
    pytest.param(_stage(CARD, carry_drop=0.65), False, id="carry-drop"),
    pytest.param(_stage(CARD, misread_frac=0.5), False, id="misread-share"),
    pytest.param(_stage(CARD, ranges="wide"), False, id="ranges"),
    pytest.param(_stage(CARD, prior=None), False, id="no-prior-stage"),
    pytest.param(_stage(CARD, prior=_stage(PRIOR, seed=4)), False, id="prior-stage-seed"),
])
def test_the_record_is_keyed_by_the_training_streams_alone(other, same):
    assert (streams_key(other) == streams_key(CARD)) is same
    if same:  # the key's promise: the same streams, the same problems
        assert replay_trained_problems(other) == replay_trained_problems(CARD)


def test_held_out_pairs_read_the_record_in_the_demo_judge_s_folder(tmp_path, monkeypatch):
    write_trained_problems(CARD, tmp_path)
    expected = heldout.heldout_pairs(CARD, 30, seed=9, source="t")  # replayed: the shipped record is another's
    monkeypatch.setattr(reflectrm.defaults, "DEMO_MODEL_DIR", tmp_path)
    no_replay(monkeypatch)
    assert heldout.heldout_pairs(CARD, 30, seed=9, source="t") == expected


@pytest.mark.parametrize(("db", "expected"), [
    pytest.param("{w}/notdb.db", "not a SQLite database", id="not-a-database"),
    pytest.param(":memory:", "in-memory database", id="in-memory"),
    pytest.param("sqlite:///{w}/store.db?mode=ro", "cannot be written", id="read-only-url"),
    pytest.param("sqlite:///{w}/absent.db?mode=rw", "does not exist", id="absent-with-mode-rw"),
])
def test_eval_refuses_its_store_before_it_generates_the_demo_benchmark(db, expected, tmp_path, monkeypatch, capsys):
    (tmp_path / "notdb.db").write_text("a text file, not a store\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(reflectrm.demo, "demo_domain", lambda: pytest.fail("the benchmark was generated first"))
    before = snapshot(tmp_path)
    code = main(["eval", "--benchmark", "demo", "--db", db.replace("{w}", str(tmp_path))])
    assert_one_line_refusal(code, capsys.readouterr().err, expected)
    assert snapshot(tmp_path) == before  # nothing created, nothing changed
