"""`research/build_stage.py`: one build stage into the repository with its record, never from uncommitted code."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from research.demojudge.replay import sha256_of
from tests.conftest import load_bench

pytestmark = pytest.mark.research


@pytest.fixture(scope="module")
def build_stage():
    return load_bench("build_stage", folder="research")


def _git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_uncommitted_build_code_is_refused_in_one_line_and_committed_code_is_named(build_stage, tmp_path, monkeypatch):
    (tmp_path / "reflectrm").mkdir()
    (tmp_path / "reflectrm" / "x.py").write_text("A = 1\n")
    _git("init", "-q", cwd=tmp_path)
    _git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "x", "--allow-empty", cwd=tmp_path)
    _git("add", ".", cwd=tmp_path)
    _git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "code", cwd=tmp_path)
    monkeypatch.setattr(build_stage, "ROOT", tmp_path)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    assert build_stage.commit_of_code() == head
    (tmp_path / "notes.txt").write_text("not code")  # changes outside the build's code do not matter
    assert build_stage.commit_of_code() == head
    (tmp_path / "reflectrm" / "x.py").write_text("A = 2\n")
    with pytest.raises(SystemExit, match=r"uncommitted changes in reflectrm/, research/demojudge/ .*commit them first"):
        build_stage.commit_of_code()
    _git("checkout", "--", "reflectrm", cwd=tmp_path)
    (tmp_path / "research" / "demojudge").mkdir(parents=True)  # the build tools are the build's code too
    (tmp_path / "research" / "demojudge" / "steps_build.py").write_text("B = 1\n")
    with pytest.raises(SystemExit, match=r"\(first: \?\? research/"):
        build_stage.commit_of_code()


def test_a_tiny_stage_writes_its_weights_and_a_record_that_matches_them(build_stage, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(build_stage, "commit_of_code", lambda: "f" * 40)
    out = tmp_path / "stage1"
    monkeypatch.setattr(sys, "argv", ["build_stage.py", "--out", str(out), "--what", "a test", "--",
                                      "--steps", "1", "--pairs", "24", "--batch-size", "2", "--seed", "7"])
    assert build_stage.main() == 0
    record = json.loads((out / "record.json").read_text())
    assert record["sha256"] == sha256_of(out / "model.safetensors") and record["commit"] == "f" * 40
    assert record["seed"] == 7 and record["argv"][:2] == ["--steps", "1"] and record["seconds"] > 0
    assert record["command"].startswith(f"python -m research.demojudge.steps_build --out {out} --steps 1")
    assert record["precision"] in ("bf16 autocast over fp32 weights", "fp32") and record["cpu"]
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["sha256"] == record["sha256"]
    monkeypatch.setattr(sys, "argv", ["build_stage.py", "--out", str(out), "--", "--steps", "1"])
    with pytest.raises(SystemExit):  # a stage is written once
        build_stage.main()
    assert "exists" in capsys.readouterr().err


def test_a_build_the_tool_refuses_is_one_line_and_leaves_no_record(build_stage, tmp_path, monkeypatch):
    monkeypatch.setattr(build_stage, "commit_of_code", lambda: "f" * 40)
    out = tmp_path / "stage2"
    monkeypatch.setattr(sys, "argv", ["build_stage.py", "--out", str(out), "--init", str(tmp_path / "missing"),
                                      "--", "--steps", "1"])
    with pytest.raises(SystemExit, match=r"exited 2: no record written"):
        build_stage.main()
    assert not (out / "record.json").exists()
