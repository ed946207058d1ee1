"""`reflectrm build-data` and `reflectrm train-status` through the real command (no model needed)."""

from __future__ import annotations

import json

import pytest

from reflectrm_app.cli import main
from reflectrm.training.runs import RunFiles
from tests.training.test_data import ALL_WRONG, EASY, MIXED, judged, pairs_for


def write_judgments(path, schedules):
    path.write_text("".join(json.dumps({"id": j.pair.id, **j.to_dict()}) + "\n" for j in judged(schedules)))


def test_build_data_from_judgments_writes_a_snapshot(tmp_path, capsys):
    write_judgments(tmp_path / "j.jsonl", [EASY] * 2 + [MIXED] * 8 + [ALL_WRONG] * 4)
    code = main(["build-data", "--judgments", str(tmp_path / "j.jsonl"), "--out", str(tmp_path / "data"),
                 "--name", "demo", "--mix", "4:1"])
    assert code == 0
    captured = capsys.readouterr()
    assert "mix 12:3 (4.00:1, target 4:1, subsample reflection): generated 12 preference (cut 0) + 3 reflection " \
           "(cut 5)" in captured.err
    out = json.loads(captured.out)
    assert out["rows"] == 15 and out["report"]["easy_dropped"] == 2 and out["report"]["reflection"] == 3
    # the mix as trained on and the named choices behind it, also as one line for a person
    assert out["mix"] == {"preference": 12, "reflection": 3, "ratio": "4.00:1", "target": "4:1",
                          "subsample": "reflection", "extra_in_mix": False, "unparseable_is_incorrect": False}
    assert (out["report"]["reflection_cut"], out["report"]["preference_cut"]) == (5, 0)
    assert out["snapshot"].endswith(f"demo-{out['content_hash'][:12]}")
    manifest = json.loads((tmp_path / "data" / f"demo-{out['content_hash'][:12]}" / "snapshot.json").read_text())
    assert manifest["config"]["mix"] == [4, 1] and manifest["rows"] == 15


def test_build_data_refuses_an_overlapping_eval_set(tmp_path, capsys):
    write_judgments(tmp_path / "j.jsonl", [MIXED] * 3)
    pair = pairs_for([MIXED] * 3)[1]
    (tmp_path / "eval.jsonl").write_text(json.dumps({"query": pair.query, "response_1": "a", "response_2": "b"}) + "\n")
    code = main(["build-data", "--judgments", str(tmp_path / "j.jsonl"), "--eval", str(tmp_path / "eval.jsonl"),
                 "--out", str(tmp_path / "data")])
    assert code == 2
    assert "share a conversation with the evaluation set" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()


def test_build_data_says_what_to_give(tmp_path, capsys):
    assert main(["build-data", "--out", str(tmp_path)]) == 2
    assert "give --pairs" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # read by the flag, so argparse refuses it before any work
        main(["build-data", "--judgments", str(tmp_path / "j.jsonl"), "--mix", "4/1"])
    assert exit_.value.code == 2
    assert "--mix must look like 4:1" in capsys.readouterr().err


def test_train_status_prints_progress(tmp_path, capsys):
    files = RunFiles(tmp_path)
    files.update_status(state="completed", step=3, total_steps=3)
    files.append(files.metrics, {"step": 3, "loss": 0.25, "reward": 0.5})
    assert main(["train-status", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith("completed: step 3/3 loss 0.2500 reward 0.500")
    assert main(["train-status", str(tmp_path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["state"] == "completed" and d["loss"] == [[3, 0.25]]
