"""Group rewards from pairwise judgments, on scripted judges whose preferences are known."""

from __future__ import annotations

import re

import pytest

from reflectrm.backends import ScriptedBackend
from reflectrm.core import JudgeConfig
from reflectrm.errors import ConfigError, InputError
from reflectrm.serving.rewards import PairwiseReward, RewardConfig, group_rewards, judgments_needed, matches
from tests.conftest import critique_output, response_output

CONFIG = JudgeConfig(n=2, max_new_tokens=8, reflection_max_new_tokens=8)


def judge_by(prefer):
    """A scripted judge: every sample picks prefer(response_1, response_2) -> 1 or 2 (None: unparseable)."""

    def responder(text, seed, params):
        if "## Critiques for Judgment" in text:
            return critique_output(1)
        r1 = re.search(r"\[Response 1\]\n(.*?)\n\[Response 2\]", text, re.S).group(1)
        r2 = re.search(r"\[Response 2\]\n(.*?)\n\n## Output", text, re.S).group(1)
        choice = prefer(r1, r2)
        return response_output(choice) if choice else "no verdict"

    return ScriptedBackend(responder)


def stage1_prompts(backend):
    return {text for text, _, params in backend.calls if params.logprobs}


def test_round_robin_win_rates_follow_the_judges_order():
    backend = judge_by(lambda a, b: 1 if len(a) > len(b) else 2)  # longer is better, whatever the order
    [rewards] = group_rewards(["q"], [["a", "bbb", "cc"]], backend, judge_config=CONFIG)
    assert rewards == [0.0, 1.0, 0.5]
    # 3 pairs x 2 orders = 6 judgments, each with its own stage-1 prompt
    assert len(stage1_prompts(backend)) == 6 == judgments_needed(3, config=RewardConfig())


def test_position_bias_cancels_in_both_orders():
    backend = judge_by(lambda a, b: 1)  # always the first response
    [rewards] = group_rewards(["q"], [["x", "y", "z", "w"]], backend, judge_config=CONFIG)
    assert rewards == [0.5] * 4
    [one_order] = group_rewards(["q"], [["x", "y"]], judge_by(lambda a, b: 1), judge_config=CONFIG,
                                config=RewardConfig(both_orders=False))
    assert one_order == [1.0, 0.0]  # what both orders are there to cancel


def test_reference_mode_judges_each_completion_against_the_reference_only():
    backend = judge_by(lambda a, b: 1 if len(a) > len(b) else 2)
    [rewards] = group_rewards(["q"], [["a", "cccc", "bb"]], backend, judge_config=CONFIG, references=["bbb"])
    assert rewards == [0.0, 1.0, 0.0]
    assert len(stage1_prompts(backend)) == 6  # 3 completions x 2 orders


def test_identical_completions_and_abstentions_count_half():
    backend = judge_by(lambda a, b: None)
    [rewards] = group_rewards(["q"], [["same", "same", "other"]], backend, judge_config=CONFIG)
    assert rewards == [0.5, 0.5, 0.5]
    assert len(backend.calls) == 2 * 2  # one distinct pair x 2 orders x n=2: identical texts and repeats not judged


def test_capped_opponents_bound_the_cost():
    pairs = matches(16, opponents=2, rng=__import__("random").Random(0))
    assert len(pairs) <= 32 and all(i < j for i, j in pairs)
    assert {i for p in pairs for i in p} == set(range(16))  # everyone plays
    assert len(matches(16, opponents=None, rng=None)) == 120
    assert judgments_needed(16, config=RewardConfig(opponents=2)) == 64


def test_trl_reward_function_groups_repeated_prompts_and_keeps_order():
    backend = judge_by(lambda a, b: 1 if len(a) > len(b) else 2)
    reward = PairwiseReward(backend, judge_config=CONFIG)
    prompts = [[{"role": "user", "content": "p1"}]] * 2 + [[{"role": "user", "content": "p2"}]] * 2
    completions = [[{"role": "assistant", "content": t}] for t in ("a", "bb", "ccc", "d")]
    assert reward(prompts=prompts, completions=completions, completion_ids=None) == [0.0, 1.0, 1.0, 0.0]
    assert reward.__name__ == "reflectrm_pairwise"


@pytest.mark.parametrize(("call", "error", "message"), [
    pytest.param(lambda b: group_rewards(["q"], [], b, judge_config=CONFIG), InputError, "1 prompts but 0",
                 id="groups-mismatch"),
    pytest.param(lambda b: group_rewards(["q"], [["a"]], b, judge_config=CONFIG, references=[]), InputError,
                 "0 references", id="references-mismatch"),
    pytest.param(lambda b: RewardConfig(opponents=0), ConfigError, "--opponents 0 is too few", id="opponents-0"),
])
def test_bad_calls(call, error, message):
    with pytest.raises(error, match=message):
        call(judge_by(lambda a, b: 1))
