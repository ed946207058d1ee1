"""Data construction on scripted rollouts: exact counts for every filter, the mix, dedupe, eval overlap."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import asdict

import pytest

from reflectrm.backends import ScriptedBackend
from reflectrm.core.config import JudgeConfig
from reflectrm.core.prompts import Task, reflection_prompt, response_prompt
from reflectrm.core.types import PreferencePair
from reflectrm.errors import ConfigError, InputError
from reflectrm.training.data import (
    DataConfig,
    TrainingSet,
    build_training_set,
    candidate_context_keys,
    collect_rollouts,
    context_key,
    drop_overlapping,
    examples_from_rollouts,
    load_snapshot,
    mix_counts,
    read_examples,
    snapshot_hash,
    write_snapshot,
)

CONFIG = DataConfig(judge=JudgeConfig(n=8, max_new_tokens=64))


def make_pair(k: int, schedule: str, *, label: int = 1) -> PreferencePair:
    """Pair k; its 8 rollouts follow `schedule`: R right, W wrong, U unparseable, S right with a shared analysis
    (s: wrong with that same analysis)."""
    return PreferencePair.from_query(f"Item {k}: {schedule}?", f"answer A{k}", f"answer B{k}", label=label, id=f"p{k}")


def scripted_backend() -> ScriptedBackend:
    """Sample j of a prompt (by call order) follows the schedule written in its query."""
    calls: dict[str, int] = defaultdict(int)

    def responder(text, seed, params):
        k, schedule = re.search(r"Item (\d+): (\w+)\?", text).groups()
        label = 1 if "[Response 1]\nanswer A" in text and int(k) % 2 == 0 else 2 if int(k) % 2 else 1
        j = calls[text]
        calls[text] += 1
        kind = schedule[j % len(schedule)]
        if kind == "U":
            return "I am not sure."
        choice = label if kind in "RS" else 3 - label
        analysis = "shared analysis" if kind in "Ss" else f"item {k} sample {j} ({kind})"
        return f"<Analysis>{analysis}</Analysis><Result>Response {choice} is better than Response {3 - choice}</Result>"

    return ScriptedBackend(responder)


def pairs_for(schedules: list[str]) -> list[PreferencePair]:
    # Odd items are labelled 2 so that both labels occur; the responder knows the same rule.
    return [make_pair(k, s, label=2 if k % 2 else 1) for k, s in enumerate(schedules)]


EASY, MIXED, ALL_WRONG = "RRRRRRRR", "RRRWWWWW", "WWWWWWWW"


def judged(schedules: list[str], config: DataConfig = CONFIG):
    return collect_rollouts(pairs_for(schedules), scripted_backend(), config)


def test_scripted_rollouts_follow_their_schedule():
    (j,) = judged([MIXED])
    assert [r.prediction == j.pair.label for r in j.rollouts] == [True] * 3 + [False] * 5


def test_easy_items_dropped_one_reflection_pair_per_mixed_item():
    judgments = judged([EASY] * 3 + [MIXED] * 4 + [ALL_WRONG] * 2 + ["RRRRRRRU"])
    pref, refl, report = examples_from_rollouts(judgments, config=CONFIG)
    assert (report.items, report.easy_dropped, report.mixed, report.all_wrong) == (10, 3, 4, 2)
    # 7 not-easy items give preference examples: mixed, all-wrong, and right-or-unparseable ("RRRRRRRU" is not easy)
    assert len(pref) == 7 and {e.task for e in pref} == {Task.RESPONSE}
    assert len(refl) == 4 and {e.task for e in refl} == {Task.ANALYSIS}
    assert sorted(e.pair_id for e in refl) == ["p3", "p4", "p5", "p6"]  # exactly one per mixed item


def test_a_reflection_pair_is_one_right_against_one_wrong_analysis_labelled_with_the_right_one():
    judgments = judged([MIXED] * 12)
    _, refl, _ = examples_from_rollouts(judgments, config=CONFIG)
    for e in refl:
        text = e.prompt[0].content
        c1 = re.search(r"\[Critique 1\]\n(.*)\n\[Critique 2\]", text).group(1)
        c2 = re.search(r"\[Critique 2\]\n(.*)\n\n## Output", text).group(1)
        kinds = (c1[-2], c2[-2])  # "(R)" / "(W)" at the end of each scripted analysis
        assert sorted(kinds) == ["R", "W"]
        assert e.label == 1 + kinds.index("R")
    assert {e.label for e in refl} == {1, 2}  # the order is random, not always right-first


def test_reflection_pairs_are_seeded():
    judgments = judged([MIXED] * 6)
    first = examples_from_rollouts(judgments, config=CONFIG)[1]
    again = examples_from_rollouts(judgments, config=CONFIG)[1]
    other = examples_from_rollouts(judgments, config=DataConfig(judge=JudgeConfig(n=8, max_new_tokens=64, seed=1)))[1]
    assert first == again
    assert [e.prompt for e in first] != [e.prompt for e in other]


def test_a_mixed_item_whose_wrong_analyses_copy_the_right_one_gives_no_reflection_pair():
    # trap: with analysis-only critiques, "shared analysis" against itself would teach a contradiction
    _, refl, report = examples_from_rollouts(judged(["SSSsssss"]), config=CONFIG)
    assert refl == [] and report.mixed == 1 and report.no_distinct_analyses == 1


def test_unparseable_samples_are_not_wrong_analyses():
    # right or unparseable only: not mixed, so no reflection pair (nothing wrong to compare with)
    _, refl, report = examples_from_rollouts(judged(["RRRUUUUU"]), config=CONFIG)
    assert refl == [] and report.mixed == 0 and report.preference_pool == 1


@pytest.mark.parametrize(
    ("pool", "mix", "subsample", "kept"),
    [
        pytest.param((12, 8), (4, 1), "reflection", (12, 3), id="reflection-plentiful-subsampled"),
        pytest.param((12, 8), (4, 1), "either", (12, 3), id="reflection-plentiful-either"),
        # trap: the default never drops preference examples to force the ratio (the paper cut reflection pairs)
        pytest.param((12, 2), (4, 1), "reflection", (12, 2), id="reflection-scarce-ratio-falls-short"),
        pytest.param((12, 2), (4, 1), "either", (8, 2), id="reflection-scarce-preference-subsampled"),
        pytest.param((7, 4), (4, 1), "reflection", (7, 2), id="rounds-to-nearest-keeps-scarce-kind-whole"),
        pytest.param((12, 8), (1, 0), "reflection", (12, 0), id="preference-only"),
        pytest.param((12, 8), (0, 1), "reflection", (0, 8), id="reflection-only"),
        pytest.param((0, 0), (4, 1), "reflection", (0, 0), id="nothing"),
        pytest.param((5, 5), (1, 1), "either", (5, 5), id="one-to-one"),
    ],
)
def test_mix_counts(pool, mix, subsample, kept):
    assert mix_counts(*pool, mix, subsample=subsample) == kept


def test_built_set_has_the_ratio_and_counts():
    judgments = judged([EASY] * 2 + [MIXED] * 8 + [ALL_WRONG] * 4)
    built = build_training_set(judgments, config=CONFIG)
    r = built.report
    assert (r.easy_dropped, r.preference_pool, r.reflection_pool) == (2, 12, 8)
    assert (r.preference, r.reflection, r.extra) == (12, 3, 0)
    assert len(built.examples) == 15
    assert sum(e.task is Task.ANALYSIS for e in built.examples) == 3


def test_extra_rows_win_duplicates_and_conflicts():
    judgments = judged([MIXED] * 4 + [ALL_WRONG] * 4)
    plain = build_training_set(judgments, config=DataConfig(judge=JudgeConfig(n=8, max_new_tokens=64), mix=(1, 0)))
    same, flipped = plain.examples[0], plain.examples[1]
    rows = [same.to_row(), {**flipped.to_row(), "label": 3 - flipped.label}, {**same.to_row()}]
    extra = read_examples([{**row, "pair_id": 7} for row in rows], origin="corrections")
    built = build_training_set(judgments, config=DataConfig(judge=JudgeConfig(n=8, max_new_tokens=64), mix=(1, 0)), extra=extra)
    r = built.report
    # the third extra row duplicates the first; the generated copies of both lose to the extra rows
    assert (r.duplicates_dropped, r.conflicts_dropped) == (2, 1)
    assert (r.extra, r.preference) == (2, 6)
    kept = {e.key: e for e in built.examples}
    assert kept[flipped.key].label == 3 - flipped.label and kept[flipped.key].origin == "corrections"
    assert kept[flipped.key].pair_id == "7"


def test_duplicate_pairs_are_rolled_out_once():
    pair = make_pair(1, MIXED, label=2)
    twin = PreferencePair.from_query(pair.query, pair.response_1, pair.response_2, label=2, id="other-id")
    backend = scripted_backend()
    judgments = collect_rollouts([pair, twin], backend, CONFIG)
    assert len(judgments) == 1 and len(backend.calls) == 8


def test_unlabelled_pairs_are_refused():
    with pytest.raises(InputError, match="has no label"):
        collect_rollouts([PreferencePair.from_query("q", "a", "b")], scripted_backend(), CONFIG)


def test_overlap_with_the_eval_set_is_refused():
    pairs = pairs_for([MIXED] * 4)
    judgments = collect_rollouts(pairs, scripted_backend(), CONFIG)
    # the same conversation with other responses still overlaps
    eval_pairs = [PreferencePair.from_query(pairs[2].query, "x", "y", label=1)]
    with pytest.raises(InputError, match="share a conversation with the evaluation set"):
        build_training_set(judgments, config=CONFIG, eval_pairs=eval_pairs)
    kept = drop_overlapping(pairs, eval_pairs)
    assert [p.id for p in kept] == ["p0", "p1", "p3"]
    clean = collect_rollouts(kept, scripted_backend(), CONFIG)
    assert len(build_training_set(clean, config=CONFIG, eval_pairs=eval_pairs).examples) > 0


@pytest.mark.parametrize(
    "query",
    [
        pytest.param("What is 2 + 2?", id="plain"),
        # trap: text that looks like the prompt's own section markers must not fool the key
        pytest.param("Q\n\n## Responses for Judgment\n[Response 1]\nfake", id="fake-section-marker"),
        pytest.param("Q\n\n[Response 1]\nfake", id="fake-response-block"),
        pytest.param("## Context\nnested", id="fake-context-header"),
    ],
)
def test_context_keys_match_both_tasks_and_both_orders_and_nothing_else(query):
    pair = PreferencePair.from_query(query, "r1", "r2", label=1)
    key = context_key(pair)
    assert key in candidate_context_keys(response_prompt(pair))
    assert key in candidate_context_keys(reflection_prompt(pair, "c1", "c2"))
    assert key in candidate_context_keys(response_prompt(pair.swapped()))
    assert key == context_key(PreferencePair.from_query(query, "other", "responses"))
    longer = PreferencePair.from_query(query + "!", "r1", "r2")
    assert key not in candidate_context_keys(response_prompt(longer))
    assert context_key(longer) not in candidate_context_keys(reflection_prompt(pair, "c1", "c2"))


def test_snapshot_round_trip_is_content_hashed(tmp_path):
    built = build_training_set(judged([MIXED] * 8 + [ALL_WRONG] * 4), config=CONFIG)
    snap = write_snapshot(built, tmp_path, name="demo")
    assert snap.path.name == f"demo-{snap.content_hash[:12]}" and snap.rows == len(built.examples)
    ds = load_snapshot(snap.path)
    assert ds.column_names[:3] == ["prompt", "label", "task"]
    assert [dict(r) for r in ds] == built.rows()
    assert ds[0]["prompt"][0]["role"] == "user"
    assert snapshot_hash(snap.path) == snap.content_hash
    assert write_snapshot(built, tmp_path, name="demo").path == snap.path  # same content: same snapshot
    other = build_training_set(judged([MIXED] * 8 + [ALL_WRONG] * 4), config=DataConfig(judge=JudgeConfig(n=8, max_new_tokens=64, seed=3)))
    assert write_snapshot(other, tmp_path, name="demo").path != snap.path
    back = read_examples(snap.path)
    assert [e.to_row() for e in back] == built.rows()


def test_an_empty_set_is_not_written(tmp_path):
    built = build_training_set(judged([EASY] * 3), config=CONFIG)
    assert built.report.easy_dropped == 3 and built.examples == ()
    with pytest.raises(InputError, match="empty"):
        write_snapshot(built, tmp_path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        # the judge's own rules (JudgeConfig) and the stricter ones of rollouts (DataConfig)
        pytest.param({"judge": JudgeConfig(strategy="greedy", n=1)}, "n must be an integer >= 2", id="n"),
        pytest.param({"judge": JudgeConfig(temperature=0.0)}, "temperature must be > 0", id="greedy-rollouts"),
        pytest.param({"mix": (0, 0)}, "mix must be two integers", id="mix-zero"),
        pytest.param({"mix": (4, -1)}, "mix must be two integers", id="mix-negative"),
        pytest.param({"judge": {"max_new_tokens": 64}}, "judge must be a JudgeConfig", id="judge-as-dict"),
        pytest.param({"subsample": "preference"}, "subsample must be one of reflection, either", id="subsample"),
    ],
)
def test_data_config_validation(change, message):
    with pytest.raises(ConfigError, match=message):
        DataConfig(**change)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        pytest.param({"prompt": [], "label": 1, "task": "response"}, "non-empty list", id="empty-prompt"),
        pytest.param({"prompt": [{"role": "user", "content": "q"}], "label": 3, "task": "response"}, "label",
                     id="bad-label"),
        pytest.param({"prompt": [{"role": "user", "content": "q"}], "label": True, "task": "response"}, "label",
                     id="bool-label"),
        pytest.param({"prompt": [{"role": "user", "content": "q"}], "label": 1, "task": "pref"}, "task",
                     id="bad-task"),
        pytest.param({"prompt": ["just text"], "label": 1, "task": "response"}, "role, content", id="bare-strings"),
        pytest.param({"prompt": [{"role": "robot", "content": "q"}], "label": 1, "task": "response"}, "role",
                     id="unknown-role"),
    ],
)
def test_bad_rows_are_refused(row, message):
    with pytest.raises(InputError, match=message):
        read_examples([row])


def test_a_torn_jsonl_line_names_its_place(tmp_path):
    (tmp_path / "rows.jsonl").write_text('{"prompt": [{"role": "user", "content": "q"}], "label": 1, "task": "response"}\n{"pro')
    with pytest.raises(InputError, match="rows.jsonl:2: not valid JSON"):
        read_examples(tmp_path / "rows.jsonl")


def test_report_counts_sum_up():
    built: TrainingSet = build_training_set(judged([EASY, MIXED, MIXED, ALL_WRONG, "RRRRRRRU"]), config=CONFIG)
    r = asdict(built.report)
    assert r["items"] == r["easy_dropped"] + r["preference_pool"]
    assert r["preference"] + r["reflection"] + r["extra"] == len(built.examples)


# --- the mix's named choices --------------------------------------------------------------------------


def test_unparseable_samples_can_be_the_incorrect_side_when_chosen():
    judgments = judged(["RRRUUUUU"])
    _, refl, report = examples_from_rollouts(judgments, config=CONFIG)
    assert refl == [] and report.right_or_unparseable == 1  # the default: counted, no pair
    chosen = DataConfig(judge=JudgeConfig(n=8, max_new_tokens=64), unparseable_is_incorrect=True)
    _, refl, report = examples_from_rollouts(judgments, config=chosen)
    assert (report.mixed, report.right_or_unparseable, len(refl)) == (1, 0, 1)
    text = refl[0].prompt[0].content
    shown = re.search(r"\[Critique 1\]\n(.*)\n\[Critique 2\]\n(.*)\n\n## Output", text, re.DOTALL).groups()
    assert "I am not sure." in shown and shown[refl[0].label - 1] != "I am not sure."


def test_the_default_never_cuts_preference_examples_to_force_the_ratio():
    judgments = judged([MIXED] * 2 + [ALL_WRONG] * 10)
    default = build_training_set(judgments, config=CONFIG).report
    assert (default.preference, default.reflection, default.preference_cut) == (12, 2, 0)
    either = build_training_set(judgments, config=DataConfig(judge=JudgeConfig(n=8, max_new_tokens=64), subsample="either")).report
    assert (either.preference, either.reflection, either.preference_cut) == (8, 2, 4)


def test_extra_rows_count_toward_the_ratio_when_chosen():
    judgments = judged([MIXED] * 8 + [ALL_WRONG] * 4)  # pools: 12 preference, 8 reflection
    other = judged(["RRWWWWWW"] * 2)  # other queries: their reflection pairs are no duplicates
    extra = [e for e in examples_from_rollouts(other, config=CONFIG)[1]]
    assert len(extra) == 2
    after = build_training_set(judgments, config=CONFIG, extra=extra).report
    assert (after.preference, after.reflection, after.extra_reflection) == (12, 3, 2)  # 12 : 5 in the end
    inside = build_training_set(judgments, config=DataConfig(judge=JudgeConfig(n=8, max_new_tokens=64), extra_in_mix=True),
                                extra=extra).report
    assert (inside.preference, inside.reflection, inside.extra_reflection) == (12, 1, 2)  # 12 : 3 in the end
    assert inside.reflection_cut == 7
