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


def test_compare_refuses_runs_over_different_pairs_with_the_same_ids(tmp_path: Path, capsys) -> None:
    # both files number their rows 0, 1, 2: the ids match, the pairs do not
    db = str(tmp_path / "e.db")
    for name, offset in (("one.jsonl", 0), ("two.jsonl", 100)):
        rows = [{"id": k, "query": f"What is {k + offset} + 1?", "response_1": str(k + offset + 1),
                 "response_2": str(k + offset + 2), "label": 1} for k in range(3)]
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
        assert main(["eval", "--benchmark", "file", "--data", str(tmp_path / name), "--strategies", "greedy",
                     "--max-new-tokens", "64", "--device", "cpu", "--db", db]) == 0
    out = capsys.readouterr().out
    assert "labels: first 3, second 0, tie 0, none 0 (3 pairs)" in out  # eval prints the pairs per label (stdout)
    assert main(["compare", "1", "2", "--db", db]) == 2
    err = capsys.readouterr().err
    assert "judged different pairs" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "both"),
    [
        pytest.param(["--benchmark", "judgebench"], True, id="judgebench-both-orders-by-default"),
        pytest.param(["--benchmark", "judgebench", "--no-both-orders"], False, id="judgebench-one-order-on-request"),
        pytest.param(["--benchmark", "rewardbench"], False, id="others-one-order"),
        pytest.param(["--benchmark", "rewardbench", "--both-orders"], True, id="others-both-on-request"),
    ],
)
def test_judgebench_judges_both_orders_by_default(argv: list[str], both: bool) -> None:
    import argparse

    from reflectrm_app.commands.evaluate import register, request_from_args

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    assert request_from_args(parser.parse_args(["eval", *argv])).plan.both_orders is both


def test_the_limit_draw_and_the_judge_seed_are_separate_and_the_limit_names_its_unit() -> None:
    import argparse

    from reflectrm_app.commands.evaluate import describe_data, register, request_from_args
    from reflectrm.core.types import PreferencePair
    from reflectrm.eval.benchmarks import Benchmark, select

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["eval", "--benchmark", "rewardbench", "--seed", "7", "--limit", "2"])
    assert request_from_args(args).seed == 0  # the draw: --sample-seed, not the judge's --seed
    assert request_from_args(parser.parse_args(["eval", "--benchmark", "rewardbench", "--sample-seed", "3"])).seed == 3
    # an RM-Bench-style group of 3 pairs per prompt: --limit counts prompts, and says so
    pairs = tuple(PreferencePair.from_query(f"q{g}", f"a{k}", "b", id=f"{g}:{k}", label=1)
                  for g in range(4) for k in range(3))
    bench = Benchmark(name="rm", pairs=pairs, meta={p.id: {"group": p.id.split(":")[0]} for p in pairs})
    request = request_from_args(parser.parse_args(["eval", "--benchmark", "rm-bench", "--limit", "2"]))
    lines = describe_data(request, select(bench, limit=2))
    assert lines[0].startswith("--limit 2: 2 groups") and "6 pairs" in lines[0]
