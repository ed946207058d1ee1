"""The demo domain's arithmetic reward: a case table, and the TRL calling convention."""

import pytest

from reflectrm.core.prompts import Task, format_output, reflection_prompt, response_prompt
from reflectrm.demo.rewards import arithmetic_true
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
