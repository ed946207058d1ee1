"""`reflectrm reviewers ...` and `reflectrm round ...` through the in-process `main()`, on SQLite and PostgreSQL:
a round worked end to end (progress, agreement, adjudication, export), and every refusal one line with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from reflectrm_app.cli import main
from reflectrm_db.services import JudgmentStore
from tests.db.helpers import make_pairs


@pytest.fixture
def worked(db_url: str, judge_pairs) -> str:
    """A store with a round 'r' over four judgments, overlap 2: ana and ben agree on all but the first."""
    with JudgmentStore.open(db_url) as store:
        store.record(judge_pairs(make_pairs(4, prefix="cli")), swapped=False)
    for name, role in (("ana", "reviewer"), ("ben", "reviewer"), ("dee", "adjudicator")):
        assert main(["reviewers", "add", name, "--role", role, "--db", db_url]) == 0
    assert main(["round", "open", "r", "--overlap", "2", "--blind", "--db", db_url]) == 0
    with JudgmentStore.open(db_url) as store:
        for who in ("ana", "ben"):
            first = True
            while (j := store.take_round_item("r", reviewer=who)) is not None:
                store.answer_round_item("r", j, reviewer=who, verdict=2 if who == "ben" and first else 1,
                                        marks={0: "right"})
                first = False
    return db_url


def test_a_round_from_the_command_line(worked, tmp_path: Path, capsys):
    db = worked
    capsys.readouterr()
    assert main(["round", "progress", "r", "--json", "--db", db]) == 0
    progress = json.loads(capsys.readouterr().out)
    assert (progress["answered"], progress["agreed"], progress["disputed"]) == (8, 3, 1)
    assert main(["round", "adjudicate", "r", "--as", "dee", "--db", db]) == 0
    [line] = capsys.readouterr().out.splitlines()
    disputed = int(line.split()[1])
    assert main(["round", "adjudicate", "r", "--judgment", str(disputed), "--verdict", "2", "--as", "dee",
                 "--mark", "0=wrong", "--db", db]) == 0
    assert "decided by dee (2 answer(s) overruled)" in capsys.readouterr().out
    assert main(["round", "agreement", "r", "--json", "--db", db]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["reviewers"] == ["ana", "ben"] and len(report["items"]) == 4
    for fmt in ("jsonl", "parquet"):
        out = tmp_path / f"answers.{fmt}"
        assert main(["round", "export", "r", "--format", fmt, "--out", str(out), "--db", db]) == 0
        rows = ([json.loads(x) for x in out.read_text().splitlines()] if fmt == "jsonl"
                else pq.read_table(out).to_pylist())
        assert sorted((r["reviewer"], r["judgment_id"]) for r in rows) == sorted(
            (who, j) for who in ("ana", "ben") for j in {r["judgment_id"] for r in rows})
        assert {r["label_kind"] for r in rows} == {"agreed", "adjudicated"}


@pytest.mark.parametrize(("argv", "error"), [
    # each refusal is one line naming the problem and the fix, and changes nothing
    pytest.param(["round", "open", "r"], "round 'r' already exists: choose another name", id="name-taken"),
    pytest.param(["round", "open", "q", "--overlap", "0"], "overlap must be a whole number", id="overlap-zero"),
    pytest.param(["round", "open", "q", "--overlap", "1", "--reviewer", "zed"], "'zed' is not a reviewer in this store", id="unknown"),
    pytest.param(["round", "progress", "nope"], "round 'nope' does not exist", id="no-round"),
    pytest.param(["round", "adjudicate", "r", "--as", "ana"], "'ana' is reviewer, and only an adjudicator",
                 id="reviewer-adjudicates"),
    pytest.param(["round", "adjudicate", "r", "--judgment", "1", "--verdict", "1"], "deciding an item needs",
                 id="no-adjudicator"),
    pytest.param(["round", "adjudicate", "r", "--judgment", "1", "--verdict", "1", "--as", "dee", "--mark", "x"],
                 "--mark 'x' must be INDEX=right", id="bad-mark"),
    pytest.param(["round", "release", "r", "ana", "--to", "ben"], "--to hands one item on", id="to-without-item"),
    pytest.param(["reviewers", "add", " "], "a reviewer needs a name", id="blank-reviewer"),
    pytest.param(["reviewers", "add", "x", "--role", "boss"], "invalid choice: 'boss'", id="unknown-role"),
])
def test_refusals_are_one_line_and_exit_2(worked, argv, error, capsys):
    capsys.readouterr()
    with JudgmentStore.open(worked) as store:
        before = store.counts()
    try:
        code = main([*argv, "--db", worked])
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and error in err and len(err.strip().splitlines()) == 1, err
    with JudgmentStore.open(worked) as store:
        assert store.counts() == before
