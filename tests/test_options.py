"""One set of options: every command's model, engine and judging flags come from the config classes, spelled
once; `judge --input` and `eval` read pair files through one reader, by the same rules."""

from __future__ import annotations

import argparse
import functools
import json
from dataclasses import MISSING, fields
from pathlib import Path

import pytest

from reflectrm_app.commands import judge, options
from reflectrm.backends.config import BackendConfig
from reflectrm.core.config import JudgeConfig
from reflectrm.files.readers import format_counts, label_counts
from reflectrm_app.cli import build_parser, main

JUDGING = ("judge", "eval", "serve", "build-data", "app")  # every command that loads a judge
NOT_GIVEN_DEFAULTS: dict[str, set[str]] = {}  # a command that takes no flag for a BackendConfig field


@functools.cache
def _commands() -> dict[str, argparse.ArgumentParser]:
    [sub] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The parser's visible actions by dest (a renamed flag's hidden refusal left out)."""
    return {a.dest: a for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS}


def _reading(action: argparse.Action) -> tuple:
    """How a flag reads and explains its value: help, converter (by name), choices, action kind."""
    return action.help, getattr(action.type, "__name__", action.type), action.choices, type(action).__name__


@pytest.mark.parametrize("command", JUDGING)
def test_every_command_that_loads_a_judge_takes_the_backend_flags_from_backend_config(command):
    options = _options(_commands()[command])
    reference = _options(_commands()["judge"])
    for f in fields(BackendConfig):
        if f.name in NOT_GIVEN_DEFAULTS.get(command, ()):
            assert f.name not in options
            continue
        action = options[f.name]
        assert action.option_strings == [f"--{f.name}"], command
        # the same help and reading as `judge`'s; the class's default, or None where settings fill it in (app)
        assert _reading(action) == _reading(reference[f.name]), (command, f.name)
        assert action.default == (None if command == "app" else f.default), (command, f.name)


@pytest.mark.parametrize(("command", "skipped"), [
    pytest.param("eval", {"strategy"}, id="eval"),  # eval's --strategies share one rollout pass
    pytest.param("serve", set(), id="serve"),
])
def test_eval_and_serve_take_every_judging_flag_as_judge_does(command, skipped):
    # the trap: a literal default or help restated by hand drifts from JudgeConfig (eval had 5 of 14 fields)
    options, judge = _options(_commands()[command]), _options(_commands()["judge"])
    for f in fields(JudgeConfig):
        if f.name in skipped:
            assert f.name not in options
            continue
        action, reference = options[f.name], judge[f.name]
        assert (action.option_strings, action.default, _reading(action)) == \
            (reference.option_strings, reference.default, _reading(reference)), (command, f.name)
        if f.default is not MISSING and f.name != "reflection_max_new_tokens":  # tied: None means "as stage 1"
            assert action.default == f.default


def test_the_thread_count_has_one_spelling_in_every_command():
    spelled = {(name, option) for name, parser in _commands().items()
               for action in _options(parser).values() for option in action.option_strings if "thread" in option}
    assert {option for _, option in spelled} == {"--threads"}, spelled
    assert {name for name, _ in spelled} >= {"judge", "eval", "serve", "build-data", "train"}


@pytest.mark.parametrize(("argv", "new"), [
    pytest.param(["train", "--data", "d", "--output", "o", "--cpu-threads", "2"], "--threads", id="train-cpu-threads"),
])
def test_a_renamed_flag_is_refused_naming_its_new_spelling(argv, new, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and f"use {new}" in err, err


# --- judge --input and eval read the same files by the same rules -------------------------------------------

PAIR = {"query": "What is 2+3?", "response_1": "5", "response_2": "6"}


def _jsonl(*rows: dict) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


FILES = [
    # the trap: `judge --input` read JSONL only, so a CSV that `eval` took was refused as "not valid JSON"
    pytest.param("pairs.csv", "id,query,response_1,response_2,label\na,q1,x,y,1\nb,q2,x,y,B\n", True, id="csv"),
    pytest.param("pairs.json", json.dumps([{**PAIR, "id": "a", "label": 2}, {**PAIR, "id": "b"}]), True,
                 id="json-array"),
    pytest.param("pairs.jsonl", "\ufeff" + _jsonl({**PAIR, "id": "a", "label": 1}), True, id="byte-order-mark"),
    # labels as data sets write them, and a tie flag: judge read only 1/2/"tie"
    pytest.param("pairs.jsonl", _jsonl({**PAIR, "id": "a", "label": "A>B"}, {**PAIR, "id": "b", "tie": True}),
                 True, id="label-names-and-tie"),
    pytest.param("pairs.jsonl", _jsonl({**PAIR, "id": "a"}, {**PAIR, "id": "a"}), False, id="duplicate-id-refused"),
    pytest.param("pairs.jsonl", _jsonl({**PAIR, "label": 0}), False, id="ambiguous-label-0-refused"),
    # eval took a lone surrogate that judge refused; both refuse it now
    pytest.param("pairs.jsonl", '{"query": "q\\ud800", "response_1": "a", "response_2": "b"}\n',
                 False, id="lone-surrogate-refused"),
    pytest.param("pairs.txt", _jsonl(PAIR), False, id="unknown-type-refused"),
    pytest.param("pairs.jsonl", "", False, id="empty-refused"),
]


class _Loaded(Exception):
    """Raised where a command would load the judge: the file has been read by then."""


def _judge_reads(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
                 ) -> str:
    seen = []
    monkeypatch.setattr(judge, "load_judge", lambda *configs: None)
    monkeypatch.setattr(judge, "_judge_file", lambda args, pairs, *a: seen.append(pairs) or 0)
    code = main(["judge", "--input", str(path), "--output", str(tmp_path / "out.jsonl")])
    err = capsys.readouterr().err
    if code != 0:
        return err.strip().removeprefix("error: ")
    [pairs] = seen
    return format_counts(label_counts(pairs)) + f" ({len(pairs)} pairs)"


def _eval_reads(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
                ) -> str:
    def stop(*configs: object) -> None:
        raise _Loaded

    monkeypatch.setattr(options, "load_judge", stop)  # where `eval` finds it
    argv = ["eval", "--benchmark", "file", "--data", str(path), "--db", str(tmp_path / "eval.db")]
    try:
        code = main(argv)
    except _Loaded:
        return next(line for line in capsys.readouterr().out.splitlines() if line.startswith("labels: "))
    assert code == 2
    return capsys.readouterr().err.strip().removeprefix("error: ")


@pytest.mark.parametrize(("name", "text", "reads"), FILES)
def test_judge_input_and_eval_read_a_file_alike(name, text, reads, tmp_path, monkeypatch, capsys):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    judged = _judge_reads(path, tmp_path, monkeypatch, capsys)
    evaluated = _eval_reads(path, tmp_path, monkeypatch, capsys)
    assert judged == evaluated
    assert judged.startswith("labels: ") == reads, judged


# --- the benches that load a judge take its flags as `judge` does -------------------------------------------

class _Parsed(Exception):
    """Raised where a bench would parse its arguments: its parser is complete by then."""


@pytest.mark.parametrize(("name", "skipped", "folder"), [
    pytest.param("judge_speed", {"backend"}, "bench", id="judge_speed"),  # transformers only: the naive column drives its model
    pytest.param("serve_load", {"model"}, "bench", id="serve_load"),  # --shape picks the model
    pytest.param("demo_reflection", set(), "research", id="demo_reflection", marks=pytest.mark.research),
    pytest.param("gpu_judge", {"model", "backend", "threads"}, "bench", id="gpu_judge"),  # --backends: one column each
])
def test_the_benches_that_load_a_judge_take_its_flags_from_backend_config(name, skipped, folder, monkeypatch):
    from tests.conftest import load_bench

    seen: list[argparse.ArgumentParser] = []

    def capture(self, args=None, namespace=None):  # noqa: ANN001, ANN202
        seen.append(self)
        raise _Parsed

    bench = load_bench(name, folder=folder)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    monkeypatch.setattr("sys.argv", [name])
    with pytest.raises(_Parsed):
        bench.main()
    options, judge = _options(seen[0]), _options(_commands()["judge"])
    for f in fields(BackendConfig):
        if f.name in skipped:
            assert f.name not in options, (name, f.name)
            continue
        action = options[f.name]
        assert (action.option_strings, action.default, _reading(action)) == \
            (judge[f.name].option_strings, judge[f.name].default, _reading(judge[f.name])), (name, f.name)
