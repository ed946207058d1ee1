"""The multi-step demo domain: every judgment verifiable, no position shortcut in the reflections."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from reflectrm.core.parsing import parse_output
from reflectrm.core.prompts import Task
from reflectrm.demo import steps
from reflectrm.demo.steps import (
    Balance,
    analysis,
    chain_of,
    difference_kind,
    first_difference,
    make_pairs,
    parse_analysis,
    reflection_analysis,
    reflection_example,
)

PAIRS = make_pairs(600, seed=7)


def test_pairs_have_exactly_one_right_answer_and_balanced_labels():
    labels = Counter(p.label for p in PAIRS)
    assert abs(labels[1] - labels[2]) < 80
    assert set(Counter(p.subset for p in PAIRS)) == set(steps.KINDS)
    for p in PAIRS:
        chain = chain_of(p)
        values = steps.stated(p)
        right = values[p.label - 1]
        assert right == chain.answer and values[2 - p.label] != chain.answer
        assert p.subset == chain.kind
        low, high = steps.DEFAULT_RANGES.values
        assert all(low <= e.z <= high for e in steps.steps_of(chain))


@pytest.mark.parametrize("name", sorted(steps.RANGES))
def test_every_problem_stays_in_its_ranges(name):
    ranges = steps.RANGES[name]
    assert ranges.name == name
    for p in make_pairs(400, seed=5, ranges=ranges):
        chain = chain_of(p)
        assert ranges.starts[0] <= chain.start <= ranges.starts[1]
        assert all(ranges.operands[0] <= b <= ranges.operands[1] for _, b in chain.ops)
        assert all(ranges.values[0] <= e.z <= ranges.values[1] for e in steps.steps_of(chain))
        assert steps.stated(p)[2 - p.label] != chain.answer
    assert make_pairs(50, seed=5) == make_pairs(50, seed=5, ranges=steps.RANGES["narrow"])  # the default stream


def test_right_analysis_is_right_picks_the_label_and_reads_back():
    for p in PAIRS:
        a = analysis(p)
        assert all(e.right for e in a.steps) and [c.right for c in a.checks] == [p.label == 1, p.label == 2]
        assert a.verdict == p.label
        parsed = parse_output(steps.response_example(p), task=Task.RESPONSE)
        assert parsed.choice == p.label and parsed.analysis == a.text
        assert parse_analysis(a.text) == a


def test_a_slip_propagates_and_later_steps_follow_it():
    p = PAIRS[1]
    chain = chain_of(p)
    a = analysis(p, slips={0: steps.steps_of(chain)[0].z + 1})
    assert not a.steps[0].right and all(e.right for e in a.steps[1:])
    assert a.result == chain.answer + 1  # +/- only: an off-by-one at step 1 ends off by one
    assert first_difference(analysis(p), a) == ("step", 0)
    assert difference_kind(analysis(p), a) == "step 1"


def test_an_analysis_whose_result_matches_neither_response_picks_response_1():
    p = next(p for p in PAIRS if p.label == 2)
    chain = chain_of(p)
    a = analysis(p, slips={len(chain.ops) - 1: 99})
    assert not any(c.right for c in a.checks) and a.verdict == 1


@pytest.mark.parametrize("op, x, y", [("+", 9, 8), ("-", 34, 5)])
def test_inverse_check_passes_exactly_for_the_right_value(op, x, y):
    right = steps.apply(x, op, y)
    for z in range(right - 12, right + 13):
        text, ok = steps.inverse_check(steps.Eq(3, x, op, y, z))
        assert ok == (z == right)
        back = z - y if op == "+" else z + y
        assert text == f"Check {z} {'-' if op == '+' else '+'} {y} = {back}, {back} - {x} = {back - x}"


def test_reflection_walks_to_the_first_difference_checks_it_and_picks_the_critique_right_there():
    rng, balance = random.Random(3), Balance()
    seen = Counter()
    for p in PAIRS:
        c1, c2, target, kind = reflection_example(rng, p, balance)
        parsed = parse_output(target, task=Task.ANALYSIS)
        a, b = parse_analysis(c1), parse_analysis(c2)
        assert parsed.choice in (1, 2) and a is not None and b is not None
        seen[kind] += 1
        if kind == "agree":
            assert c1 == c2 and "The critiques agree" in parsed.analysis
            continue
        assert difference_kind(a, b, chain_of(p)) == kind and c1 != c2
        where, i = first_difference(a, b)
        chosen, other = (a, b)[parsed.choice - 1], (a, b)[2 - parsed.choice]
        if where == "step":  # the chosen critique is the one right at the first difference
            assert steps.step_right(chosen.steps[i], chain_of(p)) and not steps.step_right(other.steps[i], chain_of(p))
            assert parsed.analysis.count("Step ") == i + 1 and f"Step {i + 1}: " in parsed.analysis
            op, b = chain_of(p).ops[i]
            assert f"The question says {'add' if op == '+' else 'subtract'} {b}" in parsed.analysis
            # a check of Critique 1's arithmetic, unless Critique 1 misread the step (then Critique 2 at once)
            assert ("Check " in parsed.analysis) == ((a.steps[i].op, a.steps[i].y) == (op, b))
        else:
            c = chosen.checks[i]
            assert c.d == c.stated - c.computed and f"= {c.d}, Critique" in parsed.analysis
        if all(steps.step_right(e, chain_of(p)) for e in chosen.steps):  # a right analysis beats a wrong one
            assert chosen == analysis(p)
    assert {"agree", "step 1", "step 4", "step 2 misread", "Response 1", "Response 2"} <= set(seen)


def test_two_wrong_critiques_the_one_that_slipped_later_wins():
    p = next(p for p in PAIRS if p.subset == "steps5")
    chain = chain_of(p)
    early = analysis(p, slips={1: steps.steps_of(chain)[1].z + 2})
    late = analysis(p, slips={3: steps.steps_of(chain)[3].z - 1})
    for c1, c2, want in ((early, late, 2), (late, early, 1)):
        text, choice = reflection_analysis(c1, c2, tie_choice=1, chain=chain)
        assert choice == want and text.count("Step ") == 2


def test_the_walk_subtracts_the_critiques_values_and_stops_at_the_first_nonzero_difference():
    p = next(p for p in PAIRS if p.subset == "steps5")
    chain = chain_of(p)
    z = steps.steps_of(chain)[2].z
    right, wrong = analysis(p), analysis(p, slips={2: z + 1})
    text, choice = reflection_analysis(right, wrong, tie_choice=1, chain=chain)
    walked = re.findall(r"; (-?\d+) - (-?\d+) = (-?\d+)\.", text)
    assert [int(d) for *_, d in walked] == [0, 0, -1] and walked[-1][:2] == (str(z), str(z + 1))
    assert choice == 1 and steps.analysis_true(text, chain, task=Task.ANALYSIS)
    false_walk = text.replace(f"{z} - {z + 1} = -1.", f"{z} - {z + 1} = 0.")
    assert not steps.analysis_true(false_walk, chain, task=Task.ANALYSIS)  # a walk's subtraction is checked too
    agree, _ = reflection_analysis(right, right, tie_choice=2, chain=chain)
    assert agree.count(" = 0.") == len(chain.ops) and "The critiques agree, Critique 2 is right." in agree


def test_a_misread_step_is_caught_by_reading_the_question_again_in_either_order():
    p = next(p for p in PAIRS if p.subset == "steps5")
    chain = chain_of(p)
    read = steps.misread(random.Random(0), chain, 2)
    assert read is not None and read != chain.ops[2]
    right, wrong = analysis(p), analysis(p, misreads={2: read})
    assert wrong.steps[2].right and not steps.step_right(wrong.steps[2], chain)  # true arithmetic on a wrong step
    for c1, c2, want in ((right, wrong, 1), (wrong, right, 2)):
        text, choice = reflection_analysis(c1, c2, tie_choice=1, chain=chain)
        assert choice == want and text.count("Step ") == 3 and "The question says" in text
    assert difference_kind(right, wrong, chain) == "step 3 misread" and difference_kind(right, wrong) == "step 3"


def test_no_position_shortcut_per_kind_of_disagreement():
    rng, balance = random.Random(11), Balance()
    picks: dict[str, Counter] = {}
    for p in make_pairs(3000, seed=12):
        *_, target, kind = reflection_example(rng, p, balance)
        picks.setdefault(kind, Counter())[parse_output(target, task=Task.ANALYSIS).choice] += 1
    assert {"agree", "step 1", "step 6", "step 6 misread", "Response 1", "Response 2"} <= set(picks)
    for kind, c in picks.items():
        assert abs(c[1] - c[2]) <= 1, (kind, c)


def test_chain_is_read_back_from_every_question_form():
    for p in PAIRS[:20]:
        assert chain_of(p).expression in p.query
    with pytest.raises(ValueError, match="not a demo running-sum query"):
        chain_of(steps.PreferencePair.from_query("What is 3 + 4?", "7", "8", label=1))


def test_parse_analysis_refuses_text_not_in_the_format():
    assert parse_analysis("Response 1 is right.") is None
    assert parse_analysis("") is None


def test_arithmetic_reward_checks_running_sums_step_by_step():
    from reflectrm.core.prompts import reflection_prompt, response_prompt
    from reflectrm.core.types import messages_to_dicts
    from reflectrm.demo.rewards import arithmetic_reward

    p = next(p for p in PAIRS if p.subset == "steps5")
    chain = chain_of(p)
    right, slip = analysis(p), analysis(p, slips={2: steps.steps_of(chain)[2].z + 1})
    copied_wrong = right.text.replace(f"= {right.steps[1].z}.", f"= {right.steps[1].z + 10}.", 1)
    prompt = messages_to_dicts(response_prompt(p))
    texts = [steps.response_example(p), f"<Analysis>{slip.text}</Analysis>\n<Result>Response 1 is better</Result>",
             f"<Analysis>{copied_wrong}</Analysis>\n<Result>Response 1 is better</Result>",
             f"<Analysis>{analysis(p, wrong_diff={1: 5}).text}</Analysis>\n<Result>Response 1 is better</Result>"]
    assert arithmetic_reward([prompt] * 4, texts, ["response"] * 4) == [1.0, 0.0, 0.0, 0.0]
    refl_prompt = messages_to_dicts(reflection_prompt(p, right.text, slip.text))
    good, _ = reflection_analysis(right, slip, tie_choice=1, chain=chain)
    bad = good.replace(" = 0, Critique", " = 1, Critique")
    outs = [f"<Analysis>{t}</Analysis>\n<Result>Critique 1 is better than Critique 2</Result>" for t in (good, bad)]
    assert arithmetic_reward([refl_prompt] * 2, outs, ["analysis"] * 2) == [1.0, 0.0]


def test_a_careless_judge_drops_the_carry_only_at_its_blind_spots_and_continues_from_what_it_wrote():
    assert steps.blind_spot(27, "+", 8) and steps.blind_spot(19, "+", 9)
    assert not steps.blind_spot(21, "+", 8)  # no carry
    assert not steps.blind_spot(27, "+", 7) and not steps.blind_spot(27, "-", 8)  # not 8 or 9 added
    chain = steps.Chain(27, (("+", 8), ("-", 3), ("+", 9)))  # 35, 32, 41: blind spots at steps 1 and 3
    assert steps.careless_slips(random.Random(0), chain, 0.0) == {}
    assert steps.careless_slips(random.Random(0), chain, 1.0) == {0: 25, 2: 21}  # 25 - 3 = 22; 22 + 9 = 31, dropped to 21
    chain = steps.Chain(27, (("+", 8), ("+", 4)))  # 35, 39; dropped: 25, then 29 (no carry left to drop)
    assert steps.careless_slips(random.Random(0), chain, 1.0) == {0: 25}
    rng = random.Random(1)
    drops = [steps.careless_slips(rng, steps.Chain(27, (("+", 8),)), 0.65) for _ in range(4000)]
    assert 0.62 < sum(bool(d) for d in drops) / 4000 < 0.68


def test_drops_a_carry_finds_the_careless_habit_in_an_analysis_and_nothing_else():
    p = next(p for p in PAIRS if any(steps.blind_spot(e.x, e.op, e.y) for e in steps.steps_of(chain_of(p))))
    i, e = next((i, e) for i, e in enumerate(steps.steps_of(chain_of(p))) if steps.blind_spot(e.x, e.op, e.y))
    assert not steps.drops_a_carry(analysis(p))
    assert steps.drops_a_carry(analysis(p, slips={i: e.z - 10}))
    assert not steps.drops_a_carry(analysis(p, slips={i: e.z - 1}))  # another slip there is not the habit
