"""The retraining experiment's split (`research/retrain.py`): held-in pairs reword the held-out problems, never a
held-out conversation; "unseen" pairs ask problems that no held-in or held-out pair asks."""

import pytest

from reflectrm.demo.tasks import problem_of
from reflectrm.training.data import context_key
from tests.conftest import load_bench

pytestmark = pytest.mark.research


def test_held_in_rewords_held_out_problems_and_unseen_problems_are_untouched():
    from reflectrm.demo import DEMO_MODEL_DIR

    held_out, held_in, unseen = load_bench("retrain", folder="research").splits(str(DEMO_MODEL_DIR), 60, 40)
    assert len(held_out) == 60 and len(unseen) == 40
    problems = {problem_of(p) for p in held_out}
    assert {problem_of(p) for p in held_in} == problems
    assert not {context_key(p) for p in held_in} & {context_key(p) for p in held_out}
    assert not {problem_of(p) for p in unseen} & problems
    assert len(held_in) >= 2 * len(problems)  # each problem in (at least two of) its other three wordings


def test_on_the_running_sum_domain_held_out_pairs_leave_out_the_builds_problems(tmp_path):
    import json

    from reflectrm.demo import steps
    from reflectrm.demo.domains import RUNNING_SUMS
    from reflectrm.demo.heldout import lessons

    (tmp_path / "demo_card.json").write_text(json.dumps(
        {"domain": "reflectrm.demo.steps", "build_args": {"pairs": 3000, "seed": 555_001}}))
    bench = load_bench("retrain", folder="research")
    bench.DOMAIN = RUNNING_SUMS
    held_out, held_in, unseen = bench.splits(str(tmp_path), 200, 40)
    # the held-out stream's own seed: they overlap; a card without "misread_frac" is a build from before that flag
    _, trained = lessons(3000, seed=555_001, misread_frac=0.0)
    seen = {steps.problem_of(p) for p in trained}
    assert 0 < len(held_out) < 200 and not {steps.problem_of(p) for p in held_out} & seen
    assert {steps.problem_of(p) for p in held_in} == {steps.problem_of(p) for p in held_out}
    assert not {context_key(p) for p in held_in} & {context_key(p) for p in held_out}


def test_stage2_figures_count_only_reflections_between_a_right_and_a_wrong_analysis():
    from reflectrm.core import Judgment
    from reflectrm.core.types import ParseStatus, Reflection, Rollout
    from reflectrm.demo.tasks import make_pairs

    bench = load_bench("retrain", folder="research")
    pair = make_pairs(1, seed=7)[0]
    problem = problem_of(pair)
    wrong_answer = problem.answer + 1

    def rollout(i, result, prediction):
        analysis = f"{problem.expression} = {result}. Response {prediction} is right."
        return Rollout(index=i, text=analysis, analysis=analysis, prediction=prediction, status=ParseStatus.OK,
                       confidence=-0.1, num_tokens=10)

    def reflection(sample, order, choice):
        return Reflection(sample=sample, anchor=0, order=order, text="", analysis="", choice=choice,
                          status=ParseStatus.OK)

    other = 3 - pair.label
    rollouts = (rollout(0, problem.answer, pair.label), rollout(1, wrong_answer, other),
                rollout(2, wrong_answer, other), rollout(3, problem.answer, pair.label))
    reflections = (reflection(1, (0, 1), 1),  # right vs wrong: picks the right one
                   reflection(2, (2, 0), 1),  # wrong vs right: picks the wrong one
                   reflection(3, (3, 0), 2))  # right vs right: not decisive
    judgment = Judgment(pair=pair, strategy="reflectrm", rollouts=rollouts, verdict=pair.label, anchor=0,
                        reflections=reflections)
    figures = bench.stage2([judgment])
    assert figures == {"anchor_accuracy": 1.0, "decisive_reflections": 2, "reflection_picks_right": 0.5}


def test_corrections_on_the_starting_judge_report_each_change_with_its_interval():
    bench = load_bench("retrain", folder="research")

    def ev(right: list[bool]) -> dict:
        share = sum(right) / len(right)
        return {"greedy": share, "two_stage": share, "_greedy": right, "_two_stage": right}

    before, after = ev([True] * 8 + [False] * 2), ev([True] * 9 + [False])
    pool_before, pool_after = ev([False] * 4), ev([True, True, False, True])
    part2 = {"kind": "steps6", "corrected": 4,
             "corrected_pairs_before": pool_before, "corrected_pairs_after": pool_after,
             "reworded_before": pool_before, "reworded_after": pool_after,
             "heldout_all_before": before, "heldout_all_after": after}
    figures = bench.summary({"part1": {"before": before}, "part2": part2})  # part 1 built data, trained nothing
    assert "greedy_after" not in figures and figures["greedy_before"] == 0.8
    gain = figures["corrected_pairs_greedy_gain"]
    assert gain["diff"] == 0.75 and gain["fixed"] == 3
    change = figures["heldout_greedy_change"]
    assert round(change["diff"], 6) == 0.1 and change["lo"] <= 0.1 <= change["hi"] and change["mcnemar_p"] == 1.0


def test_corrections_on_the_starting_judge_with_nothing_to_correct_is_refused(monkeypatch, capsys):
    import sys

    bench = load_bench("retrain", folder="research")
    monkeypatch.setattr(sys, "argv", ["retrain.py", "--corrections-on", "start", "--skip-corrections"])
    with pytest.raises(SystemExit) as exc:
        bench.main()
    assert exc.value.code == 2 and "would train nothing" in capsys.readouterr().err
