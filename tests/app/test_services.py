"""The app's service functions, called directly (scripted judge, real SQLite store)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from reflectrm_app.records import ExampleFilter, Mix
from reflectrm_app.resources import Cancelled, ModelHolder, ReviewLeases, warm_up_generation
from reflectrm_app.services import Services
from reflectrm_app.ui.forms import build_pair, parse_ids, parse_marks
from reflectrm.audit import audit_stats
from reflectrm.core.types import PreferencePair
from reflectrm.errors import InputError
from reflectrm.pipeline import Progress, Stage, judge_many
from reflectrm.backends import ScriptedBackend
from reflectrm.core.config import JudgeConfig
from tests.app.conftest import first_position_output

# --- pure helpers -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "form, expected_query, expected_turns",
    [
        pytest.param({"query": "2+2?", "messages": ""}, "2+2?", 1, id="single-turn"),
        # the conversation box wins over the query box when both are filled
        pytest.param({"query": "ignored", "messages": json.dumps([
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "2+2?"}])}, "2+2?", 3, id="multi-turn-overrides-query"),
        # whitespace-only conversation means "no conversation", not "invalid JSON"
        pytest.param({"query": "3+3?", "messages": "   \n"}, "3+3?", 1, id="blank-conversation"),
    ],
)
def test_build_pair_reads_the_form(form: dict, expected_query: str, expected_turns: int) -> None:
    pair = build_pair(response_1="4", response_2="5", **form)
    assert pair.query == expected_query
    assert len(pair.conversation) == expected_turns
    assert pair.source == "manual"


@pytest.mark.parametrize(
    "form, fragment",
    [
        pytest.param({"query": "q", "messages": "[{"}, "not valid JSON", id="broken-json"),
        pytest.param({"query": "q", "messages": '[{"role": "assistant", "content": "x"}]'}, "end with a user turn",
                     id="ends-with-assistant"),
        pytest.param({"query": "   ", "messages": ""}, "query is empty", id="empty-query"),
        pytest.param({"query": "q", "messages": "", "response_1": " "}, "response_1 is empty", id="empty-response"),
    ],
)
def test_build_pair_rejects_bad_forms_with_a_fix(form: dict, fragment: str) -> None:
    fields = {"response_1": "a", "response_2": "b", **form}
    with pytest.raises(InputError, match=fragment):
        build_pair(**fields)


def test_build_pair_keeps_data_set_identity_only_while_texts_are_unchanged(pair: PreferencePair) -> None:
    same = build_pair(query=pair.query, messages="", response_1=pair.response_1, response_2=pair.response_2,
                      label=1, base=pair.to_dict())
    assert (same.id, same.source, same.subset) == ("t:1", "tests", "add")
    edited = build_pair(query=pair.query, messages="", response_1="86", response_2=pair.response_2,
                        label=1, base=pair.to_dict())
    assert edited.source == "manual" and edited.id != "t:1"


@pytest.mark.parametrize("label", [
    pytest.param(2, id="the-other-response"),  # the reported fork: 30 pairs became 31, two labels, one id
    pytest.param(None, id="unknown"),  # dropping the label would also store a second, unlabelled copy
])
def test_judging_a_picked_pair_under_another_label_is_refused_and_adds_no_pair(
    services: Services, label: int | None
) -> None:
    services.judging.add_demo_pairs(3)
    source = services.judging.demo_source()
    [(_, picked), *_] = services.judging.pairs(source)
    other = label if label is None else 3 - picked.label
    before = len(services.judging.pairs(source))
    with pytest.raises(InputError, match="labelled Response .* second copy.*Review queue"):
        services.judging.judge(build_pair(query=picked.query, messages="", response_1=picked.response_1,
                                  response_2=picked.response_2, label=other, base=picked.to_dict()))
    assert len(services.judging.pairs(source)) == before


def _typed(stored: PreferencePair, *, order: str, label: int | None) -> PreferencePair:
    """The stored pair's texts typed into the Judge form (or sent to /judge): no data-set identity."""
    shown = stored if order == "same" else stored.swapped()
    return build_pair(query=shown.query, messages="", response_1=shown.response_1, response_2=shown.response_2,
                      label=label)


ROOMS = {"judge": "judging", "audit": "audit"}  # the service each action is a method of


@pytest.mark.parametrize("stored_label, order, label, refused", [
    # the reported fork: the same texts typed again with the other known label became a second pair
    pytest.param(1, "same", 2, True, id="same-order-other-label"),
    # the same number in the other order names the other response: a contradiction too
    pytest.param(1, "swapped", 1, True, id="swapped-order-same-number"),
    pytest.param(2, "same", 1, True, id="stored-as-2-typed-as-1"),
    # agreeing with what is stored, or saying nothing, contradicts nothing
    pytest.param(1, "same", 1, False, id="same-label"),
    pytest.param(1, "swapped", 2, False, id="swapped-order-label-follows"),
    pytest.param(1, "same", None, False, id="unknown-label"),
    # an unlabelled stored pair gains a label: nothing to contradict
    pytest.param(None, "same", 2, False, id="stored-unlabelled"),
])
@pytest.mark.parametrize("action", ["judge", "audit"])
def test_judging_stored_texts_under_the_other_known_label_is_refused_before_generating(
    services: Services, pair: PreferencePair, scripted_backend: ScriptedBackend, stored_label: int | None,
    order: str, label: int | None, refused: bool, action: str,
) -> None:
    stored = PreferencePair.from_dict({**pair.to_dict(), "label": stored_label})
    services.runtime.store.add_pairs([stored])
    before = services.runtime.store.counts()
    typed = _typed(stored, order=order, label=label)
    if refused:
        with pytest.raises(InputError) as caught:
            getattr(getattr(services, ROOMS[action]), action)(typed)
        message = str(caught.value)
        assert "\n" not in message and "second copy" in message and "Review tab" in message
        assert pair.query not in message and pair.response_1 not in message  # the texts are not echoed
        assert services.runtime.store.counts() == before  # no pair, no judgment
        assert scripted_backend.calls == []  # refused before any generation
    else:
        getattr(getattr(services, ROOMS[action]), action)(typed)
        assert services.runtime.store.counts()["judgments"] == before["judgments"] + (1 if action == "judge" else 2)


@pytest.mark.parametrize("on_screen, saved", [
    pytest.param("first", True, id="the-item-on-screen"),
    # the reported trap: the reviewer's screen moved on to the next item; a key meant for the first must not
    # save the next one, and one that names the first is refused as well (it is not on screen any more)
    pytest.param("next", False, id="the-screen-moved-on"),
    pytest.param(None, True, id="api-without-a-screen"),  # /correct names its judgment itself
])
def test_a_review_save_lands_only_on_the_item_the_reviewer_has_on_screen(
    services: Services, pair: PreferencePair, on_screen: str | None, saved: bool
) -> None:
    ids = [services.judging.judge(PreferencePair.from_query(f"What is {k} + 1?", f"{k + 1}", f"{k + 2}", label=1)).judgment_id
           for k in range(2)]
    first = services.review.next_for_review(reviewer="r")
    shown = first.stored.id if on_screen == "first" else None
    if on_screen == "next":
        shown = services.review.next_for_review(reviewer="r", after=first.stored.id).stored.id
    if saved:
        record = services.review.correct(first.stored.id, verdict=1, author="r", on_screen=shown)
        assert record.judgment_id == first.stored.id
    else:
        with pytest.raises(InputError, match=rf"nothing saved: judgment #{first.stored.id} is no longer the item"):
            services.review.correct(first.stored.id, verdict=1, author="r", on_screen=shown)
        assert services.runtime.store.corrections() == []
    assert set(ids) >= {first.stored.id}


def test_parse_marks_and_ids() -> None:
    assert parse_marks([0, 3], [5]) == {0: "right", 3: "right", 5: "wrong"}
    with pytest.raises(InputError, match="both right and wrong"):
        parse_marks([2], [2])
    assert parse_ids("3, 5 7") == [3, 5, 7]
    with pytest.raises(InputError, match="whole numbers"):
        parse_ids("3, x")


@pytest.mark.parametrize(
    "mix, ratio, advice",
    [
        pytest.param(Mix(preference=0, reflection=0), None, "No active examples", id="empty"),
        pytest.param(Mix(preference=8, reflection=2), 4.0, "matches", id="paper-mix"),
        # one correction typically derives 1 preference example and up to 4 reflection pairs: far below 4:1
        pytest.param(Mix(preference=1, reflection=4), 0.25, "add 15 preference", id="reflection-heavy"),
        pytest.param(Mix(preference=9, reflection=1), 9.0, "exclude 5", id="preference-heavy"),
    ],
)
def test_mix_against_the_paper(mix: Mix, ratio: float | None, advice: str) -> None:
    assert mix.ratio == ratio
    assert advice in mix.advice()


def test_audit_stats_counts_flips_first_position_and_both_orders_accuracy() -> None:
    pairs = [PreferencePair.from_query(f"q{k}", "a", "b", label=1 + k % 2, subset="x" if k < 2 else "y")
             for k in range(4)]
    biased = ScriptedBackend(first_position_output)
    judged = list(judge_many([p for pair in pairs for p in (pair, pair.swapped())], biased, JudgeConfig(max_new_tokens=8)))
    stats = {s.subset: s for s in audit_stats(list(zip(judged[::2], judged[1::2])))}
    assert list(stats) == ["x", "y", "all"]
    total = stats["all"]
    # always "Response 1": every pair flips, the first position always wins, no pair is right in both orders
    assert (total.pairs, total.flipped, total.compared) == (4, 4, 4)
    assert total.first_position_win_rate == 1.0
    assert total.both_orders_accuracy == 0.0
    assert stats["x"].pairs == 2 and stats["y"].pairs == 2


# --- judge ------------------------------------------------------------------------------------------------------


def test_judge_records_and_reopens_exactly(services: Services, pair: PreferencePair) -> None:
    result = services.judging.judge(pair)
    assert len(result.judgment.rollouts) == 8
    assert services.judging.open(result.judgment_id).judgment == result.judgment
    assert result.generated == 2  # stage 1, stage 2


def test_reaggregate_reuses_rollouts_without_generating(services: Services, pair: PreferencePair,
                                                         scripted_backend: ScriptedBackend) -> None:
    result = services.judging.judge(pair)
    calls = len(scripted_backend.calls)
    majority = services.judging.reaggregate(result.judgment_id, "majority")
    assert majority.generated == 0 and len(scripted_backend.calls) == calls
    assert majority.judgment.strategy == "majority"
    assert majority.judgment.rollouts == result.judgment.rollouts
    assert services.judging.open(result.judgment_id).judgment == result.judgment  # the record is unchanged


def test_reaggregate_generates_only_what_a_strategy_lacks(services: Services, pair: PreferencePair) -> None:
    result = services.judging.judge(pair)
    greedy = services.judging.reaggregate(result.judgment_id, "greedy")
    assert greedy.generated == 1
    assert any(r.greedy for r in greedy.judgment.rollouts)


def test_stop_before_generation_records_nothing(services: Services, pair: PreferencePair) -> None:
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        services.judging.judge(pair, cancel=cancel)
    assert services.runtime.store.counts()["judgments"] == 0


def test_progress_reports_both_stages(services: Services, pair: PreferencePair) -> None:
    seen: list[Progress] = []
    services.judging.judge(pair, progress=seen.append)
    assert [(e.stage, e.done, e.total) for e in seen] == [
        (Stage.SAMPLING, 0, 8), (Stage.SAMPLING, 8, 8), (Stage.REFLECTING, 0, 7), (Stage.REFLECTING, 7, 7),
        (Stage.DECIDED, 1, 1)]
    assert [e.fraction for e in seen] == [0.0, 0.5, 0.5, 1.0, 1.0]
    assert seen[1].tokens > 0 and str(seen[0]).startswith("stage 1")


# --- audit ------------------------------------------------------------------------------------------------------


def test_audit_records_linked_twins(biased_services: Services, pair: PreferencePair) -> None:
    result = biased_services.audit.audit(pair)
    assert result.agree is False  # the biased judge picks "Response 1" in both orders
    original = biased_services.judging.open(result.original.judgment_id)
    assert original.twin_id == result.swapped.judgment_id
    assert biased_services.judging.open(result.swapped.judgment_id).swapped


def test_batch_audit_reports_per_subset_and_lists_flips(biased_services: Services) -> None:
    biased_services.judging.add_demo_pairs(6)
    seen: list[float] = []
    report = biased_services.audit.batch_audit(biased_services.judging.demo_source(), sample=5, seed=1,
                                         progress=lambda e: seen.append(e.fraction))
    total = report.subsets[-1]
    assert total.subset == "all" and total.pairs == 5
    assert total.flip_rate == 1.0 and total.first_position_win_rate == 1.0
    assert len(report.flipped) == 5
    assert seen[0] == 0.0  # progress shows from the first moment, not after the first batch
    assert seen == sorted(seen) and seen[-1] == 1.0 and {0.4, 0.8} <= set(seen)  # batches of 2 pairs
    assert {s.subset for s in report.subsets} <= {*biased_services.judging.demo_domain().kinds, "all"}
    flipped = report.flipped[0]
    assert biased_services.judging.open(flipped.judgment_id).twin_id == flipped.twin_id


def test_batch_audit_stops_between_batches(biased_services: Services) -> None:
    biased_services.judging.add_demo_pairs(6)
    cancel = threading.Event()

    def stop_after_first(event: Progress) -> None:
        if event.fraction is not None and event.fraction >= 2 / 6:  # the first batch is done
            cancel.set()

    with pytest.raises(Cancelled):
        biased_services.audit.batch_audit(biased_services.judging.demo_source(), cancel=cancel, progress=stop_after_first)
    assert biased_services.runtime.store.counts()["judgments"] == 4  # the first batch (2 pairs x 2 orders) only


def test_batch_audit_needs_pairs(services: Services) -> None:
    with pytest.raises(InputError, match="pick a data set"):
        services.audit.batch_audit("")
    with pytest.raises(InputError, match="has no pairs"):
        services.audit.batch_audit("nothing-here")


# --- review and corrections -------------------------------------------------------------------------------------


def test_two_reviewers_get_different_items(services: Services) -> None:
    services.judging.add_demo_pairs(3)
    for _, p in services.judging.pairs(services.judging.demo_source()):
        services.judging.judge(p)
    a = services.review.next_for_review(reviewer="a")
    b = services.review.next_for_review(reviewer="b")
    assert a is not None and b is not None
    assert a.stored.id != b.stored.id
    again = services.review.next_for_review(reviewer="a")
    assert again is not None and again.stored.id == a.stored.id  # a still holds its item


def test_review_skips_and_empties(services: Services, pair: PreferencePair) -> None:
    jid = services.judging.judge(pair).judgment_id
    assert services.review.next_for_review(reviewer="a", skip=[jid]) is None
    item = services.review.next_for_review(reviewer="a")
    assert item is not None and item.stored.id == jid and item.correction is None
    services.review.correct(jid, verdict=1, author="ana")
    assert services.review.next_for_review(reviewer="a") is None  # corrected judgments leave the queue


def test_leases_expire() -> None:
    leases = ReviewLeases(ttl_s=0.0)
    assert leases.take(1, "a")
    assert leases.take(1, "b")  # a's lease has lapsed
    assert leases.holding("b") is None


def test_a_lease_taken_unless_holding_is_refused_to_a_reviewer_who_holds_an_item() -> None:
    leases = ReviewLeases()
    assert leases.holding("a") is None and leases.take(1, "a", unless_holding=True)
    assert not leases.take(2, "a", unless_holding=True) and leases.holding("a") == 1
    assert leases.take(2, "a") and leases.holding("a") == 2  # a plain take moves the reviewer's one lease


def _judged(services: Services, n: int) -> list[int]:
    services.judging.add_demo_pairs(n)
    return [services.judging.judge(p).judgment_id for _, p in services.judging.pairs(services.judging.demo_source())]


def test_the_tab_opening_takes_the_queues_first_item_for_a_reviewer_who_holds_none(services: Services) -> None:
    _judged(services, 3)
    first = services.review.next_for_review(reviewer="a", keep_held=True)
    assert first is not None and services.review.holding("a") == first.stored.id
    assert first.stored.id == services.runtime.store.review_queue(limit=1)[0].id
    assert services.review.next_for_review(reviewer="a", keep_held=True) is None  # it holds one: the tab leaves it on screen
    other = services.review.next_for_review(reviewer="b", keep_held=True)
    assert other is not None and other.stored.id != first.stored.id  # held by a: b gets the next


def test_an_item_opened_while_the_tab_opens_is_not_replaced_by_the_queues_first(services: Services,
                                                                                 monkeypatch) -> None:
    """Opening the tab and opening a judgment by number are in flight at once: the number wins, whichever lease
    step comes first (once the browser test's key press saved nothing, its item replaced under it)."""
    ids = _judged(services, 3)
    opened = ids[-1]
    store = services.runtime.store
    read = store.review_queue

    def open_while_reading(**kwargs):  # the Open button's handler runs between the read and the lease
        queue = read(**kwargs)
        services.review.review_item(opened, reviewer="a")
        return queue

    monkeypatch.setattr(store, "review_queue", open_while_reading)
    assert services.review.next_for_review(reviewer="a", keep_held=True) is None
    assert services.review.holding("a") == opened


def test_correction_derives_examples_and_editing_replaces_them(services: Services, pair: PreferencePair) -> None:
    stored = services.judging.open(services.judging.judge(pair).judgment_id)
    rollouts = stored.judgment.rollouts
    right = [k for k, r in enumerate(rollouts) if r.prediction == 1 and r.analysis]
    wrong = [k for k, r in enumerate(rollouts) if r.prediction == 2 and r.analysis]
    assert right and wrong, "the scripted judge gives both verdicts"
    record = services.review.correct(stored.id, verdict=1, author="ana", note="first", marks={right[0]: "right"})
    assert len(record.preference_example_ids) == 1 and record.reflection_pair_ids
    rows = services.curation.browse("reflection")
    assert {r.id for r in rows} == set(record.reflection_pair_ids)
    texts = {r.analysis for r in rollouts}
    assert all(row.critique_1 in texts and row.critique_2 in texts for row in rows)
    assert all(row.human_verdict == 1 and row.judge_verdict == stored.judgment.verdict for row in rows)
    edited = services.review.correct(stored.id, verdict=2, author="ben", note="second")
    assert edited.id == record.id and edited.revision == 2 and edited.verdict == 2
    assert services.curation.browse("preference")[0].label == 2


def test_correct_rejects_bad_input(services: Services, pair: PreferencePair) -> None:
    jid = services.judging.judge(pair).judgment_id
    with pytest.raises(InputError, match="verdict must be 1 or 2"):
        services.review.correct(jid, verdict=3, author="a")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="no such analysis"):
        services.review.correct(jid, verdict=1, author="a", marks={42: "right"})
    with pytest.raises(InputError, match="does not exist"):
        services.review.correct(jid + 100, verdict=1, author="a")


def test_concurrent_corrections_of_different_items_lose_nothing(services: Services) -> None:
    services.judging.add_demo_pairs(6)
    ids = [services.judging.judge(p).judgment_id for _, p in services.judging.pairs(services.judging.demo_source())]
    errors: list[BaseException] = []

    def correct(jid: int, verdict: int) -> None:
        try:
            services.review.correct(jid, verdict=verdict, author=f"r{jid}")
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=correct, args=(jid, 1 + k % 2)) for k, jid in enumerate(ids)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    got = {c.judgment_id: c.verdict for c in services.runtime.store.corrections()}
    assert got == {jid: 1 + k % 2 for k, jid in enumerate(ids)}


# --- curate -----------------------------------------------------------------------------------------------------


@pytest.fixture
def corrected(services: Services, pair: PreferencePair) -> int:
    jid = services.judging.judge(pair).judgment_id
    return services.review.correct(jid, verdict=1, author="ana").id


@pytest.mark.parametrize(
    "filters, kept",
    [
        pytest.param(ExampleFilter(), True, id="no-filter"),
        pytest.param(ExampleFilter(source="tests"), True, id="source-match"),
        pytest.param(ExampleFilter(source="other"), False, id="source-miss"),
        # search is case-insensitive and covers the responses, not just the query
        pytest.param(ExampleFilter(search="ANSWER IS 75"), True, id="search-response"),
        pytest.param(ExampleFilter(search="no such text"), False, id="search-miss"),
        pytest.param(ExampleFilter(states=("excluded",)), False, id="state"),
        pytest.param(ExampleFilter(until=__import__("datetime").date(2000, 1, 1)), False, id="date"),
    ],
)
def test_browse_filters(services: Services, corrected: int, filters: ExampleFilter, kept: bool) -> None:
    assert bool(services.curation.browse("preference", filters)) is kept


def test_browse_agreement_filter(services: Services, corrected: int) -> None:
    [row] = services.curation.browse("preference")
    agrees = row.judge_verdict == 1
    assert bool(services.curation.browse("preference", ExampleFilter(agreement="agrees"))) is agrees
    assert bool(services.curation.browse("preference", ExampleFilter(agreement="disagrees"))) is not agrees


def test_exclude_restore_snapshot_export(services: Services, corrected: int, tmp_path: Path) -> None:
    [row] = services.curation.browse("preference")
    assert services.curation.set_excluded("preference", [row.id], excluded=True) == 1
    assert services.curation.mix().preference == 0
    assert services.curation.browse("preference", ExampleFilter(states=("excluded",)))[0].state == "excluded"
    assert services.curation.set_excluded("preference", [row.id], excluded=False) == 1
    snap = services.curation.snapshot("  first  ", note="n")
    assert snap.name == "first" and snap.num_preference == 1
    out = services.curation.export("training", fmt="jsonl", snapshot="first")
    lines = out.read_text().splitlines()
    assert len(lines) == snap.num_preference + snap.num_reflection
    assert services.curation.export("training", fmt="hf").suffix == ".zip"
    with pytest.raises(InputError, match="no examples"):
        services.curation.set_excluded("preference", [], excluded=True)


# --- history ----------------------------------------------------------------------------------------------------


def test_history_is_newest_first_and_searchable(services: Services, pair: PreferencePair) -> None:
    first = services.judging.judge(pair).judgment_id
    other = PreferencePair.from_query("What is 9 * 12?", "108", "118", label=1, source="tests")
    second = services.judging.judge(other).judgment_id
    assert [s.id for s in services.history.history()] == [second, first]
    assert [s.id for s in services.history.history(search="9 * 12")] == [second]


def test_the_model_is_warmed_up_once_before_first_use(scripted_backend: ScriptedBackend) -> None:
    holder = ModelHolder(lambda: scripted_backend, warm=warm_up_generation)
    holder.warm_up().join()
    assert len(scripted_backend.calls) == 9  # 8 samples + 1 greedy
    assert holder.get() is scripted_backend and len(scripted_backend.calls) == 9
