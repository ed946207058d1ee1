"""A real TRL GRPO step of a tiny random policy on CPU, rewarded by the demo judge through `PairwiseReward`."""

from __future__ import annotations

import pytest

from reflectrm.core import JudgeConfig
from reflectrm.serving.rewards import PairwiseReward

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory):
    """A 2-layer random Qwen3 with the demo tokenizer, saved to a folder (as a user's policy would be)."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    from reflectrm.demo import DEMO_MODEL_DIR

    tok = AutoTokenizer.from_pretrained(str(DEMO_MODEL_DIR))
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=1024,
                         tie_word_embeddings=True, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    path = tmp_path_factory.mktemp("policy")
    Qwen3ForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_one_grpo_step_with_the_demo_judge_as_reward(tiny_policy, demo_backend, tmp_path):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    seen = []
    judge_config = JudgeConfig(n=2, max_new_tokens=64, reflection_max_new_tokens=64)
    reward = PairwiseReward(demo_backend, judge_config=judge_config, on_judgments=seen.extend)
    calls = []

    def recorded(prompts, completions, **kw):
        rewards = reward(prompts, completions, **kw)
        calls.append((list(prompts), list(completions), rewards))
        return rewards

    recorded.__name__ = reward.__name__
    questions = ("What is 2 + 3?", "What is 7 - 4?")
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": q}]} for q in questions])
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2, max_steps=1,
                      max_completion_length=6, learning_rate=1e-3, use_cpu=True, bf16=False, report_to="none",
                      disable_tqdm=True, save_strategy="no", logging_steps=1, seed=0)
    trainer = GRPOTrainer(model=str(tiny_policy), reward_funcs=recorded, args=args, train_dataset=data)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.train()

    assert trainer.state.global_step == 1
    [(prompts, completions, rewards)] = calls
    assert len(completions) == 2 and prompts[0] == prompts[1]  # one group of num_generations completions
    # Win rates of a two-completion group: complementary (or both 0.5 when the judge cannot tell)
    assert all(0.0 <= r <= 1.0 for r in rewards) and sum(rewards) == pytest.approx(1.0)
    # Each distinct pair judged in both orders, with the full anatomy (2 samples; an anchor when parseable)
    assert len(seen) in (0, 2) and all(len(j.rollouts) == 2 for j in seen)
    if completions[0] != completions[1]:
        original, swapped = seen
        assert swapped.pair.response_1 == original.pair.response_2  # the second judgment is the other order
        first_wins = [0.5 if j.verdict is None else float(j.verdict == want)
                      for j, want in ((original, 1), (swapped, 2))]
        assert rewards[0] == pytest.approx(sum(first_wins) / 2)  # the reward is read off the judge's verdicts
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert logged and logged[0]["reward"] == pytest.approx(sum(rewards) / 2)
    after = trainer.model.state_dict()
    assert any((before[k] - after[k]).abs().max() > 0 for k in before) or rewards[0] == rewards[1]
