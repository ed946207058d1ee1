"""GRPO's both-orders option (J1's consistency reward): every example is also written in the other order, the two
are rolled out in the same step, and a right verdict is paid the share of right verdicts in the other order.

The reward, the rows in the other order and the trainer's data order are pure logic tested on tables; one real
two-step run on the demo judge checks that TRL hands the reward both orders of every example in one call."""

from __future__ import annotations

import json
import os

import pytest

from reflectrm.core.prompts import Task
from reflectrm.demo import DEMO_MODEL_DIR, demo_domain
from reflectrm.errors import ConfigError
from reflectrm.training.grpo import TrainConfig, advantage_scale, grpo_args, reward_function, twin_blocks
from reflectrm.training.recipe import Analysis, in_both_orders, other_order, preference_example
from reflectrm.training.recipe import reflection_example, rows_hash
from reflectrm.training.rewards import accuracy_reward, consistency_reward

RIGHT_1 = "<Analysis>checked both responses step by step</Analysis><Result>1</Result>"
RIGHT_2 = "<Analysis>checked both responses step by step</Analysis><Result>2</Result>"
GARBLED = "no verdict here"

# (completions, labels, twin keys, orders) -> rewards. Label 1 in order 0 is label 2 in order 1. A right verdict
# is paid the share of right verdicts among the other order's completions; a wrong one 0.
CASES = {
    "both-orders-right": ([RIGHT_1, RIGHT_2], [1, 2], ["k", "k"], [0, 1], [1.0, 1.0]),
    "right-in-one-order-only": ([RIGHT_1, RIGHT_1], [1, 2], ["k", "k"], [0, 1], [0.0, 0.0]),
    "wrong-in-both": ([RIGHT_2, RIGHT_1], [1, 2], ["k", "k"], [0, 1], [0.0, 0.0]),
    "unparseable-partner-is-wrong": ([RIGHT_1, GARBLED], [1, 2], ["k", "k"], [0, 1], [0.0, 0.0]),
    "paid-the-other-orders-share": (  # a group of two per prompt: order 0 right 1 of 2, order 1 right 2 of 2
        [RIGHT_1, RIGHT_2, RIGHT_2, RIGHT_2], [1, 1, 2, 2], ["k", "k", "k", "k"], [0, 0, 1, 1], [1.0, 0.0, 0.5, 0.5]),
    "not-the-k-th-partner": (  # rollout 0 of order 0 is right, its k-th partner wrong: paid the share, not 0
        [RIGHT_1, RIGHT_1, RIGHT_1, RIGHT_2], [1, 1, 2, 2], ["k", "k", "k", "k"], [0, 0, 1, 1], [0.5, 0.5, 0.0, 1.0]),
    "a-group-of-four-by-quarters": (
        [RIGHT_1] * 4 + [RIGHT_2, RIGHT_1, RIGHT_1, GARBLED], [1] * 4 + [2] * 4, ["k"] * 8, [0] * 4 + [1] * 4,
        [0.25] * 4 + [1.0, 0.0, 0.0, 0.0]),
    "order-1-listed-first": ([RIGHT_2, RIGHT_1], [2, 1], ["k", "k"], [1, 0], [1.0, 1.0]),
    "partner-not-in-the-call-is-paid-as-accuracy": ([RIGHT_1, RIGHT_1], [1, 1], ["a", "b"], [0, 0], [1.0, 1.0]),
    "row-written-in-one-order": ([RIGHT_1, RIGHT_2], [1, 1], ["", ""], [0, 0], [1.0, 0.0]),
    "two-examples-do-not-mix": (
        [RIGHT_1, RIGHT_2, RIGHT_1, RIGHT_1], [1, 2, 1, 2], ["a", "a", "b", "b"], [0, 1, 0, 1], [1.0, 1.0, 0.0, 0.0]),
}


@pytest.mark.parametrize(("completions", "labels", "keys", "orders", "want"), list(CASES.values()), ids=list(CASES))
def test_the_consistency_reward_pays_only_a_verdict_right_in_both_orders(completions, labels, keys, orders, want):
    tasks = ["response"] * len(completions)
    assert consistency_reward(completions, labels, tasks, twin_key=keys, order=orders) == want


def test_without_twin_columns_the_consistency_reward_is_the_accuracy_reward():
    completions, labels, tasks = [RIGHT_1, RIGHT_2, GARBLED], [1, 1, 1], ["response"] * 3
    assert consistency_reward(completions, labels, tasks) == accuracy_reward(completions, labels, tasks) == [1, 0, 0]


ADVANTAGE_SCALES = {  # (both orders, configured scale) -> TRL's scale_rewards
    "plain-group": (False, "group", "group"), "plain-batch": (False, "batch", "batch"),
    "plain-none": (False, "none", "none"), "both-group-is-over-the-step": (True, "group", "batch"),
    "both-batch": (True, "batch", "batch"), "both-none": (True, "none", "none"),
}


@pytest.mark.parametrize(("both", "scale", "want"), list(ADVANTAGE_SCALES.values()), ids=list(ADVANTAGE_SCALES))
def test_both_orders_scales_advantages_over_the_step_where_a_group_would_cancel_the_share(tmp_path, both, scale, want):
    config = TrainConfig(both_orders=both, batch_size=2, scale_rewards=scale, device="cpu", max_steps=1)
    assert advantage_scale(config) == want
    assert grpo_args(config, tmp_path).scale_rewards == want


def test_under_the_steps_scale_the_share_weights_each_groups_update_by_its_other_order():
    """What TRL does with the rewards (group mean out, divided by the step's spread): an example right in order 0
    and mostly wrong in order 1 is learned in order 1; under the group's own spread the share would cancel."""
    import statistics

    g0 = [RIGHT_1] * 3 + [RIGHT_2]  # order 0: 3 of 4 right
    g1 = [RIGHT_1] * 3 + [RIGHT_1]  # order 1 (label 2): 0 of 4 right ...
    g1[0] = RIGHT_2  # ... but 1 of 4
    rewards = consistency_reward(g0 + g1, [1] * 4 + [2] * 4, ["response"] * 8, twin_key=["k"] * 8,
                                 order=[0] * 4 + [1] * 4)
    spread = statistics.pstdev(rewards)

    def advantages(group: list[float], scale: float) -> list[float]:
        mean = sum(group) / len(group)
        return [(r - mean) / scale for r in group]

    over_step = advantages(rewards[:4], spread) + advantages(rewards[4:], spread)
    assert max(over_step[4:]) > 2 * max(over_step[:4]) > 0  # the weak order's right verdict is pushed hardest
    plain = accuracy_reward(g0 + g1, [1] * 4 + [2] * 4, ["response"] * 8)
    by_group = [a for g in (rewards[:4], rewards[4:]) for a in advantages(g, statistics.pstdev(g))]
    assert by_group == pytest.approx([a for g in (plain[:4], plain[4:]) for a in advantages(g, statistics.pstdev(g))])


def test_both_orders_pays_the_outcome_reward_by_the_consistency_rule_and_leaves_other_rewards():
    both = TrainConfig(both_orders=True, batch_size=2, reward_weights={"accuracy": 1.0, "format": 0.5})
    assert reward_function("accuracy", both) is consistency_reward
    assert reward_function("format", both).__name__ == "format_reward"
    assert reward_function("accuracy", TrainConfig()) is accuracy_reward


PAIR = demo_domain().make_pairs(1, seed=5, source="t")[0]
A, B = Analysis(1, "first critique's walk", 1), Analysis(2, "second critique's walk", 2)


def test_the_other_order_of_a_preference_example_exchanges_the_responses_and_its_label():
    ex = preference_example(PAIR, label=1, origin="label")
    twin = other_order(PAIR, label=1, origin="label")
    text, other = ex.prompt[-1].content, twin.prompt[-1].content
    r1, r2 = PAIR.response_1, PAIR.response_2
    assert text.index(r1) < text.index(r2) and other.index(r2) < other.index(r1)
    assert (twin.label, twin.task, twin.pair_id, twin.origin) == (2, Task.RESPONSE, PAIR.id, "label")


def test_the_other_order_of_a_reflection_pair_exchanges_the_critiques_and_its_label():
    ex = reflection_example(PAIR, (A, B), label=2, origin="correction")
    twin = other_order(PAIR, label=2, critiques=(A, B), origin="correction")
    text, other = ex.prompt[-1].content, twin.prompt[-1].content
    assert text.index(A.analysis) < text.index(B.analysis) and other.index(B.analysis) < other.index(A.analysis)
    assert (twin.label, twin.task) == (1, Task.ANALYSIS)
    assert other.index(PAIR.response_1) < other.index(PAIR.response_2)  # the responses stay where they were


def test_rows_in_both_orders_share_a_key_and_say_which_order_each_is():
    row, twin = preference_example(PAIR, label=1).to_row(), other_order(PAIR, label=1, origin="preference").to_row()
    first, second = in_both_orders(row, twin)
    assert first["twin_key"] == second["twin_key"] == rows_hash([row])
    assert (first["order"], second["order"]) == (0, 1)
    assert {k: first[k] for k in row} == row and {k: second[k] for k in twin} == twin


def _rows(n: int) -> list[dict]:
    out = []
    for i in range(n):
        out += [{"x": f"{i}a", "twin_key": f"k{i}", "order": 0}, {"x": f"{i}b", "twin_key": f"k{i}", "order": 1}]
    return out


def test_the_trainer_gets_both_orders_as_adjacent_blocks_in_a_seeded_order():
    from datasets import Dataset

    rows = _rows(6)
    rows[2], rows[3] = rows[3], rows[2]  # an order-1 row written first is put second
    ds = Dataset.from_list(rows)
    shuffled = twin_blocks(ds, seed=3)
    xs = shuffled["x"]
    assert sorted(xs) == sorted(r["x"] for r in rows)
    assert all(xs[i][:-1] == xs[i + 1][:-1] and xs[i].endswith("a") for i in range(0, len(xs), 2))
    assert xs == twin_blocks(ds, seed=3)["x"] and xs != twin_blocks(ds, seed=4)["x"]


BROKEN = {
    "no-twin-columns": ([{"x": 1}], "needs rows written in both orders .*missing twin_key, order"),
    "a-key-with-one-row": ([{"x": 1, "twin_key": "k", "order": 0}], "has one row"),
    "the-same-order-twice": ([{"x": 1, "twin_key": "k", "order": 0}, {"x": 2, "twin_key": "k", "order": 0}],
                             "has a second order 0"),
    "an-order-that-is-not-0-or-1": ([{"x": 1, "twin_key": "k", "order": 2}], "has a bad order 2"),
}


@pytest.mark.parametrize(("rows", "message"), list(BROKEN.values()), ids=list(BROKEN))
def test_rows_not_in_both_orders_are_refused_in_one_line(rows, message):
    from datasets import Dataset

    with pytest.raises(ConfigError, match=message) as caught:
        twin_blocks(Dataset.from_list(rows), seed=0)
    assert "\n" not in str(caught.value)


def test_both_orders_needs_an_even_number_of_prompts_per_step():
    with pytest.raises(ConfigError, match="batch_size must be even, got 3"):
        TrainConfig(both_orders=True, batch_size=3)


@pytest.mark.parametrize(("batch", "group", "per_pass"), [(2, 4, 8), (4, 2, 2), (8, 8, 8), (6, 2, 4)])
def test_every_step_of_trls_sampler_holds_both_orders_of_each_example(tmp_path, batch, group, per_pass):
    """TRL's own sampler over the blocks, with the GRPOConfig the run builds: each generation batch (one optimizer
    step) holds both rows of every example in it, each repeated for the whole group."""
    from datasets import Dataset
    from trl.trainer.utils import RepeatSampler

    config = TrainConfig(both_orders=True, batch_size=batch, num_generations=group, per_device_batch_size=per_pass,
                         device="cpu", max_steps=5)
    args = grpo_args(config, tmp_path)
    assert args.shuffle_dataset is False
    ds = twin_blocks(Dataset.from_list(_rows(9)), seed=1)
    sampler = RepeatSampler(data_source=ds, mini_repeat_count=group, batch_size=args.generation_batch_size // group,
                            repeat_count=args.steps_per_generation, shuffle=args.shuffle_dataset, seed=args.seed)
    indexes = list(sampler)
    step = args.generation_batch_size * args.steps_per_generation
    keys = ds["twin_key"]
    orders = ds["order"]
    for start in range(0, len(indexes), step):
        seen = {}
        for i in indexes[start:start + args.generation_batch_size]:
            seen.setdefault(keys[i], []).append(orders[i])
        assert all(sorted(o) == [0] * group + [1] * group for o in seen.values()), seen


def spy_reward(completions, twin_key=None, order=None, **kwargs):  # noqa: ANN001
    """Records the twin keys and orders of each reward call (a test reward with weight 0)."""
    with open(os.environ["REFLECTRM_TEST_SPY"], "a", encoding="utf-8") as f:
        f.write(json.dumps({"twin_key": list(twin_key or []), "order": list(order or [])}) + "\n")
    return [0.0] * len(completions)


@pytest.mark.slow
def test_a_real_run_in_both_orders_rolls_out_each_example_in_both_orders_in_one_step(tmp_path, monkeypatch):
    from datasets import Dataset

    from reflectrm.training.data import DataConfig
    from reflectrm.training.data import preference_example as data_example
    from reflectrm.training.grpo import train
    from reflectrm.training.runs import read_jsonl

    domain = demo_domain()
    rows = []
    for pair in domain.make_pairs(6, seed=11, source="t"):
        ex = data_example(pair, config=DataConfig())
        twin = other_order(pair, label=ex.label, origin=ex.origin)
        rows += in_both_orders(ex.to_row(), twin.to_row())
    data = tmp_path / "data"
    Dataset.from_list(rows).save_to_disk(str(data))
    spy = tmp_path / "spy.jsonl"
    monkeypatch.setenv("REFLECTRM_TEST_SPY", str(spy))
    config = TrainConfig(both_orders=True, learning_rate=5e-5, batch_size=2, num_generations=2,
                         per_device_batch_size=4, max_completion_length=domain.output_tokens, max_steps=2,
                         save_steps=50, device="cpu", gradient_checkpointing=False, threads=1,
                         reward_weights={"accuracy": 1.0, "tests.training.test_both_orders:spy_reward": 0.0})
    result = train(data, model=str(DEMO_MODEL_DIR), output_dir=tmp_path / "run", config=config)
    assert (result.state, result.step) == ("completed", 2)
    calls = [json.loads(line) for line in spy.read_text().splitlines()]
    assert len(calls) == 2  # one call per step: the step's whole generation batch
    for call in calls:
        assert len(set(call["twin_key"])) == 1 and sorted(call["order"]) == [0, 0, 1, 1]
    recorded = read_jsonl(tmp_path / "run" / "completions.jsonl")
    assert recorded and {c["reward_fn"] for c in recorded} == {"consistency_reward"}


def test_train_both_orders_on_rows_in_one_order_is_refused_before_the_run_starts(tmp_path, capsys):
    from datasets import Dataset

    from reflectrm_app.cli import main

    data, run = tmp_path / "data", tmp_path / "run"
    Dataset.from_list([preference_example(PAIR, label=1).to_row()]).save_to_disk(str(data))
    capsys.readouterr()
    code = main(["train", "--data", str(data), "--model", str(DEMO_MODEL_DIR), "--output", str(run), "--both-orders",
                 "--batch-size", "2", "--device", "cpu"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert "needs rows written in both orders" in err and "reflectrm export training --both-orders" in err
    assert not run.exists()
