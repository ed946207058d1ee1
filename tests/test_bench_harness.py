"""bench/harness.py: what every benchmark script shares, and the scripts using it rather than their own copies."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from tests.conftest import load_bench

BENCH = Path(__file__).resolve().parents[1] / "bench"
RESEARCH = BENCH.parent / "research"
SCRIPTS = sorted(p for p in [*BENCH.glob("*.py"), *RESEARCH.glob("*.py")] if p.name != "harness.py")


@pytest.fixture
def harness():
    return load_bench("harness")


@pytest.mark.parametrize("numerator, denominator, want", [
    pytest.param(3.0, 2.0, 1.5, id="plain"),
    pytest.param(1.0, 3.0, 0.33, id="rounded-to-two-digits"),
    pytest.param(5.0, 0.0, None, id="zero-denominator-is-no-figure-not-inf"),
])
def test_ratio(harness, numerator, denominator, want):
    assert harness.ratio(numerator, denominator) == want


def test_the_timer_reads_the_clock_at_entry_and_exit(harness, monkeypatch):
    ticks = iter([10.0, 12.5])
    monkeypatch.setattr(harness.time, "perf_counter", lambda: next(ticks))
    with harness.timer() as t:
        pass
    assert t.seconds == 2.5


def test_the_load_line_names_the_three_averages_and_the_cpus(harness, monkeypatch):
    monkeypatch.setattr(harness.os, "getloadavg", lambda: (1.904, 2.1, 2.3))
    monkeypatch.setattr(harness.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert harness.load_line() == "load average 1.90 2.10 2.30 on 2 CPUs"


def test_finish_prints_one_json_line_with_the_load(harness, monkeypatch, capsys):
    monkeypatch.setattr(harness.os, "getloadavg", lambda: (1.0, 2.0, 3.0))
    assert harness.finish({"speedup": 1.5}) == 0
    [line] = capsys.readouterr().out.splitlines()
    figures = json.loads(line)
    assert figures["speedup"] == 1.5 and figures["load"]["load_15m"] == 3.0


def test_finish_refuses_nan_rather_than_printing_invalid_json(harness):
    with pytest.raises(ValueError):
        harness.finish({"accuracy": float("nan")})


def _calls(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            names.add(ast.unparse(f))
    return names


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_every_bench_uses_the_harness_not_its_own_parser_load_or_final_line(script):
    tree = ast.parse(script.read_text(encoding="utf-8"))
    calls = _calls(tree)
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "harness"
                for a in n.names}
    assert {"finish", "parser"} <= imported
    assert "argparse.ArgumentParser" not in calls
    assert "os.getloadavg" not in calls
    assert not any("uptime" in ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Call)
                   and ast.unparse(n.func) == "subprocess.run")


@pytest.mark.parametrize("folder, name", [
    pytest.param("research", "demo_reflection", id="demo_reflection", marks=pytest.mark.research),
    pytest.param("research", "retrain", id="retrain", marks=pytest.mark.research),
])
def test_the_accuracy_benches_take_their_statistics_from_reflectrm_eval(folder, name):
    from reflectrm.eval import compare

    source = (BENCH.parent / folder / f"{name}.py").read_text(encoding="utf-8")
    assert "mcnemar_exact" not in source and "paired_bootstrap" not in source  # no copy of the recipe
    bench = load_bench(name, folder=folder)
    assert bench.paired_difference is compare.paired_difference


@pytest.mark.research
def test_the_reflection_bench_difference_is_reflectrm_minus_the_other():
    bench = load_bench("demo_reflection", folder="research")
    # reflectrm right on 3 pairs the other gets wrong, the other right on 1 reflectrm gets wrong: +2 of 6
    a = [True, True, True, False, True, False]
    b = [False, False, False, True, True, False]
    d = bench.difference(a, b)
    assert (d["only_reflectrm"], d["only_other"]) == (3, 1)
    assert d["diff"] == pytest.approx(2 / 6) and d["lo"] <= d["diff"] <= d["hi"]


@pytest.mark.research
def test_the_retrain_bench_interval_counts_fixed_and_broken():
    bench = load_bench("retrain", folder="research")
    before = [False, False, True, True]
    after = [True, True, False, True]
    d = bench.interval(before, after)
    assert (d["fixed"], d["broken"]) == (2, 1) and d["diff"] == pytest.approx(0.25)


REPORT = {"items_total": 4, "strategies": {"greedy": {"judged": 4, "accuracy": {"value": 0.75}, "ece": 0.1234567}}}


@pytest.mark.parametrize("change, apart", [
    pytest.param(lambda r: None, [], id="same"),
    pytest.param(lambda r: r["strategies"]["greedy"].update(ece=0.1234568), [], id="float-rounding-is-equal"),
    pytest.param(lambda r: r["strategies"]["greedy"].update(ece=0.13), ["/strategies/greedy/ece"], id="float-apart"),
    pytest.param(lambda r: r.update(items_total=3), ["/items_total"], id="count-apart"),
    pytest.param(lambda r: r["strategies"]["greedy"]["accuracy"].update(value=0.5),
                 ["/strategies/greedy/accuracy/value"], id="accuracy-apart"),
    pytest.param(lambda r: r["strategies"].update(majority={}), ["/strategies"], id="a-strategy-missing"),
])
def test_the_shard_bench_tells_a_report_apart_beyond_float_rounding(change, apart):
    """bench/eval_shards.py's check that the merged report equals the single one: counts and accuracies exactly,
    floats to a relative 1e-5 (confidences round with the batch and the thread count)."""
    shards = load_bench("eval_shards")
    other = json.loads(json.dumps(REPORT))
    change(other)
    found, _ = shards.differences(REPORT, other)
    assert [p.split(":")[0] for p in found] == apart
