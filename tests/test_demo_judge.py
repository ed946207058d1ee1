"""The transformers backend on the real demo judge: log-probs, seeds, batching, limits."""

from __future__ import annotations

import pytest

from reflectrm.backends.base import GenerationRequest, SamplingParams
from reflectrm.core import JudgeConfig, PreferencePair
from reflectrm.core.prompts import response_prompt
from reflectrm.demo.tasks import make_pairs
from reflectrm.errors import BackendError, ContextLengthError
from reflectrm.pipeline import judge, judge_many

CONFIG = JudgeConfig(max_new_tokens=96, reflection_max_new_tokens=96)


def test_sampled_logprobs_match_teacher_forced_rescoring(demo_backend):
    pair = make_pairs(3, seed=5)[1]
    prompt = tuple(response_prompt(pair))
    (completions,) = demo_backend.generate(
        [GenerationRequest(prompt, (11, 12, 13))], SamplingParams(temperature=1.0, max_new_tokens=96, logprobs=True)
    )
    for c in completions:
        assert c.num_tokens == len(c.token_ids) == len(c.token_logprobs) > 5
        rescored = demo_backend.score(prompt, c.token_ids)
        assert max(abs(a - b) for a, b in zip(c.token_logprobs, rescored)) < 1e-4
        assert all(lp <= 0.0 for lp in c.token_logprobs)


def test_same_seed_same_judgment_other_seed_other_samples(demo_backend):
    pair = make_pairs(1, seed=8)[0]
    a = judge(pair, demo_backend, CONFIG.with_(seed=3))
    b = judge(pair, demo_backend, CONFIG.with_(seed=3))
    c = judge(pair, demo_backend, CONFIG.with_(seed=4))
    assert a.rollouts == b.rollouts and a.reflections == b.reflections and a.verdict == b.verdict
    assert [r.text for r in a.rollouts] != [r.text for r in c.rollouts]
    assert len({r.text for r in a.rollouts}) > 1  # samples of one prompt differ from each other


def test_a_judgment_does_not_depend_on_its_batch(demo_backend):
    pairs = make_pairs(3, seed=9)
    alone = judge(pairs[2], demo_backend, CONFIG)
    batched = list(judge_many(pairs, demo_backend, CONFIG, batch_size=3))[2]
    assert [r.text for r in alone.rollouts] == [r.text for r in batched.rollouts]
    assert alone.verdict == batched.verdict


def test_demo_judge_full_anatomy(demo_backend):
    pair = make_pairs(1, seed=10)[0]
    j = judge(pair, demo_backend, CONFIG)
    assert len(j.rollouts) == 8 and sum(r.parseable for r in j.rollouts) >= 6
    assert j.anchor is not None and j.verdict in (1, 2)
    parseable_others = [r for r in j.rollouts if r.parseable and r.index != j.anchor]
    assert len(j.reflections) == len(parseable_others)
    assert j.model_revision.startswith("sha256:") and j.backend == "transformers"


def test_demo_judge_is_better_than_chance_and_imperfect(demo_backend):
    pairs = make_pairs(48, seed=77, source="test-heldout")
    greedy = list(judge_many(pairs, demo_backend, JudgeConfig(strategy="greedy", max_new_tokens=96), batch_size=16))
    accuracy = sum(bool(j.correct) for j in greedy) / len(greedy)
    assert 0.6 <= accuracy <= 0.97


def test_prompt_longer_than_context_is_refused(demo_backend):
    huge = PreferencePair.from_query("What is 1 + 1?", "2 " * 5000, "3")
    with pytest.raises(ContextLengthError, match="context is 4096 tokens"):
        judge(huge, demo_backend, CONFIG)


@pytest.mark.parametrize("model", ["/no/such/model", "./missing-folder", "a/b/c"])
def test_unknown_model_path_is_a_backend_error(model):
    from reflectrm.backends import load_backend

    with pytest.raises(BackendError, match="does not exist"):
        load_backend(model)
