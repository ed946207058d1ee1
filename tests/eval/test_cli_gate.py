"""`reflectrm compare A B --gate` on a real SQLite store holding real evaluation runs (scripted judges, no model)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reflectrm_app.cli import main
from reflectrm_app.services.evaluation import EvalRequest, Evaluations
from reflectrm_db.services import JudgmentStore
from reflectrm.backends.scripted import ScriptedBackend
from reflectrm.core.config import JudgeConfig
from reflectrm.eval.runner import EvalPlan
from tests.conftest import critique_output, response_output

CONFIG = JudgeConfig(n=4, matched_compute_n=6, max_new_tokens=8, reflection_max_new_tokens=8)
PAIRS = 8


def _picks(word: str):
    """A judge that picks the response holding `word` (GOOD: always right; BAD: always wrong)."""
    def respond(text: str, seed: int, params) -> str:
        if "Critique 1" in text:
            return critique_output(1)
        return response_output(1 if text.find(word) < text.find("BAD" if word == "GOOD" else "GOOD") else 2)
    return respond


def _first(text: str, seed: int, params) -> str:
    """A position-biased judge: right as given where the label is 1 (half), never right in both orders."""
    return critique_output(1) if "Critique 1" in text else response_output(1)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Runs 1 (always right), 2 (always wrong), 3 (position-biased) over the same 8 pairs in both orders."""
    root = tmp_path_factory.mktemp("gate")
    rows = []
    for k in range(PAIRS):
        good, bad, first = f"GOOD answer {k}", f"BAD answer {k}", k % 2 == 0
        rows.append({"id": f"p{k}", "query": f"question {k}", "response_1": good if first else bad,
                     "response_2": bad if first else good, "label": 1 if first else 2, "subset": f"s{k % 2}"})
    data = root / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    path = root / "eval.db"
    request = EvalRequest(benchmark="file", data=data,
                          plan=EvalPlan(strategies=("greedy",), both_orders=True, batch_size=4))
    with JudgmentStore.open(f"sqlite:///{path}") as store:
        for name, responder in (("right", _picks("GOOD")), ("wrong", _picks("BAD")), ("biased", _first)):
            # a judge of its own name: the same request with the same judge would resume run 1
            Evaluations(store).run(request, backend=ScriptedBackend(responder, model_id=name), config=CONFIG)
    return str(path)


@pytest.mark.parametrize(
    ("argv", "code", "verdict", "lines"),
    [
        pytest.param(["1", "2", "--gate"], 3, "gate: worse on greedy / overall, greedy / both orders",
                     ["greedy / overall: worse (A 100.0 %, B 0.0 %, B - A -100.0"], id="always-wrong-is-worse"),
        pytest.param(["2", "1", "--gate"], 0, "gate: better", ["greedy / overall: better"], id="better-passes"),
        pytest.param(["1", "1", "--gate"], 0, "gate: no difference",
                     ["greedy / overall: no difference (A 100.0 %, B 100.0 %, B - A +0.0"], id="the-same-run-passes"),
        pytest.param(["1", "3", "--gate"], 3, "gate: worse on greedy / both orders (alpha 0.05",
                     ["greedy / overall: no difference", "McNemar p 0.125, n 8 pairs",
                      "greedy / both orders: worse", "McNemar p 0.00781, n 8 pairs",
                      "greedy / s1: no difference, not gated"], id="worse-only-in-both-orders"),
        pytest.param(["1", "3", "--gate", "--alpha", "0.005"], 0, "gate: no difference (alpha 0.005",
                     ["greedy / both orders: no difference"], id="a-stricter-level-passes"),
        pytest.param(["1", "3", "--gate", "--gate-subsets", "--alpha", "0.5"], 3,
                     "gate: worse on greedy / overall, greedy / s1, greedy / both orders (alpha 0.5; 4 gated",
                     ["greedy / s1: worse", "greedy / s0: no difference (A"], id="subsets-gated-on-request"),
    ],
)
def test_the_gate_exits_3_only_when_b_is_worse_on_a_gated_set(db: str, capsys, argv, code, verdict, lines) -> None:
    assert main(["compare", *argv, "--db", db]) == code
    out, err = capsys.readouterr()
    assert out.startswith("# Run ") and "| strategy | subset |" in out  # the usual table first
    assert out.rstrip("\n").splitlines()[-1].startswith(verdict) and err == ""
    for line in lines:
        assert line in out


def test_without_gate_the_command_is_as_before(db: str, capsys) -> None:
    assert main(["compare", "1", "2", "--db", db]) == 0  # B is worse, and nothing was asked of the exit status
    out = capsys.readouterr().out
    assert "gate" not in out and out.rstrip("\n").splitlines()[-1].startswith("| greedy |")
    assert main(["compare", "1", "2", "--json", "--db", db]) == 0
    assert "gate" not in json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("argv", "code", "verdict", "worse"), [
    pytest.param(["1", "3"], 3, "worse", ["both orders"], id="worse"),
    pytest.param(["3", "1"], 0, "better", [], id="better"),
])
def test_json_carries_the_gate(db: str, capsys, argv, code, verdict, worse) -> None:
    assert main(["compare", *argv, "--gate", "--json", "--db", db]) == code
    result = json.loads(capsys.readouterr().out)
    g = result["gate"]
    assert g["verdict"] == verdict and g["passed"] is (code == 0) and g["alpha"] == 0.05
    assert [s["set"] for s in g["sets"] if s["verdict"] == "worse" and s["gated"]] == worse
    assert {s["set"] for s in g["sets"]} == set(result["strategies"]["greedy"])  # every set compared, judged
    both = next(s for s in g["sets"] if s["set"] == "both orders")
    assert both["n"] == PAIRS and both["mcnemar_p"] == result["strategies"]["greedy"]["both orders"]["mcnemar_p"]


@pytest.mark.parametrize(("argv", "message"), [
    pytest.param(["--gate", "--alpha", "0"], "'0' is not a significance level", id="alpha-zero"),
    pytest.param(["--gate", "--alpha", "0.6"], "'0.6' is not a significance level", id="alpha-above-half"),
    pytest.param(["--gate", "--alpha", "-0.05"], "'-0.05' is not a significance level", id="alpha-negative"),
    pytest.param(["--gate", "--alpha", "nan"], "'nan' is not a significance level", id="alpha-nan"),
    pytest.param(["--gate", "--alpha", "five"], "'five' is not a significance level", id="alpha-not-a-number"),
    pytest.param(["--alpha", "0.1"], "--alpha and --gate-subsets set the promotion gate: add --gate", id="alpha-alone"),
    pytest.param(["--gate-subsets"], "add --gate", id="gate-subsets-alone"),
])
def test_a_bad_gate_flag_is_one_line_and_exit_2(db: str, capsys, argv, message) -> None:
    assert _exit_code(["compare", "1", "3", *argv, "--db", db]) == 2
    out, err = capsys.readouterr()
    assert message in err and err.count("\n") == 1 and "Traceback" not in err and out == ""


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse refusals exit from inside the parser
        return int(exc.code or 0)


def test_a_script_promotes_only_what_passed(db: str, tmp_path: Path) -> None:
    """`reflectrm compare A B --gate && promote`, in a real shell, with the real command."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    script = (f'"{sys.executable}" -m reflectrm_app.cli compare 1 "$B" --gate --db "{db}" >/dev/null '
              '&& echo promoted || echo "kept: $?"')
    said = {b: subprocess.run(["sh", "-c", script], env={**env, "B": b}, capture_output=True, text=True,
                              check=True).stdout.strip() for b in ("1", "3")}
    assert said == {"1": "promoted", "3": "kept: 3"}
