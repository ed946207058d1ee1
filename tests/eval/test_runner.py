"""The eval runner and store: shared rollouts, both orders, over-long pairs, resumption after a kill, compare."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from reflectrm_app.services.evaluation import EvalRequest, Evaluations
from reflectrm_db.services import JudgmentStore
from reflectrm.backends.scripted import ScriptedBackend
from reflectrm.core.config import JudgeConfig
from reflectrm.errors import ContextLengthError
from reflectrm.eval.runner import EvalPlan, evaluate
from tests.conftest import critique_output, response_output

CONFIG = JudgeConfig(n=4, matched_compute_n=6, max_new_tokens=8, reflection_max_new_tokens=8)


def _truthful(text: str, seed: int, params) -> str:
    """Picks the response holding GOOD (its position read from the prompt); reflections keep critique 1."""
    if "Critique 1" in text:
        return critique_output(1)
    good, bad = text.find("GOOD"), text.find("BAD")
    return response_output(1 if good < bad else 2)


def _first(text: str, seed: int, params) -> str:
    """A position-biased judge: always Response 1."""
    return critique_output(1) if "Critique 1" in text else response_output(1)


def _pairs_file(tmp_path: Path, n: int, *, long_every: int = 0) -> Path:
    lines = []
    for k in range(n):
        good, bad = f"GOOD answer {k}", f"BAD answer {k}"
        if long_every and k % long_every == 0:
            bad += " padding" * 400
        first = k % 2 == 0
        lines.append({"id": f"p{k}", "query": f"question {k}", "response_1": good if first else bad,
                      "response_2": bad if first else good, "label": 1 if first else 2, "subset": f"s{k % 2}"})
    path = tmp_path / "pairs.jsonl"
    import json

    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def store(tmp_path: Path):
    with JudgmentStore.open(f"sqlite:///{tmp_path / 'eval.db'}") as s:
        yield s


def _request(path: Path, **plan) -> EvalRequest:
    return EvalRequest(benchmark="file", data=path, plan=EvalPlan(batch_size=2, **plan))


def test_strategies_share_one_rollout_pass(tmp_path: Path, store: JudgmentStore) -> None:
    backend = ScriptedBackend(_truthful)
    plan = {"strategies": ("majority@15", "reflectrm", "greedy", "majority", "random-winners")}
    run = Evaluations(store).run(_request(_pairs_file(tmp_path, 4), **plan), backend=backend, config=CONFIG)
    stage1 = [c for c in backend.calls if c[2].logprobs and c[2].temperature > 0]
    greedy = [c for c in backend.calls if c[2].logprobs and c[2].temperature == 0]
    # 6 samples a pair (the 4 reflectrm uses, plus 2 more for the matched-compute baseline), 1 greedy output
    assert (len(stage1), len(greedy)) == (4 * 6, 4)
    report = Evaluations(store).report(run.id)
    assert {s: r["accuracy"]["value"] for s, r in report["strategies"].items()} == {
        "greedy": 1.0, "majority": 1.0, "majority@15": 1.0, "random-winners": 1.0, "reflectrm": 1.0}
    tokens = {s: r["tokens_per_judgment"] for s, r in report["strategies"].items()}
    assert tokens["majority"] < tokens["majority@15"] and tokens["greedy"] < tokens["majority"]
    assert run.status == "completed" and run.items_done == run.items_total == 4


def test_both_orders_catch_a_position_biased_judge(tmp_path: Path, store: JudgmentStore) -> None:
    run = Evaluations(store).run(_request(_pairs_file(tmp_path, 6), strategies=("reflectrm",), both_orders=True),
                                 backend=ScriptedBackend(_first), config=CONFIG)
    s = Evaluations(store).report(run.id)["strategies"]["reflectrm"]
    assert s["accuracy"]["value"] == 0.5  # right exactly where the label is 1
    assert s["both_orders"]["accuracy"]["value"] == 0.0  # never right in both orders
    assert s["both_orders"]["flip_rate"]["value"] == 1.0
    items = Evaluations(store).items(run.id)
    twins = {(i.item_id, i.swapped): i.judgment_id for i in items}
    loaded = store.load(twins[("p0", False)])
    assert loaded.twin_id == twins[("p0", True)]  # the two orders are linked in the store


def test_over_long_pairs_are_skipped_truncated_or_stop_the_run(tmp_path: Path, store: JudgmentStore) -> None:
    path = _pairs_file(tmp_path, 4, long_every=2)  # p0 and p2 hold 3,000-character responses
    backend = ScriptedBackend(_truthful, max_context_chars=2000)
    run = Evaluations(store).run(_request(path, strategies=("reflectrm", "greedy")), backend=backend, config=CONFIG)
    report = Evaluations(store).report(run.id)
    assert report["skipped"]["count"] == 2 and report["skipped"]["subsets"] == {"s0": 2}
    assert report["strategies"]["reflectrm"]["accuracy"]["n"] == 2  # the run went on with the others
    truncated = Evaluations(store).run(_request(path, strategies=("greedy",), too_long="truncate"),
                                       backend=backend, config=CONFIG)
    items = Evaluations(store).items(truncated.id)
    assert len([i for i in items if not i.skipped]) == 4
    assert sorted(i.item_id for i in items if "truncated_to" in i.meta) == ["p0", "p2"]
    with pytest.raises(ContextLengthError, match="pair 'p0'.*--too-long"):
        list(evaluate(_request(path).load().pairs, backend, CONFIG, plan=EvalPlan(too_long="error"), done=set()))


class _Killed(Exception):
    pass


def test_a_killed_run_resumes_without_judging_anything_twice(tmp_path: Path, store: JudgmentStore) -> None:
    path = _pairs_file(tmp_path, 6)
    calls = {"n": 0}

    def dies_in_the_second_batch(text: str, seed: int, params) -> str:
        calls["n"] += 1
        if calls["n"] > 4 * 2 + 1:  # the first batch (2 pairs x 4 samples) completes, then the process "dies"
            raise KeyboardInterrupt
        return _truthful(text, seed, params)

    evals = Evaluations(store)
    with pytest.raises(KeyboardInterrupt):
        evals.run(_request(path, strategies=("majority",)), backend=ScriptedBackend(dies_in_the_second_batch),
                  config=CONFIG)
    (stopped,) = evals.runs()
    assert (stopped.status, stopped.items_done) == ("stopped", 2)  # batch 1 stored whole, batch 2 not at all
    backend = ScriptedBackend(_truthful)
    resumed = evals.run(_request(path, strategies=("majority",)), backend=backend, config=CONFIG)
    assert resumed.id == stopped.id and resumed.status == "completed" and resumed.items_done == 6
    judged = {re.search(r"question (\d+)", c[0]).group(1) for c in backend.calls}
    assert judged == {"2", "3", "4", "5"}  # p0 and p1 were not judged again
    assert store.counts()["judgments"] == 6


def test_compare_pairs_items_and_tests_the_difference(tmp_path: Path, store: JudgmentStore) -> None:
    path = _pairs_file(tmp_path, 10)
    evals = Evaluations(store)
    biased = evals.run(_request(path, strategies=("greedy",)), backend=ScriptedBackend(_first), config=CONFIG)
    truthful = evals.run(_request(path, strategies=("greedy",)),
                         backend=ScriptedBackend(_truthful, model_revision="v2"), config=CONFIG)
    result = evals.compare(biased.id, truthful.id)
    overall = result["strategies"]["greedy"]["overall"]  # the unit is a pair, in the order given
    assert (overall["n"], overall["only_a"], overall["only_b"]) == (10, 0, 5)
    assert overall["mcnemar_p"] == pytest.approx(2 / 32)
    assert overall["difference"]["value"] == pytest.approx(0.5)
    assert result["strategies"]["greedy"]["s1"]["only_b"] == 5  # odd pairs: label 2, where "always 1" is wrong
    within = evals.compare(truthful.id, truthful.id, strategy="greedy", strategy_b="greedy")
    assert within["strategies"]["greedy vs greedy"]["overall"]["mcnemar_p"] == 1.0
