"""A stopped `eval` says so: its report opens with "Incomplete: stopped by the user, n of N pair-orders judged",
report.json carries an `incomplete` field, the command exits 130 (never 0 like a finished run), and the app's
report and comparison of that run say the same. Real parts: the demo judge, a real SQLite store, `reflectrm
eval` through its in-process `main()`, and a real Ctrl-C or SIGTERM sent as the first batch is stored."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from reflectrm_app.cli import main

pytestmark = pytest.mark.slow

PAIRS = 6


def _pairs_file(tmp_path: Path) -> Path:
    rows = [{"id": k, "query": f"What is {k} + 5?", "response_1": str(k + 5), "response_2": str(k + 6), "label": 1}
            for k in range(PAIRS)]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _eval(tmp_path: Path, out: str = "out") -> list[str]:
    return ["eval", "--benchmark", "file", "--data", str(_pairs_file(tmp_path)), "--strategies", "greedy",
            "--max-new-tokens", "64", "--device", "cpu", "--batch-size", "2", "--db", str(tmp_path / "e.db"),
            "--out", str(tmp_path / out)]


def _after_first_batch(monkeypatch, act) -> None:  # noqa: ANN001
    from reflectrm_db.evaluation import EvalStore

    original, calls = EvalStore.add_batch, []

    def add_batch(self, run_id, batch):  # noqa: ANN001, ANN202
        original(self, run_id, batch)
        calls.append(run_id)
        if len(calls) == 1:
            act()

    monkeypatch.setattr(EvalStore, "add_batch", add_batch)


# How the run is stopped after its first batch of 2 pairs, and what every reader must then see. The trap: a report
# of 2 pairs written and read as the benchmark's score, and an exit status of 0.
STOPS = [
    pytest.param(lambda: os.kill(os.getpid(), signal.SIGINT), 130, {"status": "stopped", "judged": 2},
                 id="ctrl-c"),
    pytest.param(lambda: os.kill(os.getpid(), signal.SIGTERM), 130, {"status": "stopped", "judged": 2},
                 id="sigterm"),
    pytest.param(lambda: None, 0, None, id="not-stopped"),
]


@pytest.mark.parametrize(("act", "code", "incomplete"), STOPS)
def test_a_stopped_eval_writes_a_report_that_says_it_is_incomplete(tmp_path, capsys, monkeypatch, act, code,
                                                                    incomplete):
    _after_first_batch(monkeypatch, act)
    previous = signal.getsignal(signal.SIGINT)
    got = main(_eval(tmp_path))
    out, err = capsys.readouterr()
    assert got == code, err
    assert signal.getsignal(signal.SIGINT) == previous  # the command put Ctrl-C back as it found it
    assert "Traceback" not in err
    report = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    md = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    if incomplete is None:
        assert report["incomplete"] is None and "Incomplete" not in md and "Incomplete" not in out
        return
    assert {k: report["incomplete"][k] for k in incomplete} == incomplete and report["incomplete"]["total"] == PAIRS
    top = md.splitlines()[2]  # the line after the title: before any figure
    assert top.startswith("**Incomplete: stopped by the user") and "2 of 6 pair-orders judged" in top, md
    assert report["strategies"]["greedy"]["accuracy"]["n"] == 2  # the figures are of the pairs judged
    assert "stopped after 2 of 6 pair-orders: the report says it is incomplete; rerun the same command" in err
    assert "**Incomplete: stopped by the user" in out  # the report printed on the terminal says it too


def test_the_app_shows_a_stopped_run_as_incomplete_in_its_report_and_comparison(tmp_path, capsys, monkeypatch):
    from types import SimpleNamespace

    from reflectrm_app.services.evaluation import EvaluationService
    from reflectrm_db.services import JudgmentStore

    _after_first_batch(monkeypatch, lambda: os.kill(os.getpid(), signal.SIGTERM))
    assert main(_eval(tmp_path)) == 130
    monkeypatch.undo()
    assert main([*_eval(tmp_path, out="second"), "--seed", "1"]) == 0  # another run, over the same pairs, whole
    capsys.readouterr()
    with JudgmentStore.open(str(tmp_path / "e.db")) as store:
        service = EvaluationService(SimpleNamespace(store=store))  # the tab's service over this store, no model
        view = service.view(1)
        compared = service.compare(1, 2)
        whole = service.view(2)
    assert view.markdown.splitlines()[2].startswith("**Incomplete: stopped by the user"), view.markdown
    assert "2 of 6 pair-orders judged" in view.markdown and "Incomplete" not in whole.markdown
    assert "**Run 1 is incomplete: stopped by the user" in compared and "Run 2 is incomplete" not in compared
    assert main(["compare", "1", "2", "--json", "--db", str(tmp_path / "e.db")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["incomplete"]["1"]["judged"] == 2 and "2" not in result["incomplete"]
