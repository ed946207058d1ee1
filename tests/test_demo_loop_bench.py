"""The loop bench's reviewer (`bench/demo_loop.py`): it walks the Review queue through the app's services and
corrects what is wrong as a careful person does, with marks on each analysis by its arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest

from reflectrm.backends import ScriptedBackend
from reflectrm.backends.base import Completion, SamplingParams
from reflectrm.demo.domains import ARITHMETIC
from tests.app.conftest import make_services
from tests.conftest import critique_output, load_bench, response_output


@pytest.fixture(scope="module")
def bench():
    return load_bench("demo_loop")


PAIRS = ARITHMETIC.make_pairs(8, seed=3, source="loop-pool")


def worked_or_wrong(prompt: str, seed: int, params: SamplingParams) -> Completion:
    """Even seeds work the pair's problem rightly (the domain's own analysis); odd ones say Response 1 with
    nonsense arithmetic; every reflection prefers Critique 1."""
    if "## Critiques for Judgment" in prompt:
        return Completion(critique_output(1), (), 5)
    pair = next(p for p in PAIRS if p.query in prompt)
    text = ARITHMETIC.response_example(pair) if seed % 2 == 0 else response_output(1, "2 + 2 = 5.")
    return Completion(text, tuple(-0.1 * (seed % 5 + 1) for _ in range(6)), 6)


@pytest.fixture
def loop(bench, tmp_path: Path):
    services = make_services(f"sqlite:///{tmp_path / 'loop.db'}", ScriptedBackend(worked_or_wrong))
    loop = bench.Loop.__new__(bench.Loop)  # the services of a test store, not the app's model
    loop.services, loop.domain, loop.figures = services, ARITHMETIC, {}
    services.runtime.store.add_pairs(PAIRS)
    for pair in PAIRS:
        services.judging.judge(pair)
    yield loop
    services.close()


def test_the_reviewer_marks_each_analysis_by_its_arithmetic_and_verdict(loop) -> None:
    stored = loop.services.runtime.store.load(1).judgment
    marks = loop.marks(stored)
    assert marks and set(marks) <= {r.index for r in stored.rollouts}
    for k, mark in marks.items():
        r = stored.rollouts[k]
        right = r.prediction == stored.pair.label and ARITHMETIC.analysis_true(stored.pair, r.analysis)
        assert mark == ("right" if right else "wrong")
    assert {"right", "wrong"} <= set(marks.values())  # the worked samples are right, the nonsense ones wrong


def test_the_reviewer_walks_the_queue_and_corrects_only_wrong_judgments(loop) -> None:
    wrong = {s.id for s in loop.services.runtime.store.history(limit=100) if s.verdict != s.label}
    assert wrong, "the scripted judge gets some pairs wrong"
    corrected = loop.correct_in_queue_order(len(wrong) + 5, source="loop-pool")  # more than there is: all of them
    assert {jid for jid, _ in corrected} == wrong
    queue = [s.id for s in loop.services.runtime.store.review_queue(limit=100, include_corrected=True)]
    assert [jid for jid, _ in corrected] == [j for j in queue if j in wrong]  # in the queue's order
    for jid, pair in corrected:
        [c] = loop.services.runtime.store.corrections(judgment_id=jid)
        assert c.verdict == pair.label and c.marks == loop.marks(loop.services.runtime.store.load(jid).judgment)
    assert loop.figures["queue"]["looked"] == len(PAIRS)


@pytest.mark.parametrize("stored, now, may_change, problem", [
    pytest.param(None, {"steps": 30}, (), "needs a stopped run's store", id="no-stopped-run"),
    pytest.param({"steps": 30, "lr": 3e-4}, {"steps": 40, "lr": 3e-4}, (), "these differ: steps", id="changed-size"),
    pytest.param({"steps": 30, "threads": 1}, {"steps": 30, "threads": 2}, ("threads",), None, id="may-change"),
    pytest.param({"steps": 30}, {"steps": 30}, (), None, id="same-and-out-a-path"),
])
def test_a_resumed_loop_bench_goes_on_only_with_what_it_measured_before(bench, tmp_path, capsys, stored, now,
                                                                        may_change, problem) -> None:
    """`partial_results`, what bench/position_bias.py and bench/agreement_pays.py resume with; OUT is a Path in the
    arguments and a string in partial.json."""
    import argparse
    import json

    args = argparse.Namespace(**now, out=tmp_path)
    if stored is not None:
        (tmp_path / "loop.db").write_bytes(b"")
        done = {"args": {**stored, "out": str(tmp_path)}, "runs": {"plain": "done"}}
        (tmp_path / "partial.json").write_text(json.dumps({"bias": done}))
    ap = argparse.ArgumentParser(prog="bench")
    if problem is None:
        assert bench.partial_results(ap, args, "bias", may_change=frozenset(may_change))["runs"] == {"plain": "done"}
        return
    with pytest.raises(SystemExit):
        bench.partial_results(ap, args, "bias", may_change=frozenset(may_change))
    err = capsys.readouterr().err.strip().splitlines()
    assert problem in err[-1] and len(err) == 2  # usage, then the one line


GROUPS = {0: 0, 1: 1, 2: 1, 3: 2, 7: 2, 8: 2}  # right samples of 8 -> the wrong-judgment group's index


@pytest.mark.parametrize(("right", "group"), list(GROUPS.items()), ids=[f"{k}-right" for k in GROUPS])
def test_what_corrections_fix_splits_wrong_judgments_by_how_often_their_samples_were_right(right, group) -> None:
    fix = load_bench("what_corrections_fix")
    assert fix.group_of(right) == fix.GROUPS[group]
