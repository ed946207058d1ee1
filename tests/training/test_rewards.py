"""Reward functions in TRL's calling convention: a table of outputs, hostile ones included."""

from __future__ import annotations

import pytest

from reflectrm.training.rewards import (
    MIN_ANALYSIS_CHARS,
    REWARDS,
    accuracy_reward,
    completion_text,
    format_reward,
    reward_weights,
)

R1 = "<Analysis>1 + 1 = 2, so Response 1 is right.</Analysis>\n<Result>Response 1 is better than Response 2</Result>"
C2 = "<Analysis>Critique 2 computes correctly.</Analysis>\n<Result>Critique 2 is better than Critique 1</Result>"
A = "<Analysis>2 + 2 = 4, so one is right.</Analysis>"  # an analysis long enough for the format requirement

# (completion, label, task, accuracy, format)
CASES = [
    pytest.param(R1, 1, "response", 1.0, 1.0, id="right-verdict"),
    pytest.param(R1, 2, "response", 0.0, 1.0, id="wrong-verdict-well-formed"),
    # trap: a conversational completion is a list of messages, not a string
    pytest.param([{"role": "assistant", "content": R1}], 1, "response", 1.0, 1.0, id="conversational"),
    pytest.param(C2, 2, "analysis", 1.0, 1.0, id="reflection-right"),
    pytest.param(C2, 1, "analysis", 0.0, 1.0, id="reflection-wrong"),
    # trap: the noun must match the task; a reflection verdict naming Responses names no critique
    pytest.param(R1, 1, "analysis", 0.0, 0.0, id="response-verdict-on-reflection-task"),
    pytest.param(C2, 2, "response", 0.0, 0.0, id="critique-verdict-on-response-task"),
    # trap: "worse than" names the other candidate
    pytest.param(A + "<Result>Response 1 is worse than Response 2</Result>", 2, "response",
                 1.0, 1.0, id="worse-than"),
    # trap: a repaired verdict (no closing tag) still counts for accuracy, not for format
    pytest.param(A + "<Result>Response 2 is better than Response 1", 2, "response",
                 1.0, 0.0, id="repaired-missing-close-tag"),
    # trap: two results that disagree must not be scored as either
    pytest.param(A + "<Result>Response 1 is better than Response 2</Result>"
                 "<Result>Response 2 is better than Response 1</Result>", 1, "response", 0.0, 0.0, id="contradiction"),
    pytest.param("<Analysis>I cannot decide.</Analysis>", 1, "response", 0.0, 0.0, id="no-result"),
    pytest.param("", 1, "response", 0.0, 0.0, id="empty"),
    pytest.param([], 1, "response", 0.0, 0.0, id="empty-message-list"),
    pytest.param("<Result>Response 3 is better than Response 1</Result>", 1, "response", 0.0, 0.0, id="bad-index"),
    pytest.param("<Analysis>" + "x" * 100_000, 1, "response", 0.0, 0.0, id="runaway-analysis"),
    # the format requirement (issue 30): a verdict without an analysis earns nothing, however right
    pytest.param("<Result>2</Result>", 2, "response", 0.0, 0.0, id="bare-result-alone"),
    pytest.param("<Result>Response 2 is better than Response 1</Result>", 2, "response", 0.0, 0.0,
                 id="result-without-analysis"),
    pytest.param("<Analysis></Analysis><Result>Response 2 is better than Response 1</Result>", 2, "response",
                 0.0, 0.0, id="empty-analysis"),
    pytest.param("<Analysis>   \n  </Analysis><Result>Response 2 is better than Response 1</Result>", 2, "response",
                 0.0, 0.0, id="blank-analysis"),
    pytest.param("<Analysis>ok</Analysis><Result>Response 2 is better than Response 1</Result>", 2, "response",
                 0.0, 0.0, id="analysis-under-the-minimum"),
    pytest.param("<think>long thoughts here</think><Analysis></Analysis><Result>Critique 2 is better than "
                 "Critique 1</Result>", 2, "analysis", 0.0, 0.0, id="thinking-is-no-analysis"),
]


@pytest.mark.parametrize(("completion", "label", "task", "accuracy", "fmt"), CASES)
def test_reward_table(completion, label, task, accuracy, fmt):
    assert accuracy_reward(completions=[completion], label=[label], task=[task]) == [accuracy]
    assert format_reward(completions=[completion], task=[task]) == [fmt]


def test_called_as_trl_calls_it_one_reward_per_completion():
    # TRL passes prompts, completion_ids, every extra column and trainer hooks as keywords.
    rewards = accuracy_reward(
        prompts=[[{"role": "user", "content": "q"}]] * 3,
        completions=[R1, R1, "garbage"],
        completion_ids=[[1], [2], [3]],
        label=[1, 2, 1],
        task=["response"] * 3,
        pair_id=["a", "b", "c"],
        trainer_state=None,
    )
    assert rewards == [1.0, 0.0, 0.0]


def test_a_bad_task_column_is_an_error_not_a_silent_zero():
    with pytest.raises(ValueError, match="task must be 'response' or 'analysis'"):
        accuracy_reward(completions=[R1], label=[1], task=["Response"])


def test_mismatched_columns_are_an_error():
    with pytest.raises(ValueError):
        accuracy_reward(completions=[R1, R1], label=[1], task=["response", "response"])


def test_completion_text_takes_the_last_message():
    assert completion_text([{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]) == "b"


def test_reward_weights_keep_accuracy_and_drop_zero_weights():
    assert reward_weights() == {"accuracy": 1.0}
    assert reward_weights(format=0.0, arithmetic=0.5) == {"accuracy": 1.0, "arithmetic": 0.5}
    assert set(reward_weights(format=0.2, arithmetic=1.0)) <= set(REWARDS)


# (statement, the candidate a parser that skips the negation would read): the statement means the other one
INVERTIBLE = [
    pytest.param("Response 2 is not better than Response 1", 2, "response", id="not-better"),
    pytest.param("Response 1 is not better than Response 2", 1, "response", id="not-better-1"),
    pytest.param("Response 2 isn't better than Response 1", 2, "response", id="isnt-better"),
    pytest.param("Response 1 is not worse than Response 2", 2, "response", id="not-worse"),
    pytest.param("Response 2 is no better than Response 1", 2, "response", id="no-better"),
    pytest.param("Response 1 is probably not better than Response 2", 1, "response", id="hedged-not"),
    pytest.param("Critique 2 is not better than Critique 1", 2, "analysis", id="critique-not-better"),
    pytest.param("Critique 1 isn't worse than Critique 2", 2, "analysis", id="critique-isnt-worse"),
]


@pytest.mark.parametrize(("statement", "inverted", "task"), INVERTIBLE)
def test_accuracy_never_pays_for_an_inverted_verdict(statement, inverted, task):
    """A negated verdict is invalid: it earns 0 whichever label the row carries (neither reading is paid)."""
    completion = f"{A}<Result>{statement}</Result>"
    assert accuracy_reward(completions=[completion], label=[inverted], task=[task]) == [0.0]  # the inverted reading
    assert accuracy_reward(completions=[completion], label=[3 - inverted], task=[task]) == [0.0]  # never guessed
    assert format_reward(completions=[completion], task=[task]) == [0.0]


HACKS = ["<Result>2</Result>", "<Analysis></Analysis><Result>Response 2 is better than Response 1</Result>"]


def test_the_format_requirement_is_a_named_parameter():
    """On by default; `min_analysis_chars=0` pays the verdict alone (the plain outcome reward), and the
    minimum is a length: one character short of it earns nothing."""
    assert MIN_ANALYSIS_CHARS > 0
    assert accuracy_reward(completions=HACKS, label=[2, 2], task=["response"] * 2) == [0.0, 0.0]
    assert accuracy_reward(completions=HACKS, label=[2, 2], task=["response"] * 2, min_analysis_chars=0) == [1.0, 1.0]
    assert format_reward(completions=HACKS[1:], task=["response"], min_analysis_chars=0) == [1.0]
    exact = "<Analysis>" + "x" * 30 + "</Analysis><Result>Response 2 is better than Response 1</Result>"
    assert accuracy_reward(completions=[exact], label=[2], task=["response"], min_analysis_chars=30) == [1.0]
    assert accuracy_reward(completions=[exact], label=[2], task=["response"], min_analysis_chars=31) == [0.0]


def test_the_trainer_passes_the_configured_requirement(tmp_path):
    """`TrainConfig.min_analysis_chars` reaches the reward TRL calls (through grpo's recording wrapper)."""
    from reflectrm.training.grpo import TrainConfig, _recording
    from reflectrm.training.runs import RunFiles

    for chars, want in ((16, [0.0, 0.0]), (0, [1.0, 1.0])):
        config = TrainConfig(min_analysis_chars=chars, completions_to_record=0)
        reward = _recording(accuracy_reward, RunFiles(tmp_path), config, record=False)
        assert reward(completions=HACKS, label=[2, 2], task=["response"] * 2, trainer_state=None) == want
