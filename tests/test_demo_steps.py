"""The multi-step demo domain: every judgment verifiable, no position shortcut in the reflections."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from reflectrm.core.parsing import parse_output
from reflectrm.core.prompts import Task
from reflectrm.demo import steps
from reflectrm.demo.steps import Balance, analysis, chain_of, first_difference, make_pairs, reflection_example

PAIRS = make_pairs(400, seed=7)


def test_pairs_have_exactly_one_right_answer_and_balanced_labels():
    labels = Counter(p.label for p in PAIRS)
    assert abs(labels[1] - labels[2]) < 60
    for p in PAIRS:
        chain = chain_of(p)
        values = steps.stated(p)
        right = values[p.label - 1]
        assert right == chain.answer and values[2 - p.label] != chain.answer
        assert p.subset == chain.kind and p.subset in steps.KINDS
        assert all(1 <= e.z <= steps.MAX_VALUE for e in steps.steps_of(chain))


def test_right_analysis_is_right_and_picks_the_label():
    for p in PAIRS:
        a = analysis(p)
        assert all(e.right for e in a.eqs)
        assert a.verdict == p.label
        parsed = parse_output(steps.response_example(p), task=Task.RESPONSE)
        assert parsed.choice == p.label and parsed.analysis == a.text


def test_a_slip_propagates_and_later_steps_follow_it():
    p = PAIRS[1]
    chain = chain_of(p)
    a = analysis(p, slips={0: steps.steps_of(chain)[0].z + 1})
    assert not a.steps[0].right and all(e.right for e in a.steps[1:])
    assert a.steps[-1].z == chain.answer + 1  # +/- only: an off-by-one at step 1 ends off by one
    assert first_difference(analysis(p), a) == 0


@pytest.mark.parametrize("op, x, y", [("+", 26, 8), ("-", 34, 5)])
def test_inverse_check_is_zero_exactly_for_the_right_value(op, x, y):
    right = steps.apply(x, op, y)
    for z in range(right - 12, right + 13):
        text, diff = steps.inverse_check(steps.Eq("step 1", x, op, y, z))
        assert (diff == 0) == (z == right)
        assert text.startswith(f"{z} ")


def test_reflection_picks_the_critique_right_at_the_first_difference_and_says_which_step():
    rng, balance = random.Random(3), Balance()
    seen = Counter()
    for p in PAIRS:
        c1, c2, target, kind = reflection_example(rng, p, balance)
        parsed = parse_output(target, task=Task.ANALYSIS)
        assert parsed.choice in (1, 2)
        if kind == "agree":
            assert c1 == c2 and "agree" in parsed.analysis
            continue
        right_text = analysis(p).text
        assert right_text in (c1, c2) and c1 != c2
        assert (c1, c2)[parsed.choice - 1] == right_text  # every judgment verifiable: it picks the right one
        assert parsed.analysis.startswith(f"Critique 1 {kind}: ") and f"Critique 2 {kind}: " in parsed.analysis
        seen[kind] += 1
    assert {"step 1", "step 2", "Response 1", "Response 2"} <= set(seen)


def test_no_position_shortcut_per_kind_of_disagreement():
    rng, balance = random.Random(11), Balance()
    picks: dict[str, Counter] = {}
    for p in make_pairs(2000, seed=12):
        *_, target, kind = reflection_example(rng, p, balance)
        picks.setdefault(kind, Counter())[parse_output(target, task=Task.ANALYSIS).choice] += 1
    assert {"agree", "step 1", "step 2", "step 3", "Response 1", "Response 2"} == set(picks)
    for kind, c in picks.items():
        assert abs(c[1] - c[2]) <= 1, (kind, c)


def test_chain_is_read_back_from_every_question_form():
    for p in PAIRS[:20]:
        assert chain_of(p).expression in p.query
    with pytest.raises(ValueError, match="not a demo running-sum query"):
        chain_of(steps.PreferencePair.from_query("What is 3 + 4?", "7", "8", label=1))


def test_build_spans_refactor_keeps_the_arithmetic_domains_loss_weights():
    """build.train's default spans (the shipped judge's build) are what they were before `spans=` existed."""
    from reflectrm.demo.build import Example, _arith_spans

    target = "<Analysis>7 + 5 = 12. Response 1: 13 - 12 = 1, wrong. Response 2: 12 - 12 = 0, right.</Analysis>\n" \
             "<Result>Response 2 is better than Response 1</Result>"
    result = (target.index("12"), target.index("12") + 2)
    taught, untaught = _arith_spans(Example("p", target, True))
    assert result in taught and untaught == []
    taught, untaught = _arith_spans(Example("p", target, False))
    assert result not in taught and untaught == [result]
    assert {target[a:b] for a, b in taught} == {"1", "0", "wrong", "right", "2"}


def test_build_step_examples_leave_the_slipped_result_out_of_the_loss():
    from reflectrm.demo.steps_build import spans, training_examples

    examples, pairs = training_examples(60, seed=2)
    assert len(pairs) == 60 and len(examples) == 120  # a preference and a reflection example per pair
    slipped = [ex for ex in examples if ex.untaught]
    assert slipped
    for ex in slipped:
        (a, b), = ex.untaught
        taught, untaught = spans(ex)
        assert untaught == [(a, b)] and (a, b) not in taught and ex.target[a:b].lstrip("-").isdigit()
    _, again = training_examples(60, seed=2, render=False)
    assert again == pairs  # a benchmark can leave the build's problems out without rendering
