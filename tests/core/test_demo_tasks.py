"""The demo domain is verifiable: labels, wrong answers and target analyses are all exact."""

import random

import pytest

from reflectrm.core.parsing import parse_output
from reflectrm.core.prompts import Task
from reflectrm.core.types import PreferencePair
from reflectrm.demo.tasks import (
    KINDS,
    QUESTION_FORMS,
    fresh_pairs,
    make_pairs,
    other_problems,
    problem_of,
    reflection_example,
    response_example,
    stated_value,
)


def test_labels_point_at_the_right_answer():
    for pair in make_pairs(300, seed=1):
        p = problem_of(pair)
        right = pair.response_1 if pair.label == 1 else pair.response_2
        wrong = pair.response_2 if pair.label == 1 else pair.response_1
        assert stated_value(right, p) == p.answer
        assert stated_value(wrong, p) != p.answer


def test_kinds_and_labels_are_balanced():
    pairs = make_pairs(300, seed=2)
    assert {p.subset for p in pairs} == set(KINDS)
    assert 0.4 < sum(p.label == 1 for p in pairs) / len(pairs) < 0.6


def test_pairs_are_reproducible_and_seed_dependent():
    assert make_pairs(20, seed=3) == make_pairs(20, seed=3)
    assert make_pairs(20, seed=3) != make_pairs(20, seed=4)


@pytest.mark.parametrize("seed", range(5))
def test_target_outputs_parse_to_the_label(seed):
    rng = random.Random(seed)
    for pair in make_pairs(50, seed=seed):
        assert parse_output(response_example(pair), task=Task.RESPONSE).choice == pair.label
        c1, c2, target = reflection_example(rng, pair)
        choice = parse_output(target, task=Task.ANALYSIS).choice
        right = c1 if choice == 1 else c2
        # the preferred critique is the one whose own verdict is the label
        assert right.startswith(f"{problem_of(pair).expression} = {problem_of(pair).answer}.")


def test_analyses_check_each_answer_against_the_computed_result():
    from reflectrm.demo.tasks import response_analysis

    pair = PreferencePair.from_query("What is 17 + 25?", "It is 42.", "The answer is 52.", label=1)
    assert response_analysis(pair, 42) == (
        "17 + 25 = 42. Response 1: 42 - 42 = 0, right. Response 2: 52 - 42 = 10, wrong.", 1)
    # a slip in the judge's own arithmetic carries through to its checks and its verdict
    assert response_analysis(pair, 52) == (
        "17 + 25 = 52. Response 1: 42 - 52 = -10, wrong. Response 2: 52 - 52 = 0, right.", 2)
    # neither answer agrees with the result: the verdict defaults to Response 1
    assert response_analysis(pair, 41)[1] == 1
    assert response_analysis(PreferencePair.from_query("7 * 3 = ?", "no idea", "21"), 21)[0].endswith(
        "Response 1: no answer, wrong. Response 2: 21 - 21 = 0, right.")


def test_reflection_checks_each_critique_against_the_right_result():
    from reflectrm.demo.tasks import reflection_analysis

    pair = PreferencePair.from_query("What is 9 - 4?", "5", "6", label=1)
    assert reflection_analysis(pair, 6, 5) == (
        "9 - 4 = 5. Critique 1: 6 - 5 = 1, wrong. Critique 2: 5 - 5 = 0, right.", 2)


def test_fresh_pairs_ask_the_same_problems_in_every_other_wording():
    pairs = make_pairs(60, seed=7)
    fresh = fresh_pairs(pairs, seed=8)
    asked = {problem_of(p): set() for p in pairs}
    for p in pairs:
        asked[problem_of(p)].add(p.query)
    # every problem, in each wording not used for it, exactly once; never an evaluated conversation
    assert len(fresh) == sum(len(QUESTION_FORMS) - len(queries) for queries in asked.values())
    assert {problem_of(p) for p in fresh} == set(asked)
    assert not {p.query for p in fresh} & {p.query for p in pairs}
    assert len({p.query for p in fresh}) == len(fresh)
    for p in fresh:  # still labelled pairs of a right and a wrong answer
        right, wrong = (p.response_1, p.response_2) if p.label == 1 else (p.response_2, p.response_1)
        assert stated_value(right, problem_of(p)) == problem_of(p).answer != stated_value(wrong, problem_of(p))
    assert 0.3 < sum(p.label == 1 for p in fresh) / len(fresh) < 0.7
    assert fresh_pairs(pairs, seed=8) == fresh and fresh_pairs(pairs, seed=9) != fresh


def test_other_problems_drops_every_wording_of_a_problem_asked_elsewhere():
    pairs = make_pairs(60, seed=7)
    fresh = fresh_pairs(pairs[:20], seed=8)
    kept = other_problems(pairs, fresh)
    assert kept == [p for p in pairs if problem_of(p) not in {problem_of(q) for q in pairs[:20]}]
    assert pairs[0] not in kept
