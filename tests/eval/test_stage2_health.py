"""Stage 2 never collapses silently (issue 30): the reflection parse rate, judgments whose reflections all
failed, and stage 2's own position bias, per judgment, per eval run, per audit batch and in the service's
metrics. The trap: an unparseable reflection counts for the anchor (Eq. 8), so a judge whose reflections all
fail is reported as ReflectRM while every verdict is the anchor's."""

from __future__ import annotations

from collections import Counter

import pytest

from reflectrm.audit import audit_stats
from reflectrm.core.config import JudgeConfig
from reflectrm.core.types import Judgment, ParseStatus, PreferencePair, Reflection, Rollout
from reflectrm.eval.metrics import wilson_interval
from reflectrm.eval.report import markdown
from reflectrm.eval.runner import item_from_judgment
from reflectrm.eval.scoring import build_report
from reflectrm.render import render_judgment, stage2_text
from reflectrm.serving.server import count_judgments, reflection_parse_rate_lines

PAIR = PreferencePair.from_query("What is 2 + 2?", "4", "5", label=1, id="p")


def _rollout(i: int, prediction: int) -> Rollout:
    return Rollout(index=i, text="t", analysis="a", prediction=prediction, status=ParseStatus.OK,
                   confidence=-0.1 * (i + 1), num_tokens=3)


def _reflection(sample: int, choice: int | None, *, anchor_first: bool = True) -> Reflection:
    return Reflection(sample=sample, anchor=0, order=(0, sample) if anchor_first else (sample, 0), text="r",
                      analysis="", choice=choice,
                      status=ParseStatus.OK if choice else ParseStatus.INVALID_RESULT, num_tokens=2)


def judgment(choices: list[int | None], *, strategy: str = "reflectrm", pair: PreferencePair = PAIR) -> Judgment:
    """Anchor #0 says 1; samples #1.. say 2; one reflection per sample with the given choice."""
    rollouts = (_rollout(0, 1), *(_rollout(i + 1, 2) for i in range(len(choices))))
    reflections = tuple(_reflection(i + 1, c) for i, c in enumerate(choices))
    return Judgment(pair=pair, strategy=strategy, rollouts=rollouts, verdict=1, anchor=0, reflections=reflections)


COLLAPSED = judgment([None] * 7)
BIASED = judgment([1, 1, 1, 1, 1, 1, 2])  # 6 of 7 chose the first-presented critique


def test_a_judgment_knows_when_every_reflection_failed():
    assert COLLAPSED.reflections_all_failed and COLLAPSED.reflection_failures == 7
    assert not BIASED.reflections_all_failed and BIASED.reflection_failures == 0
    assert not judgment([]).reflections_all_failed  # no stage 2 (unanimous, skipped) is no failure
    assert not judgment([None, 2]).reflections_all_failed


def test_first_chosen_counts_parsed_reflections_only():
    assert BIASED.reflections_first_chosen == (6, 7)
    assert judgment([None, 1, 2]).reflections_first_chosen == (1, 2)
    assert COLLAPSED.reflections_first_chosen == (0, 0)


@pytest.mark.parametrize(("k", "n", "low", "high"), [
    pytest.param(6, 7, 0.4869, 0.9743, id="six-of-seven"),
    pytest.param(0, 7, 0.0, 0.3543, id="none"),  # trap: the Wald interval has no width here
    pytest.param(20, 20, 0.8389, 1.0, id="all"),
    pytest.param(10, 20, 0.2993, 0.7007, id="half"),
])
def test_wilson_interval(k, n, low, high):
    got = wilson_interval(k, n)
    assert got == pytest.approx((low, high), abs=1e-4)


def test_wilson_interval_without_items_says_nothing_and_is_never_narrower_with_fewer_items():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    widths = [wilson_interval(n // 2, n)[1] - wilson_interval(n // 2, n)[0] for n in (4, 8, 16, 32, 64)]
    assert widths == sorted(widths, reverse=True)


def test_the_anatomy_says_stage_2_failed_and_shows_its_position_bias():
    assert "STAGE 2 FAILED" in stage2_text(COLLAPSED) and "0 of 7 reflection(s) parsed" in stage2_text(COLLAPSED)
    text = stage2_text(BIASED)
    assert "7 of 7 reflection(s) parsed" in text and "first-presented critique 6 of 7 (86 %" in text
    assert "[49, 97] %" in text and "biased to" not in text  # 6 of 7 is not yet clear of 50 %
    assert "biased to the first" in stage2_text(judgment([1] * 12))
    assert "Stage 2: 0 of 7 reflection(s) parsed" in render_judgment(COLLAPSED)


def _items(judgments: list[Judgment]) -> list:
    return [item_from_judgment(j, item_id=f"i{k}", swapped=False, config=JudgeConfig(n=8), meta={})
            for k, j in enumerate(judgments)]


def test_eval_items_count_reflections_only_for_strategies_that_use_them():
    [item] = _items([judgment([None, 1, 2])])
    assert (item.reflections, item.reflection_failures, item.reflections_first) == (3, 1, 1)
    [majority] = _items([judgment([None, 1, 2], strategy="majority")])  # a re-aggregation keeps unused reflections
    assert (majority.reflections, majority.reflection_failures) == (0, 0)


def test_the_eval_report_shows_the_reflection_parse_rate_and_warns_past_ten_percent():
    items = _items([COLLAPSED, BIASED, BIASED])
    report = build_report(items, benchmark="demo", scoring="micro")
    s = report["strategies"]["reflectrm"]
    assert s["reflections"] == 21 and s["reflection_parse_rate"] == pytest.approx(14 / 21)
    assert (s["stage2_failed"], s["stage2_judgments"]) == (1, 3)
    assert (s["first_critique"]["k"], s["first_critique"]["n"]) == (12, 14)
    assert s["first_critique"]["low"] > 0.5  # 12 of 14: stage 2 favours the first critique
    assert s["warnings"] and "7 of 21 reflections (33 %) did not parse" in s["warnings"][0]
    md = markdown(report)
    assert "## Stage 2 (reflections)" in md and "| reflectrm | 21 | 66.7 | 1 of 3 |" in md
    assert "**Warning (reflectrm)**" in md


def test_no_warning_at_ten_percent_or_less():
    ten = judgment([None] + [2] * 9)
    s = build_report(_items([ten]), benchmark="demo", scoring="micro")["strategies"]["reflectrm"]
    assert s["reflection_parse_rate"] == pytest.approx(0.9) and s["warnings"] == []


def test_an_audit_batch_counts_stage_2_position_bias_per_subset():
    swapped_pair = PAIR.swapped()
    stats = audit_stats([(BIASED, judgment([1, 1, None], pair=swapped_pair))])
    every = stats[-1]
    assert (every.reflections, every.reflection_failures, every.first_critiques) == (10, 1, 8)
    share, low, high = every.first_critique_rate
    assert (share, low, high) == pytest.approx((8 / 9, 0.5650, 0.9801), abs=1e-4)  # clear of 50 %
    assert every.reflection_parse_rate == pytest.approx(0.9)


def _with_predictions(j: Judgment, predictions: list[int | None]) -> Judgment:
    """`j` with its rollouts' predictions replaced (None: the sample did not parse)."""
    rollouts = tuple(Rollout(index=r.index, text="t", analysis="a", prediction=p,
                             status=ParseStatus.OK if p else ParseStatus.INVALID_RESULT, confidence=r.confidence,
                             num_tokens=3) for r, p in zip(j.rollouts, predictions))
    return Judgment(pair=j.pair, strategy=j.strategy, rollouts=rollouts, verdict=j.verdict, anchor=j.anchor,
                    reflections=j.reflections)


@pytest.mark.parametrize("predictions, choices, want", [
    pytest.param([1, 2, 2, 2], [1, 1, 2], (2, 3), id="every-critique-disagrees-with-the-anchor"),
    pytest.param([1, 1, 1, 1], [1, 1, 1], (0, 0), id="all-agree: ties are no bias"),
    pytest.param([1, 1, 2, 1], [1, 1, 1], (1, 1), id="one-decisive"),
    pytest.param([1, 2, None, 2], [1, 1, 2], (1, 2), id="an-unparsed-critique-is-not-decisive"),
    pytest.param([1, 2, 2, 2], [None, 1, None], (1, 1), id="an-unparsed-reflection-is-not-counted"),
    pytest.param([None, 2, 2, 2], [1, 2, 2], (0, 0), id="no-anchor-verdict"),
])
def test_the_decisive_first_choice_counts_only_reflections_between_critiques_that_disagree(predictions, choices, want):
    j = _with_predictions(judgment(choices), predictions)
    assert j.decisive_first_chosen == want


def test_an_audit_batch_tells_ties_from_a_bias_where_critiques_disagree():
    ties = _with_predictions(judgment([1, 1, 1, 1, 1, 1]), [1] * 7)  # all agree and choose Critique 1
    split = _with_predictions(judgment([1, 2, 1, 2]), [1, 2, 2, 2, 2])  # disagree: 2 of 4 first
    every = audit_stats([(ties, split)])[-1]
    assert every.first_critique_rate[0] == pytest.approx(8 / 10)  # looks biased, counting ties
    assert (every.decisive_first, every.decisive) == (2, 4) and every.decisive_first_rate[0] == 0.5
    assert audit_stats([(ties, ties)])[-1].decisive_first_rate is None


def test_the_service_metrics_count_reflection_parse_failures():
    counters: Counter[str] = Counter()
    count_judgments(counters, [COLLAPSED, BIASED])
    assert (counters["judgments"], counters["reflections"], counters["reflection_parse_failures"],
            counters["stage2_failed_judgments"]) == (2, 14, 7, 1)
    assert reflection_parse_rate_lines(counters) == ["reflectrm_reflection_parse_rate 0.5000"]
    assert reflection_parse_rate_lines(Counter()) == []
