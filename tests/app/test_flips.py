"""What a checkpoint's comparison with the active judge changed (the Train tab, under the comparison): the pairs that
flipped either way, with both runs' judgments, and the active corrections that share a problem (the same
conversation) or a template (the same conversation, numbers masked) with them.

A real SQLite store holding two real evaluation runs on the same labelled file (scripted judges: the judge wrong on
the "points" pairs, the checkpoint wrong on the "counter" ones) and real corrections of recorded judgments."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import reflectrm_app.services.evaluation as evaluation
from reflectrm.backends.scripted import ScriptedBackend
from reflectrm.core.types import PreferencePair
from reflectrm.errors import InputError
from reflectrm.eval.runner import EvalPlan
from reflectrm.pipeline import judge_many
from reflectrm_app.services import Services
from reflectrm_app.services.evaluation import EvalRequest, FlippedPair, Flips, RelatedCorrection, RelatedCorrections
from reflectrm_app.ui import views
from tests.app.conftest import make_services
from tests.app.test_promotion import CONFIG
from tests.conftest import critique_output, response_output

COUNTER_A = "A counter shows 9. Step 1: add 3. What does it show now?"
COUNTER_B = "A counter shows 12. Step 1: add 8. What does it show now?"
POINTS = "You have 4 points. Step 1: add 2. Step 2: add 5. How many points now?"
COLOUR = "Name the colour of a clear sky."
EVAL_PAIRS = {"count-a": COUNTER_A, "count-b": COUNTER_B, "points": POINTS, "colour": COLOUR}


def _judge(*wrong_on: str) -> Callable[[str, int, object], str]:
    """A judge that picks the GOOD response, except on a pair whose prompt holds one of `wrong_on`."""
    def respond(text: str, seed: int, params: object) -> str:
        if "Critique 1" in text:
            return critique_output(1)
        good_first = text.find("GOOD") < text.find("BAD")
        right = 1 if good_first else 2
        return response_output(3 - right if any(w in text for w in wrong_on) else right)
    return respond


JUDGE, CHECKPOINT = _judge("points"), _judge("counter")  # the checkpoint fixes "points", breaks "counter"


def _request(root: Path) -> EvalRequest:
    rows = [{"id": pid, "query": query, "response_1": f"GOOD {pid}" if k % 2 == 0 else f"BAD {pid}",
             "response_2": f"BAD {pid}" if k % 2 == 0 else f"GOOD {pid}", "label": 1 if k % 2 == 0 else 2}
            for k, (pid, query) in enumerate(EVAL_PAIRS.items())]
    data = root / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return EvalRequest(benchmark="file", data=data, plan=EvalPlan(strategies=("greedy",), both_orders=True,
                                                                  batch_size=4))


# --- the flipped pairs -----------------------------------------------------------------------------------------

EXPECTED_FLIPS = [  # (pair, order, direction): both orders of each flipped pair, in pair order; "colour" never flips
    ("count-a", False, "broken"), ("count-a", True, "broken"), ("count-b", False, "broken"),
    ("count-b", True, "broken"), ("points", False, "fixed"), ("points", True, "fixed"),
]


@dataclass(frozen=True, slots=True)
class Compared:
    services: Services
    flips: Flips
    corrections: dict[str, int]  # case id -> its correction's id


# one correction per case: the corrected pair's conversation (a query, or (role, text) turns), whether it is then
# withdrawn; and what the view must say: shares "problem" / "template" with which flipped pairs, or None (not listed)
RELATED_CASES = [
    # the same conversation with other responses: the same problem (and so the same template: the problem is said)
    pytest.param(COUNTER_A, False, ("problem", ("count-a",)), id="same-conversation-other-responses"),
    pytest.param(POINTS, False, ("problem", ("points",)), id="same-problem-as-a-fixed-pair"),
    # a correction of the flipped judgment itself (the checkpoint's judgment of count-a, as given)
    pytest.param("eval-judgment", False, ("problem", ("count-a",)), id="the-flipped-judgment-corrected"),
    # other numbers, one shape: both counter pairs flipped, both named
    pytest.param("A counter shows 30. Step 1: add 11. What does it show now?", False,
                 ("template", ("count-a", "count-b")), id="other-numbers-same-template"),
    pytest.param("A counter  shows 7.\nStep 1:   add 2. What does it show now?", False,
                 ("template", ("count-a", "count-b")), id="other-spacing-same-template"),
    # traps: one more step, another wording, a pair that did not flip, a history before the same query, withdrawn
    pytest.param("A counter shows 9. Step 1: add 3. Step 2: add 1. What does it show now?", False, None,
                 id="one-more-step-is-another-shape"),
    pytest.param("A meter reads 9. Step 1: add 3. What does it read now?", False, None, id="other-wording"),
    pytest.param(COLOUR, False, None, id="problem-of-a-pair-that-did-not-flip"),
    pytest.param((("system", "Answer in one word."), ("user", COUNTER_A)), False, None,
                 id="same-query-other-conversation"),
    pytest.param(COUNTER_A, True, None, id="withdrawn-correction-not-listed"),
]


def _conversation(spec: object) -> tuple[dict[str, str], ...]:
    if isinstance(spec, str):
        return ({"role": "user", "content": spec},)
    return tuple({"role": role, "content": text} for role, text in spec)  # type: ignore[union-attr]


def _correct_each_case(services: Services, checkpoint_run: int) -> dict[str, int]:
    store = services.runtime.store
    out: dict[str, int] = {}
    for case in RELATED_CASES:
        spec, withdrawn, _ = case.values
        if spec == "eval-judgment":
            [item] = [i for i in services.evaluation.evals.items(checkpoint_run)
                      if i.item_id == "count-a" and not i.swapped]
            jid = item.judgment_id
        else:
            pair = PreferencePair(conversation=_conversation(spec), response_1="GOOD x", response_2="BAD x", label=1,
                                  id=case.id, source="corrected")
            [jid] = store.record(list(judge_many([pair], ScriptedBackend(JUDGE), CONFIG)), swapped=False)
        correction = store.correct(jid, verdict=1, author=f"ana-{case.id}")
        if withdrawn:
            store.withdraw_correction(correction.id, author="ana")
        out[case.id] = correction.id
    return out


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Compared]:
    root = tmp_path_factory.mktemp("flips")
    services = make_services(f"sqlite:///{root / 'app.db'}", ScriptedBackend(JUDGE, model_id="judge"))
    evals, request = services.evaluation.evals, _request(root)
    judge_run = evals.run(request, backend=ScriptedBackend(JUDGE, model_id="judge"), config=CONFIG)
    checkpoint_run = evals.run(request, backend=ScriptedBackend(CHECKPOINT, model_id="ckpt"), config=CONFIG)
    corrections = _correct_each_case(services, checkpoint_run.id)
    yield Compared(services, services.evaluation.flips(judge_run.id, checkpoint_run.id), corrections)
    services.close()


def test_the_flipped_pairs_each_way_with_both_runs_judgments(compared: Compared) -> None:
    flips, evals = compared.flips, compared.services.evaluation.evals
    assert [(f.item_id, f.swapped, f.direction) for f in flips.flipped] == EXPECTED_FLIPS
    assert {f.strategy for f in flips.flipped} == {"greedy"}
    judged = {run: {(i.item_id, i.swapped): i for i in evals.items(run)} for run in (1, 2)}
    store = compared.services.runtime.store
    for f in flips.flipped:
        judge, checkpoint = judged[1][(f.item_id, f.swapped)], judged[2][(f.item_id, f.swapped)]
        assert (f.judge_judgment, f.checkpoint_judgment) == (judge.judgment_id, checkpoint.judgment_id)
        assert (judge.correct, checkpoint.correct) == ((False, True) if f.direction == "fixed" else (True, False))
        # each id opens the judgment of that pair, in that order, by that run's model
        for jid, model in ((f.judge_judgment, "judge"), (f.checkpoint_judgment, "ckpt")):
            stored = store.load(jid)  # a swapped-order judgment's pair is the swapped one ("count-a:swapped")
            assert (stored.judgment.pair.id.removesuffix(":swapped"), stored.swapped, stored.judgment.model) == \
                (f.item_id, f.swapped, model)
        assert f.query == EVAL_PAIRS[f.item_id]


@pytest.mark.parametrize(("spec", "withdrawn", "expected"), RELATED_CASES)
def test_corrections_sharing_a_problem_or_a_template(compared: Compared, request: pytest.FixtureRequest,
                                                     spec: object, withdrawn: bool, expected: object) -> None:
    case = request.node.callspec.id
    found = {c.correction_id: c for c in compared.flips.related.rows}
    mine = found.get(compared.corrections[case])
    if expected is None:
        assert mine is None, mine
        return
    assert mine is not None, f"correction of {case} not listed"
    assert (mine.shares, mine.with_items, mine.author) == (*expected, f"ana-{case}")  # type: ignore[misc]


def test_related_corrections_are_newest_first_and_uncut(compared: Compared) -> None:
    related = compared.flips.related
    listed = sum(1 for case in RELATED_CASES if case.values[2] is not None)
    assert len(related.rows) == listed and not related.cut
    ids = [c.correction_id for c in related.rows]
    assert ids == sorted(ids, reverse=True)


@pytest.mark.parametrize(("limit", "page", "cut"), [
    pytest.param(2, 500, True, id="cut-to-the-newest-two"),
    pytest.param(5, 500, False, id="exactly-as-many-as-there-are-is-not-cut"),
    pytest.param(4, 500, True, id="one-short-is-cut"),
    pytest.param(300, 1, False, id="read-one-correction-per-page"),  # the keyset paging loses and repeats none
    pytest.param(300, 3, False, id="pages-of-three-across-the-ten"),
    pytest.param(3, 2, True, id="cut-inside-a-later-page"),
])
def test_the_related_view_is_bounded_and_says_when_cut(compared: Compared, monkeypatch: pytest.MonkeyPatch,
                                                       limit: int, page: int, cut: bool) -> None:
    monkeypatch.setattr(evaluation, "CORRECTIONS_PAGE", page)
    everything = [c.correction_id for c in compared.flips.related.rows]
    got = compared.services.evaluation.related_corrections(list(compared.flips.flipped), limit=limit)
    assert [c.correction_id for c in got.rows] == everything[:limit] and got.cut is cut


def test_no_flipped_pair_relates_no_correction(compared: Compared) -> None:
    same = compared.services.evaluation.flips(1, 1)  # a run against itself: nothing flips
    assert same.flipped == () and same.related.rows == () and not same.related.cut


@pytest.mark.parametrize(("runs", "said"), [
    pytest.param((1, 99), "run 99 does not exist", id="missing-run"),
    pytest.param((99, 2), "run 99 does not exist", id="missing-judge-run"),
])
def test_flips_of_runs_that_do_not_exist_are_refused(compared: Compared, runs: tuple[int, int], said: str) -> None:
    with pytest.raises(InputError, match=said):
        compared.services.evaluation.flipped_pairs(*runs)


def test_flips_of_runs_on_other_pairs_are_refused(tmp_path: Path) -> None:
    services = make_services(f"sqlite:///{tmp_path / 'app.db'}", ScriptedBackend(JUDGE, model_id="judge"))
    try:
        evals, request = services.evaluation.evals, _request(tmp_path)
        first = evals.run(request, backend=ScriptedBackend(JUDGE, model_id="judge"), config=CONFIG)
        other = EvalRequest(benchmark="file", data=request.data, plan=request.plan, limit=2, seed=3)
        second = evals.run(other, backend=ScriptedBackend(CHECKPOINT, model_id="ckpt"), config=CONFIG)
        with pytest.raises(InputError, match="judged different pairs"):
            services.evaluation.flipped_pairs(first.id, second.id)
    finally:
        services.close()


# --- the lines over the two tables say how many, and when a table is cut -----------------------------------------

def _flips(n_fixed: int, n_broken: int, *, related: int = 0, cut: bool = False) -> Flips:
    """A comparison's flips as values (the view's wording is pure: no store needed)."""
    flipped = tuple(FlippedPair(item_id=f"p{k}", strategy="greedy", swapped=False, direction=direction,
                                judge_judgment=2 * k + 1, checkpoint_judgment=2 * k + 2, query=f"q{k}", keys=None)
                    for k, direction in enumerate(["fixed"] * n_fixed + ["broken"] * n_broken))
    rows = tuple(RelatedCorrection(correction_id=100 - k, judgment_id=k + 1, author="ana", verdict=2, shares="template",
                                   with_items=tuple(f"p{i}" for i in range(7))) for k in range(related))
    return Flips(judge_run=1, checkpoint_run=2, flipped=flipped, related=RelatedCorrections(rows, cut=cut))


@pytest.mark.parametrize(("flips", "limit", "flipped_line", "rows", "related_line"), [
    pytest.param(_flips(1, 2, related=1), 300, "3 flipped (pair, strategy, order): 1 fixed, 2 broken; select a row",
                 3, "1 active correction(s) share a problem or a template with the flipped pairs, newest first",
                 id="all-shown"),
    pytest.param(_flips(0, 5, related=2, cut=True), 3, "5 flipped (pair, strategy, order): 0 fixed, 5 broken; the "
                 "first 3 shown", 3, "(the newest 2 shown: more do)", id="both-cut-and-said"),
    pytest.param(_flips(2, 0), 300, "2 flipped (pair, strategy, order): 2 fixed, 0 broken", 2,
                 "no active correction shares a problem or a template", id="nothing-related"),
    pytest.param(_flips(0, 0), 300, "0 flipped (pair, strategy, order): 0 fixed, 0 broken", 0,
                 "no pair flipped: no corrections to relate", id="nothing-flipped"),
])
def test_the_lines_over_the_tables(flips: Flips, limit: int, flipped_line: str, rows: int, related_line: str) -> None:
    assert flipped_line in views.flips_text(flips, limit=limit)
    assert views.flips_text(flips, limit=limit).startswith("runs 1 (the judge) and 2 (the checkpoint): ")
    assert len(views.flipped_frame(flips, limit=limit)) == rows
    assert related_line in views.related_text(flips)
    related = views.related_frame(flips)
    assert list(related.columns) == list(views.RELATED_COLUMNS) and len(related) == len(flips.related.rows)
    if len(related):  # seven flipped pairs shared: five named, the rest counted
        assert related.iloc[0].tolist() == [100, "ana", "Response 2", "template", "p0, p1, p2, p3, p4 and 2 more"]
