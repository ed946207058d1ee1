"""`research/compare_stages.py`: two stages' verdicts compared on the pairs both judged, refusing what is not a bench's."""

from __future__ import annotations

import json
import sys

import pytest

from tests.conftest import load_bench

pytestmark = pytest.mark.research


@pytest.fixture(scope="module")
def compare():
    return load_bench("compare_stages", folder="research")


def _judgments(path, rights: dict[str, bool]):
    path.write_text("".join(json.dumps({"pair": {"id": i}, "correct": r}) + "\n" for i, r in rights.items()))
    return path


def test_only_the_shared_pairs_are_compared_paired(compare, tmp_path, monkeypatch, capsys):
    a = _judgments(tmp_path / "a.jsonl", {f"p{i}": i % 2 == 0 for i in range(40)} | {"only-a": True})
    b = _judgments(tmp_path / "b.jsonl", {f"p{i}": True for i in range(40)} | {"only-b": False})
    monkeypatch.setattr(sys, "argv", ["compare_stages.py", str(a), str(b)])
    assert compare.main() == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["pairs"] == 40 and last["only_b"] == 20 and last["only_a"] == 0
    assert last["difference"]["value"] == pytest.approx(0.5) and last["difference"]["low"] > 0


@pytest.mark.parametrize("text, want", [
    pytest.param("not json\n", "line 1: not a judgment record", id="not-json"),
    pytest.param('{"pair": {}}\n', "line 1: not a judgment record", id="no-id"),
    pytest.param('[1, 2]\n', "line 1: not a judgment record", id="a-list"),
    pytest.param(None, "No such file", id="missing"),
])
def test_what_is_not_a_bench_file_is_one_line(compare, tmp_path, monkeypatch, text, want):
    bad = tmp_path / "bad.jsonl"
    if text is not None:
        bad.write_text(text)
    good = _judgments(tmp_path / "good.jsonl", {"p": True})
    monkeypatch.setattr(sys, "argv", ["compare_stages.py", str(bad), str(good)])
    with pytest.raises(SystemExit, match=want):
        compare.main()


def test_files_without_a_shared_pair_are_refused(compare, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["compare_stages.py", str(_judgments(tmp_path / "a.jsonl", {"x": True})),
                                      str(_judgments(tmp_path / "b.jsonl", {"y": True}))])
    with pytest.raises(SystemExit, match="share no pair"):
        compare.main()
