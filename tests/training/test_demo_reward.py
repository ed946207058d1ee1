"""The demo domain's arithmetic reward: a case table, and the TRL calling convention."""

import pytest

from reflectrm.core.prompts import Task, format_output, reflection_prompt, response_prompt
from reflectrm.core.types import PreferencePair
from reflectrm.demo.rewards import arithmetic_true, quoted_values
from reflectrm.demo.tasks import Problem, make_pairs, response_analysis
from reflectrm.training.rewards import REWARDS

PROBLEM = Problem("mul", 2, 3)


@pytest.mark.parametrize(("analysis", "want"), [
    ("2 * 3 = 6. Response 1: 6 - 6 = 0, right. Response 2: 8 - 6 = 2, wrong.", True),
    ("2 * 3 = 6. Response 1: 5 - 6 = -1, wrong. Response 2: no answer, wrong.", True),
    ("2 * 3 = 8. Response 1: 6 - 8 = -2, wrong. Response 2: 8 - 8 = 0, right.", False),  # wrong product
    ("2 * 3 = 6. Response 1: 6 - 6 = 1, wrong. Response 2: 8 - 6 = 2, wrong.", False),  # wrong difference
    ("2 * 3 = 6. Response 1: 6 - 6 = 0, wrong. Response 2: 8 - 6 = 2, wrong.", False),  # 0 marked wrong
    ("2 * 3 = 6. Response 1: 7 - 6 = 1, right. Response 2: 8 - 6 = 2, wrong.", False),  # 1 marked right
    ("3 * 2 = 6. Response 1: 6 - 6 = 0, right.", False),  # not the prompt's problem
    ("Response 1 is right.", False),  # no arithmetic at all
    ("", False),
])
def test_arithmetic_true(analysis, want):
    assert arithmetic_true(analysis, PROBLEM) is want


def test_each_candidate_must_be_quoted_as_the_prompt_has_it():
    pair = PreferencePair.from_query("What is 3 + 16?", "It equals 19.", "The answer is 29.", label=1)
    text = response_prompt(pair)[0].content
    quoted = quoted_values(text, Task.RESPONSE)
    assert quoted == {"Response 1": 19, "Response 2": 29}
    good, _ = response_analysis(pair, 19)
    assert arithmetic_true(good, Problem("add", 3, 16), quoted)
    misread = "3 + 16 = 19. Response 1: 19 - 19 = 0, right. Response 2: 19 - 19 = 0, right."  # 29 read as 19
    assert arithmetic_true(misread, Problem("add", 3, 16)) and not arithmetic_true(misread, Problem("add", 3, 16), quoted)
    one = "3 + 16 = 19. Response 1: 19 - 19 = 0, right."
    assert not arithmetic_true(one, Problem("add", 3, 16), quoted)  # a candidate left unchecked
    other = "3 + 16 = 19. Response 1: 19 - 18 = 1, wrong. Response 2: 29 - 18 = 11, wrong."  # not its own result
    assert not arithmetic_true(other, Problem("add", 3, 16), quoted)
    silent = PreferencePair.from_query("What is 3 + 16?", "no idea", "It equals 19.", label=2)
    assert quoted_values(response_prompt(silent)[0].content, Task.RESPONSE) == {"Response 1": None, "Response 2": 19}
    assert arithmetic_true(response_analysis(silent, 19)[0], None, {"Response 1": None, "Response 2": 19})
    # the reflection task: each critique's computed result, read from the critiques (not the responses)
    wrong, _ = response_analysis(pair, 29)
    reflection = reflection_prompt(pair, wrong, "garbled, no result")[0].content
    assert quoted_values(reflection, Task.ANALYSIS) == {"Critique 1": 29, "Critique 2": None}


def test_reward_reads_the_problem_from_the_prompt_for_both_tasks():
    pair = make_pairs(1, seed=3)[0]  # "What is 9 + 20?"
    right, _ = response_analysis(pair, 29)
    wrong, _ = response_analysis(pair, 31)
    reward = REWARDS["arithmetic"]
    prompt = [{"role": m.role, "content": m.content} for m in response_prompt(pair)]
    outputs = [format_output(right, 1, task=Task.RESPONSE), format_output(wrong, 1, task=Task.RESPONSE), "no tags"]
    completions = [[{"role": "assistant", "content": o}] for o in outputs]
    assert reward(prompts=[prompt] * 3, completions=completions, task=["response"] * 3, label=[2] * 3) == [1.0, 0.0, 0.0]
    reflection = [{"role": m.role, "content": m.content} for m in reflection_prompt(pair, wrong, right)]
    checked = "9 + 20 = 29. Critique 1: 31 - 29 = 2, wrong. Critique 2: 29 - 29 = 0, right."
    out = format_output(checked, 2, task=Task.ANALYSIS)
    assert reward(prompts=[reflection], completions=[out], task=["analysis"]) == [1.0]
