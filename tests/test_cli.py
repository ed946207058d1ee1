"""`reflectrm judge` end to end on the demo judge: anatomy, JSON, files, resume, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reflectrm_app.cli import main

FAST = ["--max-new-tokens", "96"]
PAIR = ["--query", "What is 47 + 38?", "--response-1", "47 + 38 = 85.", "--response-2", "The answer is 75."]


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reflectrm_app.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(__file__).parents[1])})


def test_judge_prints_the_full_anatomy(capsys):
    assert main(["judge", *PAIR, *FAST, "--label", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") > 20
    for needle in ("Stage 1: 8 sample(s)", "Anchor: #", "Stage 2:", "Winner group:", "Vote: Response 1:",
                   "Final verdict: Response"):
        assert needle in out
    assert "Critique 1 = #" in out  # the order shown to the model


def test_judge_json_has_everything(capsys):
    assert main(["judge", *PAIR, *FAST, "--json", "--swap"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert len(obj["rollouts"]) == 8 and {"analysis", "prediction", "confidence", "status"} <= set(obj["rollouts"][0])
    assert obj["anchor"] is not None and obj["verdict"] in (1, 2)
    assert "order" in obj["reflections"][0] and "winners" in obj and obj["vote"]["counts"]
    assert obj["swapped"]["pair"]["response_1"] == "The answer is 75." and obj["orders_agree"] in (True, False)


def test_file_judging_resumes_and_never_writes_half_a_line(tmp_path, capsys):
    pairs = tmp_path / "pairs.jsonl"
    rows = [{"id": f"p{i}", "query": f"What is {10 + i} + 5?", "response_1": str(15 + i), "response_2": str(16 + i),
             "label": 1} for i in range(3)]
    pairs.write_text("\n".join(json.dumps(r) for r in rows[:2]) + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["judge", "--input", str(pairs), "--output", str(out), "--strategy", "majority", *FAST]) == 0
    first = out.read_text().splitlines()
    assert [json.loads(x)["id"] for x in first] == ["p0", "p1"]
    # A torn last line (a kill mid-write) is cut, and that pair is judged again.
    out.write_text(first[0] + "\n" + first[1][:40])
    pairs.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert main(["judge", "--input", str(pairs), "--output", str(out), "--strategy", "majority", *FAST]) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["id"] for x in lines] == ["p0", "p1", "p2"]
    assert lines[0] == json.loads(first[0])
    assert "skipped 1 already" in capsys.readouterr().err


BAD_INPUTS = [
    pytest.param('{"id": "a", "query": "q", "response_1": "", "response_2": "b"}', "response_1 is empty", id="empty-response"),
    pytest.param('{"id": "a", "query": "  ", "response_1": "a", "response_2": "b"}', "query is empty", id="empty-query"),
    pytest.param('{"id": "a", "query": "q", "response_1": "a"', "not valid JSON", id="malformed-json"),
    pytest.param('{"id": "a", "response_1": "a", "response_2": "b"}', "missing field 'query'", id="no-query"),
    pytest.param('{"id": "a", "query": "q", "response_1": "a", "response_2": "b", "label": 3}', "label must be 1 or 2",
                 id="bad-label"),
    pytest.param('["q", "a", "b"]', "must be a JSON object", id="not-an-object"),
    pytest.param('{"id": "a", "query": "q", "response_1": "' + "x " * 5000 + '", "response_2": "b"}',
                 "context is 4096 tokens", id="longer-than-context"),
]


@pytest.mark.parametrize(("line", "message"), BAD_INPUTS)
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path, line, message):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"id": "ok", "query": "What is 1 + 1?", "response_1": "2", "response_2": "3"}\n' + line + "\n")
    out = tmp_path / "out.jsonl"
    result = run_cli("judge", "--input", str(pairs), "--output", str(out), *FAST)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    errors = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and message in errors[0]
    assert not out.exists() or out.read_text() == ""


def test_unknown_model_is_one_line_exit_2():
    result = run_cli("judge", *PAIR, "--model", "/nowhere/model")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().startswith("error: model path '/nowhere/model' does not exist")


def test_every_command_help_reads_cleanly():
    # argparse formats argument help with %, not a command's description: an escaped %% there shows as typed
    from reflectrm_app.cli import build_parser

    def commands(parser, path=()):
        for action in parser._actions:
            if isinstance(action.choices, dict) and all(hasattr(c, "format_help") for c in action.choices.values()):
                for name, sub in action.choices.items():
                    yield (*path, name), sub
                    yield from commands(sub, (*path, name))

    found = dict(commands(build_parser()))
    assert {("judge",), ("eval",), ("app",), ("train",), ("serve",)} <= set(found)
    for name, sub in found.items():
        text = sub.format_help()
        assert "%%" not in text and "%(" not in text, " ".join(name)
