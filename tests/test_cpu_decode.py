"""The transformers backend's fast decode path (reflectrm/backends/cpu_decode.py) changes speed, not results."""

from __future__ import annotations

import copy
import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from reflectrm.backends.base import GenerationRequest, SamplingParams
from reflectrm.backends.cpu_decode import GQA_ATTENTION, GrowingLayer, gqa_attention, growing_cache
from reflectrm.core.types import ChatMessage


def _kv(rows: int, n: int, seed: int) -> tuple:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 2, n, 4, generator=g), torch.randn(rows, 2, n, 4, generator=g)


def test_growing_layer_holds_what_dynamic_layer_holds():
    from transformers.cache_utils import DynamicLayer

    grow, plain = GrowingLayer(8), DynamicLayer()  # capacity 8 < what is appended: it must grow
    for layer in (grow, plain):
        layer.update(*_kv(2, 5, 0))  # a prompt of 5 tokens for 2 prompts
        layer.batch_select_indices(torch.tensor([0, 0, 0, 1, 1]))  # fanned out to 5 rows
    for step in range(12):
        if step == 6:  # two rows finish and leave the batch
            for layer in (grow, plain):
                layer.batch_select_indices(torch.tensor([0, 2, 4]))
        new = _kv(grow.keys.shape[0], 1, 100 + step)
        got, want = grow.update(*new), plain.update(*new)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert grow.get_seq_length() == plain.get_seq_length() == 6 + step
        assert grow.get_mask_sizes(1) == plain.get_mask_sizes(1)
    assert grow._k.shape[2] >= 17 and grow._k.shape[0] == 3


def test_growing_cache_only_for_plain_dynamic_layers(demo_backend):
    cache = growing_cache(demo_backend.model, 64)
    assert cache is not None and all(type(layer).__name__ == "_GrowingLayer" for layer in cache.layers)
    sliding = copy.deepcopy(demo_backend.model.config)
    sliding.layer_types = ["sliding_attention"] * len(sliding.layer_types)
    sliding.sliding_window = 16
    assert growing_cache(types.SimpleNamespace(config=sliding), 64) is None


@pytest.mark.parametrize("q_len,kv_len,masked", [(1, 9, True), (5, 5, True), (5, 5, False), (3, 7, False)])
def test_gqa_attention_equals_sdpa_attention(q_len, kv_len, masked):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    module = types.SimpleNamespace(num_key_value_groups=2, is_causal=True, training=False)
    g = torch.Generator().manual_seed(1)
    q = torch.randn(3, 4, q_len, 8, generator=g)
    k, v = torch.randn(3, 2, kv_len, 8, generator=g), torch.randn(3, 2, kv_len, 8, generator=g)
    mask = None
    if masked:  # left padding in row 0, causal within the new positions
        mask = torch.ones(3, 1, q_len, kv_len, dtype=torch.bool).tril(kv_len - q_len)
        mask[0, :, :, :2] = False
    got, _ = gqa_attention(module, q, k, v, mask, scaling=0.35)
    want, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.35)
    assert got.shape == want.shape == (3, q_len, 4, 8)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def _plain_backend(backend, monkeypatch):
    """The same model on transformers' own sdpa attention and DynamicCache (the path before cpu_decode)."""
    from reflectrm.backends import transformers_backend as tb

    model = copy.deepcopy(backend.model)
    model.set_attn_implementation("sdpa")
    monkeypatch.setattr(tb, "use_gqa_attention", lambda m: False)
    monkeypatch.setattr(tb, "growing_cache", lambda m, capacity: None)
    return tb.TransformersBackend(model, backend.tokenizer, model_id="plain")


def test_demo_judge_uses_the_fast_path(demo_backend):
    assert demo_backend.gqa_attention  # the demo judge has 8 query heads on 4 KV heads
    assert demo_backend.model.config._attn_implementation == GQA_ATTENTION


def test_fast_path_samples_what_the_plain_path_samples(demo_backend, monkeypatch):
    plain = _plain_backend(demo_backend, monkeypatch)
    requests = [GenerationRequest((ChatMessage("user", "What is 12 + 30?"),), (0, 1, 2)),
                GenerationRequest((ChatMessage("user", "Which is larger, 7 or 70? Say why in a sentence."),), (5, 6))]
    params = SamplingParams(max_new_tokens=40, logprobs=True)
    fast_rows, plain_rows = demo_backend.generate(requests, params), plain.generate(requests, params)
    for fast, slow in zip(fast_rows, plain_rows):
        for a, b in zip(fast, slow, strict=True):
            assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
            assert a.token_logprobs == pytest.approx(b.token_logprobs, abs=1e-4)


def test_timings_and_no_forward_after_the_last_token(demo_backend):
    calls = []
    hook = demo_backend.model.register_forward_hook(lambda *a: calls.append(1))
    try:
        rows = demo_backend.generate([GenerationRequest((ChatMessage("user", "Count to twenty."),), (3, 4))],
                                     SamplingParams(max_new_tokens=6, logprobs=True))
    finally:
        hook.remove()
    longest = max(c.num_tokens + (c.finish_reason == "stop") for c in rows[0])
    assert len(calls) == longest  # one prompt forward, then one per sampled token but the last
    t = demo_backend.last_timings
    assert t["steps"] == longest - 1 and t["rows"] == 2
    parts = t["encode_s"] + t["prefill_s"] + t["forward_s"] + t["sample_s"] + t["other_s"]
    assert parts == pytest.approx(t["total_s"], abs=1e-6) and t["forward_s"] > 0


def test_threads_option_is_checked():
    from reflectrm.backends.transformers_backend import TransformersBackend
    from reflectrm.errors import ConfigError

    for bad in (0, -1, "many", 1.5):
        with pytest.raises(ConfigError, match="threads"):
            TransformersBackend(None, None, threads=bad)  # refused before the model is looked at


def test_threads_set_for_the_call_and_restored(demo_backend, monkeypatch):
    seen = []
    hook = demo_backend.model.register_forward_hook(lambda *a: seen.append(torch.get_num_threads()))
    before = torch.get_num_threads()
    monkeypatch.setattr(demo_backend, "threads", 1)
    try:
        demo_backend.generate([GenerationRequest((ChatMessage("user", "Hi"),), (1,))], SamplingParams(max_new_tokens=3))
    finally:
        hook.remove()
    assert seen and set(seen) == {1}
    assert torch.get_num_threads() == before


class _FakeTorch:
    def __init__(self) -> None:
        self.threads = 2

    def get_num_threads(self) -> int:
        return self.threads

    def set_num_threads(self, n: int) -> None:
        self.threads = n


def _run(tuner, fake, steps: int, cost: dict) -> list[int]:
    used = []
    for _ in range(steps):
        tuner.before_step()
        used.append(fake.threads)
        tuner.after_step(cost[fake.threads])
    return used


def test_thread_tuner_keeps_the_faster_count_and_probes_again():
    from reflectrm.backends.transformers_backend import ThreadTuner

    fake = _FakeTorch()
    tuner = ThreadTuner(fake, 2)
    used = _run(tuner, fake, 4 + 32, {1: 0.01, 2: 0.5})  # a busy machine: one thread wins
    assert used[:4] == [2, 1, 2, 1] and set(used[4:]) == {1} and tuner.chosen == 1
    used = _run(tuner, fake, 4 + 64, {1: 0.01, 2: 0.5})  # probed again, same answer: the next probe comes later
    assert used[:4] == [2, 1, 2, 1] and set(used[4:]) == {1} and tuner.interval == 64
    used = _run(tuner, fake, 4 + 8, {1: 0.2, 2: 0.1})  # the machine quietened: back to two threads
    assert used[:4] == [2, 1, 2, 1] and set(used[4:]) == {2} and tuner.interval == ThreadTuner.PROBE_EVERY


def test_thread_tuner_never_probes_with_one_thread():
    from reflectrm.backends.transformers_backend import ThreadTuner

    fake = _FakeTorch()
    fake.threads = 1
    tuner = ThreadTuner(fake, 1)
    assert set(_run(tuner, fake, 10, {1: 0.1})) == {1}


def test_cache_room_is_not_the_whole_budget(demo_backend, monkeypatch):
    from reflectrm.backends import transformers_backend as tb

    asked = []
    real = tb.growing_cache
    monkeypatch.setattr(tb, "growing_cache", lambda model, capacity: asked.append(capacity) or real(model, capacity))
    prompt = (ChatMessage("user", "Say one word."),)
    demo_backend.generate([GenerationRequest(prompt, (0,))], SamplingParams(max_new_tokens=2000))
    assert asked == [len(demo_backend.encode(prompt)) + 128]  # grown by half when full, as rows need it
