"""`reflectrm eval` and `reflectrm compare` from the command line, on the real demo judge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reflectrm_app.cli import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--benchmark", "judgebench"], "pass --data", id="local-benchmark-without-data"),
        pytest.param(["--benchmark", "demo", "--subset", "div"], "no subset 'div'", id="unknown-subset"),
        pytest.param(["--benchmark", "file"], "needs --data", id="file-without-data"),
        pytest.param(["--benchmark", "demo", "--strategies", "best"], "strategy 'best' is unknown", id="bad-strategy"),
    ],
)
def test_bad_requests_fail_with_one_line_before_a_model_loads(tmp_path: Path, capsys, argv, message) -> None:
    assert main(["eval", *argv, "--db", str(tmp_path / "e.db")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_eval_writes_reports_and_compare_tests_two_runs(tmp_path: Path, capsys) -> None:
    data = tmp_path / "arena.json"
    rows = [{"prompt": f"What is {a} + {b}?", "A": str(a + b), "B": str(a + b + 1), "winner": w}
            for a, b, w in [(12, 7, "model_a"), (30, 4, "model_a"), (5, 9, "tie")]]
    rows.append({"prompt": "What is 8 + 8?", "A": "17", "B": "16", "winner": "model_b"})
    data.write_text(json.dumps(rows), encoding="utf-8")
    db = str(tmp_path / "e.db")
    mapping = "query=prompt,response_1=A,response_2=B,label=winner"
    common = ["eval", "--benchmark", "file", "--data", str(data), "--map", mapping, "--strategies", "greedy", "--max-new-tokens", "96", "--device", "cpu", "--db", db]
    assert main([*common, "--out", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert report["ties"] == 1 and report["strategies"]["greedy"]["accuracy"]["n"] == 3
    assert (tmp_path / "out" / "accuracy_vs_tokens.svg").read_text(encoding="utf-8").startswith("<svg")
    assert main([*common, "--seed", "1"]) == 0
    capsys.readouterr()
    assert main(["compare", "1", "2", "--json", "--db", db]) == 0
    overall = json.loads(capsys.readouterr().out)["strategies"]["greedy"]["overall"]
    assert overall["n"] == 3 and 0 <= overall["mcnemar_p"] <= 1
    assert main(["eval", *common[1:]]) == 0  # the same command again: resumed, nothing left to judge
    assert "evaluation run 1: completed (4/4 pair-orders)" in capsys.readouterr().out
