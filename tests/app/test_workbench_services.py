"""Issue 14's service findings: audits leave data sets alone and repeat, corrections ask before they
contradict what is known, one judgment's concurrent corrections become an edit, the queue moves on."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from reflectrm_app.services import Services
from reflectrm_app.services.review import NeedsConfirmation
from reflectrm_app.ui.forms import MAX_INPUT_CHARS, build_pair
from reflectrm.core.types import PreferencePair
from reflectrm.errors import InputError


def test_batch_audit_adds_no_pairs_and_repeats_exactly(biased_services: Services) -> None:
    biased_services.judging.add_demo_pairs(8)
    first = biased_services.audit.batch_audit(biased_services.judging.demo_source(), sample=4, seed=3)
    assert biased_services.runtime.store.counts()["pairs"] == 8  # was 12: each swapped order became a pair of the data set
    again = biased_services.audit.batch_audit(biased_services.judging.demo_source(), sample=4, seed=3)
    assert again.subsets == first.subsets
    assert [f.query for f in again.flipped] == [f.query for f in first.flipped]
    assert len(biased_services.judging.pairs(biased_services.judging.demo_source())) == 8


def test_audit_both_orders_of_a_typed_pair_stores_one_pair(biased_services: Services) -> None:
    pair = build_pair(query="What is 2 + 2?", messages="", response_1="4", response_2="5", label=1)
    result = biased_services.audit.audit(pair)
    assert biased_services.runtime.store.counts()["pairs"] == 1
    assert biased_services.judging.open(result.swapped.judgment_id).judgment.pair == pair.swapped()


def test_flipped_items_name_each_order_choice_in_the_original_numbering(biased_services: Services) -> None:
    biased_services.judging.add_demo_pairs(2)
    [item, *_] = biased_services.audit.batch_audit(biased_services.judging.demo_source()).flipped
    # the biased judge always picks the first-shown answer: the original order picks 1, the swapped order picks
    # its first answer, which is Response 2 of the original order
    assert (item.verdict, item.swapped_verdict) == (1, 2)


def test_a_correction_that_contradicts_the_label_asks_first_and_is_marked_contested(
    services: Services, pair: PreferencePair
) -> None:
    jid = services.judging.judge(pair).judgment_id  # pair.label == 1
    with pytest.raises(NeedsConfirmation, match="known label says Response 1"):
        services.review.correct(jid, verdict=2, author="ana", confirmed=False)
    assert services.runtime.store.counts()["corrections"] == 0
    record = services.review.correct(jid, verdict=2, author="ana", confirmed=True)
    rows = services.curation.browse("preference")
    assert [r.correction_id for r in rows] == [record.id]
    assert rows[0].contested.startswith("the known label says Response 1") and rows[0].known_label == 1
    assert services.review.correct(jid, verdict=1, author="ana", confirmed=False).revision == 2  # agrees: no question


def _judgment(predictions: list[int | None], *, label: int | None = None, strategy: str = "reflectrm"):
    from reflectrm.core.types import Judgment, ParseStatus, Rollout

    rollouts = tuple(Rollout(index=k, text="t", analysis=f"a{k}", prediction=p,
                             status=ParseStatus.OK if p else ParseStatus.NO_RESULT, confidence=-0.1 * (k + 1),
                             num_tokens=3) for k, p in enumerate(predictions))
    return Judgment(pair=PreferencePair.from_query("q", "a", "b", label=label), strategy=strategy,
                    rollouts=rollouts, verdict=predictions[0], anchor=0)


@pytest.mark.parametrize(
    ("predictions", "label", "verdict", "reason"),
    [
        pytest.param([1, 1, None], None, 2, "all 2 of the judge's parseable samples say Response 1", id="unanimous"),
        pytest.param([1, 2, 1], None, 2, "", id="split-samples-no-question"),
        pytest.param([1], None, 2, "", id="one-sample-is-not-unanimity"),
        pytest.param([2, 2], 1, 2, "the known label says Response 1", id="label-wins-over-samples"),
        pytest.param([1, 1], 1, 1, "", id="agrees"),
    ],
)
def test_contest_reason(predictions: list, label: int | None, verdict: int, reason: str) -> None:
    from reflectrm_app.records import contest_reason

    assert contest_reason(_judgment(predictions, label=label), verdict) == reason


def test_two_reviewers_correcting_one_judgment_at_once_give_an_edit_with_history(
    services: Services, pair: PreferencePair
) -> None:
    jid = services.judging.judge(pair).judgment_id
    start, errors = threading.Barrier(2), []

    def correct(verdict: int) -> None:
        start.wait()
        try:
            services.review.correct(jid, verdict=verdict, author=f"r{verdict}")
        except Exception as exc:  # noqa: BLE001 - any failure is the finding
            errors.append(exc)

    threads = [threading.Thread(target=correct, args=(v,)) for v in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    [record] = services.runtime.store.corrections(judgment_id=jid)
    assert record.revision == 2


def test_withdraw_from_the_service(services: Services, pair: PreferencePair) -> None:
    jid = services.judging.judge(pair).judgment_id
    services.review.correct(jid, verdict=1, author="ana")
    record = services.review.withdraw(jid, author="ana")
    assert not services.runtime.store.corrections(judgment_id=jid, include_withdrawn=False)
    assert services.curation.browse("preference", ) == [] and record.id
    # the message counts what was withdrawn (it said 0: a withdrawn correction derives nothing)
    from reflectrm_app.ui import views

    assert len(record.preference_example_ids) == 1
    assert views.withdrawn_text(record).startswith(f"Withdrew correction #{record.id} with its 1 preference example")
    with pytest.raises(InputError, match="no correction to withdraw"):
        services.review.withdraw(jid, author="ana")


def _judged_demo_pairs(services: Services, count: int) -> list[int]:
    services.judging.add_demo_pairs(count)
    return [services.judging.judge(p).judgment_id for _, p in services.judging.pairs(services.judging.demo_source())]


def test_next_walks_the_whole_queue_in_order_and_says_when_it_wraps(services: Services) -> None:
    _judged_demo_pairs(services, 5)
    order = [s.id for s in services.runtime.store.review_queue(limit=100)]
    seen, item = [], services.review.next_for_review(reviewer="a")
    for k in range(len(order)):
        seen.append(item.summary.id)
        assert not item.wrapped and item.remaining == len(order) - k  # "N more after this" counts down
        item = services.review.next_for_review(reviewer="a", after=item.summary.id)
    assert seen == order  # every item once, in the queue's order (it used to bounce between two items)
    assert item.summary.id == order[0] and item.wrapped  # then back to the first, saying so


def test_next_goes_on_from_an_item_just_corrected(services: Services) -> None:
    _judged_demo_pairs(services, 4)
    order = [s.id for s in services.runtime.store.review_queue(limit=100)]
    services.review.correct(order[1], verdict=1, author="ana")  # the item just left is no longer in the queue
    item = services.review.next_for_review(reviewer="a", after=order[1])
    assert item.summary.id == order[2] and not item.wrapped


def test_skip_keeps_an_item_away_for_the_session(services: Services) -> None:
    _judged_demo_pairs(services, 3)
    order = [s.id for s in services.runtime.store.review_queue(limit=100)]
    seen, skip, item = [], [order[0]], services.review.next_for_review(reviewer="a", skip=[order[0]], after=order[0])
    for _ in range(2 * len(order)):
        seen.append(item.summary.id)
        item = services.review.next_for_review(reviewer="a", skip=skip, after=item.summary.id)
    assert order[0] not in seen and set(seen) == set(order[1:])
    assert services.review.next_for_review(reviewer="a", skip=order) is None  # all skipped: the queue is empty


def test_next_on_the_only_item_shows_it_again_as_a_wrap(services: Services, pair: PreferencePair) -> None:
    jid = services.judging.judge(pair).judgment_id
    item = services.review.next_for_review(reviewer="a", after=jid)
    assert item.summary.id == jid and item.wrapped


def test_review_item_by_id_reads_one_summary(services: Services, pair: PreferencePair) -> None:
    jid = services.judging.judge(pair).judgment_id
    item = services.review.review_item(jid, reviewer="a")
    assert item.summary.id == jid and item.summary.label == pair.label
    with pytest.raises(InputError, match="does not exist"):
        services.review.review_item(jid + 50, reviewer="a")


def test_exports_leave_no_temporary_folder_behind(services: Services, pair: PreferencePair) -> None:
    services.review.correct(services.judging.judge(pair).judgment_id, verdict=1, author="ana")
    zipped = services.curation.export("training", fmt="hf")
    assert zipped.suffix == ".zip" and zipped.exists()
    assert [p.name for p in zipped.parent.iterdir()] == [zipped.name]  # the unzipped folder is gone
    services.curation.export("pairs", fmt="jsonl")
    root = services.runtime.exports.root
    services.close()
    assert not root.exists()


def test_exports_older_than_the_keep_time_are_pruned(services: Services, tmp_path: Path) -> None:
    services.runtime.exports.keep_s = 0.0
    services.runtime.store.add_pairs([PreferencePair.from_query("q", "a", "b", label=1)])  # an export of nothing is refused
    first = services.curation.export("pairs", fmt="jsonl")
    services.curation.export("pairs", fmt="jsonl")
    assert not first.exists()


def test_the_app_refuses_an_oversized_pair_before_tokenising() -> None:
    with pytest.raises(InputError, match="over the app's limit"):
        build_pair(query="q", messages="", response_1="x" * MAX_INPUT_CHARS, response_2="y")


# --- what the anatomy shows per strategy -------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["majority", "majority@15", "confidence-weighted"])
def test_vote_only_strategies_show_no_anchor_no_stage_2_and_no_winner_group(strategy: str) -> None:
    from dataclasses import replace

    from reflectrm_app.ui import views
    from reflectrm_app.records import JudgeResult
    from reflectrm.core.types import Reflection

    j = _judgment([1, 2, 1], strategy=strategy)
    # a re-aggregation keeps the stored reflections, which this strategy does not use
    j = replace(j, reflections=(Reflection(sample=1, anchor=0, order=(1, 0), text="t", analysis="a", choice=1,
                                           status=j.rollouts[0].status, num_tokens=2),))
    html = views.anatomy_html(JudgeResult(judgment_id=1, judgment=j))
    assert "ANCHOR" not in html and "Stage 2" not in html and "Winner group" not in html
    assert "tie-breaker" in html and "no anchor, no reflections" in html
    assert set(views.confidence_frame(j)["role"]) == {"tie-breaker", "sample"}


def test_the_confidence_plot_shows_what_the_cards_show() -> None:
    from reflectrm_app.ui import views
    from reflectrm_app.records import JudgeResult

    frame = views.confidence_frame(_judgment([1, 2, 1]))  # confidences -0.1 (anchor), -0.2, -0.3
    tallest = frame.loc[frame["shown"].idxmax()]
    assert tallest["role"] == "anchor" and tallest["sample"] == "#00"  # bars hung from 0 made it the shortest
    # the lowest sample's card bar is 8 % long: its plot bar is too (it used to be a zero-height bar)
    j = _judgment([1, 2, 1])
    html = views.anatomy_html(JudgeResult(judgment_id=1, judgment=j))
    card_widths = [float(w) for w in re.findall(r'rr-fill" style="width:([0-9.]+)%', html)]
    assert [round(x, 1) for x in sorted(frame["shown"])] == sorted(card_widths) and frame["shown"].min() == 8.0


def test_a_greedy_judgment_names_the_greedy_output_as_its_voter(services: Services, pair: PreferencePair) -> None:
    from reflectrm_app.ui import views
    from reflectrm_app.records import JudgeResult

    result = services.judging.judge(pair, strategy="greedy")
    html = views.anatomy_html(JudgeResult(judgment_id=result.judgment_id, judgment=result.judgment))
    vote = views.vote_text(result.judgment)
    assert "voters the greedy output" in vote and "#0" not in vote  # it named sample #0
    assert all(r.greedy for r in result.judgment.rollouts)
    assert "not used" not in html  # no samples are shown, so none are "below"


def test_the_curate_table_says_which_label_is_which() -> None:
    from reflectrm_app.ui import views
    from reflectrm_app.records import ExampleRow

    row = ExampleRow(kind="reflection", id=1, state="active", source="s", subset="", query="q", response_1="a",
                     response_2="b", label=2, judge_verdict=1, human_verdict=2, critique_1="x" * 500,
                     critique_2="y", known_label=1, contested="the known label says Response 1")
    frame = views.examples_frame([row])
    assert "label" not in frame.columns and "critique 1" not in frame.columns  # the long texts are in the detail
    assert frame.iloc[0]["known label"] == "Response 1" and frame.iloc[0]["trains toward"] == "Critique 2"
    assert frame.iloc[0]["contested"].startswith("yes")


def test_curate_pages_newest_first_and_filters_in_sql(services: Services) -> None:
    from datetime import date, timedelta

    from reflectrm_app.records import ExampleFilter

    services.judging.add_demo_pairs(3)
    for _, p in services.judging.pairs(services.judging.demo_source()):
        services.review.correct(services.judging.judge(p).judgment_id, verdict=p.label, author="ana")
    every = services.curation.browse("preference", limit=10)
    assert [r.id for r in every] == sorted((r.id for r in every), reverse=True) and len(every) == 3
    assert [r.id for r in services.curation.browse("preference", limit=2)] == [r.id for r in every[:2]]
    tomorrow = date.today() + timedelta(days=1)
    assert services.curation.browse("preference", ExampleFilter(since=tomorrow)) == []
    assert services.curation.browse("preference", ExampleFilter(source="elsewhere")) == []
    services.curation.set_excluded("preference", [every[0].id], excluded=True)
    assert services.curation.mix().preference == 2  # counted in SQL, active only


def test_history_marks_the_swapped_twin_of_an_audit(services: Services, pair: PreferencePair) -> None:
    from reflectrm_app.ui import views

    audit = services.audit.audit(pair)
    rows = views.summaries_frame(services.history.history()).set_index("id")
    # two rows with opposite labels: the swapped column says which one saw the responses swapped
    assert rows.loc[audit.swapped.judgment_id, "swapped"] == "yes"
    assert rows.loc[audit.original.judgment_id, "swapped"] == ""
    assert rows.loc[audit.swapped.judgment_id, "label"] != rows.loc[audit.original.judgment_id, "label"]


def test_the_header_names_the_judge_and_its_revision_not_the_host_path(tmp_path: Path) -> None:
    from reflectrm_app.services.runtime import judge_label
    from reflectrm.demo import DEMO_MODEL_DIR

    demo = judge_label(str(DEMO_MODEL_DIR))
    assert demo.startswith("demo judge · sha256:") and str(Path(DEMO_MODEL_DIR).parent) not in demo
    checkpoint = tmp_path / "run-7" / "checkpoint-40"
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.safetensors").write_bytes(b"weights")
    assert judge_label(str(checkpoint)).startswith("run-7/checkpoint-40 · sha256:")
    assert judge_label("org/some-judge") == "org/some-judge"  # a Hub id is its own name


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_confirmed_contested_correction_keeps_contested_in_the_export(services: Services, pair: PreferencePair,
                                                                        fmt: str) -> None:
    import pandas as pd

    against = services.judging.judge(pair).judgment_id
    agreeing = services.judging.judge(pair, seed=5).judgment_id
    services.review.correct(against, verdict=3 - pair.label, author="ana", confirmed=True)  # saved anyway
    services.review.correct(agreeing, verdict=pair.label, author="ana")
    out = services.curation.export("corrections", fmt=fmt)
    rows = pd.read_json(out, lines=True) if fmt == "jsonl" else pd.read_parquet(out)
    contested = dict(zip(rows["judgment_id"], rows["contested"], strict=True))
    # the field was missing: a curator downstream could not filter the contested ones out
    assert contested[against] == f"the known label says Response {pair.label}"
    assert contested[agreeing] == ""


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
@pytest.mark.parametrize("kind", ["preference-examples", "reflection-pairs"])
def test_a_snapshots_examples_keep_contested_in_the_export(services: Services, pair: PreferencePair, fmt: str,
                                                            kind: str) -> None:
    import pandas as pd

    against = services.judging.judge(pair).judgment_id
    agreeing = services.judging.judge(pair, seed=5).judgment_id
    services.review.correct(against, verdict=3 - pair.label, author="ana", confirmed=True)  # saved anyway
    services.review.correct(agreeing, verdict=pair.label, author="ana")
    services.curation.snapshot("reviewed")
    out = services.curation.export(kind, fmt=fmt, snapshot="reviewed")
    rows = pd.read_json(out, lines=True, dtype=False) if fmt == "jsonl" else pd.read_parquet(out)
    by_judgment = rows.groupby("judgment_id")["contested"].agg(set).to_dict()
    # a snapshot's examples went out with no 'contested' column: a curator could not filter a contested one out
    assert by_judgment[against] == {f"the known label says Response {pair.label}"}
    assert by_judgment.get(agreeing, {""}) == {""}  # unanimous analyses derive no reflection pair


def test_a_mark_against_the_outcome_rule_asks_first_and_says_what_it_teaches(services: Services,
                                                                             pair: PreferencePair) -> None:
    judged = services.judging.judge(pair)
    rollouts = judged.judgment.rollouts
    verdict = pair.label  # agrees with the label: only the marks can need a confirmation
    other = next(k for k, r in enumerate(rollouts) if r.prediction not in (None, verdict))
    agreeing = next(k for k, r in enumerate(rollouts) if r.prediction == verdict)
    # an analysis that predicted the opposite, marked right, becomes a reflection pair's better side
    with pytest.raises(NeedsConfirmation,
                       match=rf"analysis #{other} predicted Response {3 - verdict}.*better analysis"):
        services.review.correct(judged.judgment_id, verdict=verdict, author="ana", marks={other: "right"}, confirmed=False)
    with pytest.raises(NeedsConfirmation, match=rf"analysis #{agreeing} predicted your Response {verdict}.*worse"):
        services.review.correct(judged.judgment_id, verdict=verdict, author="ana", marks={agreeing: "wrong"},
                         confirmed=False)
    assert not services.runtime.store.corrections(judgment_id=judged.judgment_id)  # nothing saved before the answer
    # marks that follow the rule save at once; confirmed, the contrary ones save too
    services.review.correct(judged.judgment_id, verdict=verdict, author="ana", marks={agreeing: "right", other: "wrong"},
                     confirmed=False)
    record = services.review.correct(judged.judgment_id, verdict=verdict, author="ana", marks={other: "right"})
    assert record.marks == {other: "right"}


def test_a_contested_verdict_with_marks_against_the_outcome_asks_about_both_at_once(services: Services,
                                                                                   pair: PreferencePair) -> None:
    judged = services.judging.judge(pair)
    verdict = 3 - pair.label  # contradicts the label: asks on its own
    agreeing_with_label = next(k for k, r in enumerate(judged.judgment.rollouts) if r.prediction == pair.label)
    marks = {agreeing_with_label: "right"}  # predicted the label, not the verdict: the better side of a pair
    # the one question named only the label, so answering it saved the marks with no word on what they teach
    with pytest.raises(NeedsConfirmation) as asked:
        services.review.correct(judged.judgment_id, verdict=verdict, author="ana", marks=marks, confirmed=False)
    said = str(asked.value)
    assert f"the known label says Response {pair.label}" in said
    assert f"analysis #{agreeing_with_label} predicted Response {pair.label}" in said and "better analysis" in said


def test_the_train_tab_says_when_a_corrections_snapshot_is_below_the_papers_mix(services: Services) -> None:
    from reflectrm_app.ui import views

    services.judging.add_demo_pairs(3)
    for _, p in services.judging.pairs(services.judging.demo_source()):
        judged = services.judging.judge(p)
        services.review.correct(judged.judgment_id, verdict=p.label, author="ana")
    snapshot = services.curation.snapshot("corrections-only")
    text = views.snapshot_mix_text(services.curation.snapshots(), "corrections-only")
    assert f"{snapshot.num_preference} preference example(s), {snapshot.num_reflection} reflection pair(s)" in text
    # one preference example and up to 4 reflection pairs per correction: corrections alone fall below 4:1
    assert snapshot.num_reflection * 4 > snapshot.num_preference
    assert text.startswith("**Below the paper's 4:1 mix.**") and "add" in text
    assert views.snapshot_mix_text(services.curation.snapshots(), "no-such") == ""


def test_the_papers_examples_come_from_an_evaluated_labelled_data_set(services: Services) -> None:
    from tests.db.helpers import make_pairs

    services.runtime.store.add_pairs(make_pairs(6, prefix="lab"))  # data set "tests"
    with pytest.raises(InputError, match="evaluate it with the reflectrm or majority strategy first"):
        services.curation.derive_from_labels("tests")  # nothing judged yet
    with pytest.raises(InputError, match="'nope' does not exist"):
        services.curation.derive_from_labels("nope")
    evaluation = services.evaluation
    evaluation.run(evaluation.request("data set: tests", strategies=("reflectrm",)), cancel=threading.Event())
    report = services.curation.derive_from_labels("tests")
    assert report.judgments == 6 and report.preference == 6 - report.easy and report.preference > 0
    assert services.curation.derive_from_labels("tests").already_present == report.preference + report.reflection
    snapshot = services.curation.snapshot("paper-recipe")
    assert (snapshot.num_preference, snapshot.num_reflection) == (report.preference, report.reflection)
    assert services.training.data_mix("paper-recipe").replay == 0  # its own preference examples: nothing replayed
