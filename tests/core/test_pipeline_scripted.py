"""The full two-stage pipeline on a scripted backend: what is generated, and how it is decided."""

from __future__ import annotations

import re

import pytest

from reflectrm.backends import Completion, ScriptedBackend
from reflectrm.core import JudgeConfig, PreferencePair
from reflectrm.errors import ConfigError, ContextLengthError, InputError
from reflectrm.pipeline import judge, judge_many, orders_agree, rejudge, rejudge_many
from tests.conftest import critique_output, response_output

PAIR = PreferencePair.from_query("What is 2 + 2?", "4", "5", label=1)


def scripted(samples, reflect=lambda c1, c2: 1):
    """Sample j (by call order within its prompt) -> samples[j] = (choice or None, confidence tag);
    a reflection sees the two critiques' analyses and returns the critique number it prefers."""
    state = {"k": 0}

    def responder(text, seed, params):
        if "## Critiques for Judgment" in text:
            c1 = re.search(r"\[Critique 1\]\n(.*)\n\[Critique 2\]", text, re.S).group(1)
            c2 = re.search(r"\[Critique 2\]\n(.*?)\n\n## Output", text, re.S).group(1)
            return critique_output(reflect(c1, c2))
        choice, conf = samples[state["k"] % len(samples)]
        state["k"] += 1
        text_out = response_output(choice, f"s{state['k'] - 1}") if choice else "I cannot decide"
        return Completion(text_out, (conf,) * 10, 10)

    return ScriptedBackend(responder)


def test_anchor_is_most_confident_and_reflection_can_overturn_it():
    # The anchor (s2, confidence -0.1) says 1; two samples say 2 and beat it in reflection.
    samples = [(2, -1.0), (2, -0.9), (1, -0.1), (1, -2.0)]
    backend = scripted(samples, reflect=lambda c1, c2: 1 if c1 in ("s0", "s1") else 2 if c2 in ("s0", "s1") else
                       (1 if c1 == "s2" else 2))
    j = judge(PAIR, backend, JudgeConfig(n=4))
    assert j.anchor == 2
    assert len(j.reflections) == 3 and {r.sample for r in j.reflections} == {0, 1, 3}
    assert all(r.anchor == 2 for r in j.reflections)
    assert j.winners == (0, 1)  # s3 lost to the anchor
    assert j.verdict == 2 and not j.vote.anchor_added
    assert j.correct is False


def test_empty_winner_group_falls_back_to_anchor():
    backend = scripted([(2, -1.0), (1, -0.1), (2, -1.0)], reflect=lambda c1, c2: 1 if c1 == "s1" else 2)
    j = judge(PAIR, backend, JudgeConfig(n=3))
    assert j.anchor == 1 and j.winners == () and j.vote.anchor_added and j.verdict == 1


def test_unparseable_outputs_neither_anchor_nor_compared():
    backend = scripted([(None, 0.0), (2, -1.0), (1, -0.5)], reflect=lambda c1, c2: 1)
    j = judge(PAIR, backend, JudgeConfig(n=3))
    assert j.anchor == 2  # the unparseable sample had the best confidence but cannot anchor
    assert [r.sample for r in j.reflections] == [1]


def test_all_unparseable_abstains():
    j = judge(PAIR, scripted([(None, -1.0)]), JudgeConfig(n=4))
    assert j.verdict is None and j.abstained and j.abstain_reason == "no parseable output"
    assert j.anchor is None and j.reflections == ()


def test_unparseable_reflection_counts_for_the_anchor():
    def responder(text, seed, params):
        if "Critiques" in text:
            return "garbage"
        return Completion(response_output(2 if seed % 2 else 1), (-0.5,), 1)

    j = judge(PAIR, ScriptedBackend(responder), JudgeConfig(n=8))
    assert j.reflections and all(not r.prefers_sample for r in j.reflections)
    assert j.winners == () and j.verdict == j.rollouts[j.anchor].prediction


def test_skip_unanimous_records_the_skip():
    backend = scripted([(1, -0.3), (1, -0.2)])
    j = judge(PAIR, backend, JudgeConfig(n=4, skip_unanimous=True))
    assert j.stage2_skipped and j.reflections == () and j.verdict == 1
    assert not any("Critiques" in c[0] for c in backend.calls)


def test_critique_order_is_random_but_seeded():
    backend = scripted([(1, -0.1)] + [(2, -1.0)] * 7)
    a = judge(PAIR, backend, JudgeConfig(seed=3))
    b = judge(PAIR, scripted([(1, -0.1)] + [(2, -1.0)] * 7), JudgeConfig(seed=3))
    orders = [r.order for r in a.reflections]
    assert orders == [r.order for r in b.reflections]
    assert {o[0] == a.anchor for o in orders} == {True, False}  # both orders occur among 7 draws


def test_reflection_prompt_shows_analysis_only_by_default():
    backend = scripted([(1, -0.1), (2, -1.0)])
    judge(PAIR, backend, JudgeConfig(n=2))
    reflection = next(c[0] for c in backend.calls if "Critiques" in c[0])
    assert "Verdict:" not in reflection and "[Response 1]\n4" in reflection
    backend = scripted([(1, -0.1), (2, -1.0)])
    judge(PAIR, backend, JudgeConfig(n=2, critique_includes_verdict=True))
    assert "Verdict: Response" in next(c[0] for c in backend.calls if "Critiques" in c[0])


def test_reflection_is_greedy_by_default():
    backend = scripted([(1, -0.1), (2, -1.0)])
    judge(PAIR, backend, JudgeConfig(n=2))
    temps = {("Critiques" in text, p.temperature) for text, _, p in backend.calls}
    assert temps == {(False, 1.0), (True, 0.0)}


def test_seeds_differ_per_sample_and_are_index_stable():
    backend = scripted([(1, -0.1), (2, -0.2)])
    judge(PAIR, backend, JudgeConfig(n=8, strategy="majority"))
    seeds8 = [s for t, s, _ in backend.calls]
    backend = scripted([(1, -0.1), (2, -0.2)])
    judge(PAIR, backend, JudgeConfig(strategy="majority@15"))
    seeds15 = [s for t, s, _ in backend.calls]
    assert len(set(seeds8)) == 8 and seeds15[:8] == seeds8 and len(seeds15) == 15


def test_rejudge_reuses_stage1_and_generates_only_what_is_missing():
    backend = scripted([(1, -0.1), (2, -1.0), (2, -0.5), (1, -0.7)], reflect=lambda c1, c2: 1)
    j = judge(PAIR, backend, JudgeConfig())
    before = len(backend.calls)
    maj = rejudge(j, "majority")  # no backend needed
    assert maj.rollouts == j.rollouts and maj.strategy == "majority" and maj.model == j.model
    assert maj.vote.counts == (5.0, 4.0) and maj.vote.anchor_added and maj.verdict == j.rollouts[j.anchor].prediction
    assert len(backend.calls) == before
    again = rejudge(j, "reflectrm")
    assert again.reflections == j.reflections and again.verdict == j.verdict
    with pytest.raises(ConfigError, match="pass a backend"):
        rejudge(j, "majority@15")
    m15 = rejudge(j, "majority@15", backend)
    assert len(backend.calls) == before + 7 and m15.rollouts[:8] == j.rollouts


def test_rejudge_many_matches_rejudge_one_by_one():
    # trap: batching must not mix the pairs' stored rollouts or reseed what is generated
    pairs = [PAIR, PreferencePair.from_query("What is 3 + 3?", "7", "6", label=2)]
    def by_seed(text, seed, params):  # a sample depends on its seed only, not on what shares its batch
        if "## Critiques for Judgment" in text:
            return critique_output(1)
        return Completion(response_output(1 + seed % 2, f"s{seed}"), (-(seed % 7) / 7,) * 10, 10)

    backend = ScriptedBackend(by_seed)
    stored = list(judge_many(pairs, backend, JudgeConfig()))
    before = len(backend.calls)
    batched = list(rejudge_many(stored, backend, JudgeConfig(strategy="majority@15"), batch_size=2))
    assert len(backend.calls) == before + 2 * 7  # only the missing samples, for both pairs
    single = [rejudge(j, "majority@15", backend) for j in stored]
    assert [(j.pair, j.rollouts, j.verdict) for j in batched] == [(j.pair, j.rollouts, j.verdict) for j in single]
    with pytest.raises(ConfigError, match="batch_size"):
        list(rejudge_many(stored, backend, JudgeConfig(), batch_size=0))


def test_greedy_strategy_decodes_once_at_temperature_zero():
    backend = scripted([(2, -0.1)])
    j = judge(PAIR, backend, JudgeConfig(strategy="greedy"))
    assert len(backend.calls) == 1 and backend.calls[0][2].temperature == 0.0
    assert j.verdict == 2 and j.rollouts[0].greedy


def test_random_winners_keeps_group_size():
    backend = scripted([(1, -0.1)] + [(2, -1.0)] * 7, reflect=lambda c1, c2: 1 if c1 != "s0" else 2)
    j = judge(PAIR, backend, JudgeConfig())
    r = rejudge(j, "random-winners")
    assert len(r.winners) == len(j.winners) and r.anchor == j.anchor


def test_confidence_weighted_prefers_confident_minority():
    backend = scripted([(1, -0.01), (2, -3.0), (2, -3.0)])
    j = judge(PAIR, backend, JudgeConfig(n=3, strategy="confidence-weighted"))
    assert j.verdict == 1 and j.vote.counts[0] > j.vote.counts[1]


def test_batched_judgments_match_single_ones():
    def responder(text, seed, params):
        if "Critiques" in text:
            return critique_output(1 + seed % 2)
        return Completion(response_output(1 + seed % 2), (-(seed % 97) / 50,), 1)

    pairs = [PreferencePair.from_query(f"q{i}", "a", "b") for i in range(5)]
    one_by_one = [judge(p, ScriptedBackend(responder)) for p in pairs]
    batched = list(judge_many(pairs, ScriptedBackend(responder), JudgeConfig(), batch_size=3))
    strip = lambda j: (j.verdict, j.anchor, j.winners, j.rollouts, j.reflections)  # noqa: E731
    assert [strip(j) for j in batched] == [strip(j) for j in one_by_one]


def test_swapped_pair_and_order_agreement():
    s = PAIR.swapped()
    assert (s.response_1, s.response_2, s.label) == ("5", "4", 2)
    backend = scripted([(1, -0.1)])
    a, b = judge(PAIR, backend, JudgeConfig(n=2)), judge(s, backend, JudgeConfig(n=2))
    assert orders_agree(a, b) is False  # always "Response 1": a positional bias


def test_context_overflow_is_an_input_error_before_generation():
    backend = ScriptedBackend(lambda t, s, p: "x", max_context_chars=500)
    big = PreferencePair.from_query("q", "a" * 1000, "b")
    with pytest.raises(ContextLengthError, match="shorten"):
        list(judge_many([PAIR, big], backend, JudgeConfig()))
    assert backend.calls == []
    assert issubclass(ContextLengthError, InputError)


def test_judgment_json_round_trip():
    import json

    from reflectrm.core.types import Judgment

    j = judge(PAIR, scripted([(None, -1.0), (2, -0.5), (1, -0.2)]), JudgeConfig(n=3))
    assert Judgment.from_dict(json.loads(json.dumps(j.to_dict()))) == j
