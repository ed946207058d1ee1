"""The agreement bench (`bench/agreement_pays.py`): its simulated reviewers slip at their set rates and answer a
review round through the app's services; arm (a) keeps one of each item's answers as is, arm (b) the round's
labels; the two are cut to one count."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from reflectrm.backends import ScriptedBackend
from reflectrm.backends.base import Completion, SamplingParams
from reflectrm.demo.domains import ARITHMETIC
from tests.app.conftest import make_services
from tests.conftest import critique_output, load_bench, response_output


@pytest.fixture(scope="module")
def bench():
    return load_bench("agreement_pays")


MARKS = {0: "right", 1: "wrong", 2: "right", 3: "right", 5: "wrong"}


@pytest.mark.parametrize("error, label, want_verdict, want_marks", [
    pytest.param(0.0, 1, 1, MARKS, id="careful-to-a-fault-gives-the-truth"),
    pytest.param(1.0, 1, 2, {k: {"right": "wrong", "wrong": "right"}[m] for k, m in MARKS.items()},
                 id="always-slips-flips-verdict-and-every-mark"),
    pytest.param(1.0, 2, 1, {k: {"right": "wrong", "wrong": "right"}[m] for k, m in MARKS.items()},
                 id="flip-of-verdict-2-is-1-not-3"),  # trap: 3 - label, not label + 1
])
def test_a_reviewer_answers_the_truth_with_its_slips(bench, error, label, want_verdict, want_marks) -> None:
    verdict, marks = bench.Reviewer("r", error).answer(7, label=label, marks=MARKS, seed=1)
    assert (verdict, marks) == (want_verdict, want_marks)


def test_a_reviewer_slips_at_its_rate_and_alike_when_asked_again(bench) -> None:
    careless = bench.Reviewer("careless", 0.35)
    truth = {k: "right" for k in range(8)}
    answers = [careless.answer(j, label=1, marks=truth, seed=3) for j in range(1500)]
    assert answers == [careless.answer(j, label=1, marks=truth, seed=3) for j in range(1500)]  # a resumed run
    verdicts = sum(v == 2 for v, _ in answers) / len(answers)
    marks = sum(m == "wrong" for _, given in answers for m in given.values()) / (8 * len(answers))
    assert abs(verdicts - 0.35) < 0.05 and abs(marks - 0.35) < 0.02
    other = bench.Reviewer("careless-2", 0.35)
    assert answers != [other.answer(j, label=1, marks=truth, seed=3) for j in range(1500)]  # slips of their own


@pytest.mark.parametrize("text, overlap, problem", [
    pytest.param("ana=0.1,ben", 2, "NAME=RATE", id="entry-without-rate"),
    pytest.param("=0.1,ben=0.2", 2, "NAME=RATE", id="entry-without-name"),
    pytest.param("ana=0.1,ben=lots", 2, "from 0 to 1", id="rate-not-a-number"),
    pytest.param("ana=0.1,ben=1.5", 2, "from 0 to 1", id="rate-above-one"),
    pytest.param("ana=0.1,ben=-0.1", 2, "from 0 to 1", id="rate-below-zero"),
    pytest.param("ana=0.1,ben=nan", 2, "from 0 to 1", id="nan-rate"),  # trap: NaN passes a `rate > 1` check
    pytest.param("ana=0.1,ANA=0.2", 2, "twice", id="same-name-other-case"),
    pytest.param("ana=0.1,adjudicator=0.2", 2, "adjudicator", id="the-adjudicator-as-a-reviewer"),
    pytest.param("ana=0.1,ben=0.2", 3, "--overlap 3 needs at least 3", id="fewer-reviewers-than-overlap"),
])
def test_bad_reviewer_lists_are_refused_in_one_line(bench, text, overlap, problem) -> None:
    with pytest.raises(ValueError, match=problem) as e:
        bench.parse_reviewers(text, overlap=overlap)
    assert "\n" not in str(e.value)


def test_the_default_reviewers_are_three_careful_and_one_careless(bench) -> None:
    reviewers = bench.parse_reviewers(bench.DEFAULT_REVIEWERS, overlap=2)
    assert sorted(r.error for r in reviewers) == [0.05, 0.05, 0.05, 0.35]


@pytest.mark.parametrize("a, b, n", [
    pytest.param(list(range(10)), list(range(4)), 4, id="first-longer-is-cut"),
    pytest.param(list(range(3)), list(range(20, 29)), 3, id="second-longer-is-cut"),
    pytest.param([5, 1, 3], [9, 7, 8], 3, id="equal-kept-whole-in-order"),
    pytest.param([], [1, 2], 0, id="one-empty-empties-both"),
])
def test_the_arms_are_cut_to_one_count(bench, a, b, n) -> None:
    x, y = bench.matched(a, b, seed=5)
    assert len(x) == len(y) == n and set(x) <= set(a) and set(y) <= set(b)
    assert x == sorted(x) and y == sorted(y)
    assert (x, y) == bench.matched(a, b, seed=5)  # seeded


def test_independent_slips_predict_agreement(bench) -> None:
    assert bench.expected_agreement(0.05, 0.05) == pytest.approx(0.905)
    assert bench.expected_agreement(0.05, 0.35) == pytest.approx(0.95 * 0.65 + 0.05 * 0.35)


# --- a round worked through the services, on a scripted judge ----------------------------------------------------

PAIRS = ARITHMETIC.make_pairs(6, seed=11, source="agree-pool")


def worked_or_wrong(prompt: str, seed: int, params: SamplingParams) -> Completion:
    """Even seeds work the pair's problem rightly, odd ones say Response 1 with nonsense arithmetic."""
    if "## Critiques for Judgment" in prompt:
        return Completion(critique_output(1), (), 5)
    pair = next(p for p in PAIRS if p.query in prompt)
    text = ARITHMETIC.response_example(pair) if seed % 2 == 0 else response_output(1, "2 + 2 = 5.")
    return Completion(text, tuple(-0.1 * (seed % 5 + 1) for _ in range(6)), 6)


@pytest.fixture
def loop(bench, tmp_path: Path):
    services = make_services(f"sqlite:///{tmp_path / 'loop.db'}", ScriptedBackend(worked_or_wrong))
    loop = bench.Loop.__new__(bench.Loop)  # the services of a test store, not the app's model
    loop.services, loop.domain, loop.figures, loop.out = services, ARITHMETIC, {}, tmp_path
    loop.args = SimpleNamespace(overlap=2, top=len(PAIRS), rule="agreed-or-adjudicated", resamples=50)
    services.runtime.store.add_pairs(PAIRS)
    for pair in PAIRS:
        services.judging.judge(pair)
    yield loop
    services.close()


def test_a_round_of_careful_and_careless_reviewers_through_the_services(bench, loop) -> None:
    # two who never slip and one who always does: every item they share with the careless one is disputed and
    # adjudicated (by an adjudicator who never slips), every other item agreed, every label the truth
    reviewers = (bench.Reviewer("ana", 0.0), bench.Reviewer("ben", 0.0), bench.Reviewer("cy", 1.0))
    bench.open_round(loop, reviewers)
    assert bench.work_round(loop, reviewers) == 2 * len(PAIRS)
    decided = bench.adjudicate(loop, 0.0)
    answers = bench.exported_answers(loop)
    truth = {s.id: bench.truth_of(loop, s) for s in loop.services.runtime.store.load_many(
        sorted({a["judgment_id"] for a in answers}))}
    assert len(truth) == len(PAIRS) and all(sum(a["judgment_id"] == j for a in answers) == 2 for j in truth)
    for a in answers:
        label, marks = truth[a["judgment_id"]]
        assert (a["verdict"] == label) is (a["reviewer"] != "cy")
    shared_with_cy = {a["judgment_id"] for a in answers if a["reviewer"] == "cy"}
    assert decided == len(shared_with_cy) > 0
    figures = bench.agreement_figures(loop, reviewers, answers, truth)
    assert figures["reviewers"]["cy"]["verdict_error"] == 1.0 and figures["reviewers"]["ana"]["verdict_error"] == 0.0
    cut = bench.snapshots(loop, answers, truth)
    assert cut["items"] == {"complete": len(PAIRS), "labelled": len(PAIRS), "matched": len(PAIRS)}
    assert cut["agreed"]["verdict_error"] == 0.0 and cut["agreed"]["mark_error"] in (0.0, None)
    stood = bench.stood(loop, sorted(truth))
    for jid, (verdict, marks) in stood.items():  # arm (a): each item keeps one of its answers as is
        assert (verdict, marks) in [(a["verdict"], a["marks"]) for a in answers if a["judgment_id"] == jid]
    wrong = sum(stood[j][0] != truth[j][0] for j in truth)
    assert cut["as_is"]["verdict_error"] == pytest.approx(wrong / len(PAIRS))
    rule = next(s for s in loop.services.curation.snapshots() if s.name == bench.SNAPSHOTS["agreed"]).rule
    assert rule["labels"] == "agreed-or-adjudicated" and rule["round"] == bench.ROUND


def test_the_larger_arm_is_cut_and_its_other_examples_stay_out_of_its_snapshot(bench, loop) -> None:
    # rule "agreed": only the items the two careful reviewers shared are labels, so arm (a) is cut to their count
    loop.args.rule = "agreed"
    reviewers = (bench.Reviewer("ana", 0.0), bench.Reviewer("ben", 0.0), bench.Reviewer("cy", 1.0))
    bench.open_round(loop, reviewers)
    bench.work_round(loop, reviewers)
    bench.adjudicate(loop, 0.0)
    answers = bench.exported_answers(loop)
    truth = {s.id: bench.truth_of(loop, s) for s in loop.services.runtime.store.load_many(
        sorted({a["judgment_id"] for a in answers}))}
    agreed = len(truth) - len({a["judgment_id"] for a in answers if a["reviewer"] == "cy"})
    cut = bench.snapshots(loop, answers, truth)
    assert cut["items"]["matched"] == agreed < len(PAIRS)
    assert cut["as_is"]["verdicts"] == cut["agreed"]["verdicts"] == agreed
    store = loop.services.runtime.store
    for arm in ("as_is", "agreed"):
        snapshot = next(s for s in loop.services.curation.snapshots() if s.name == bench.SNAPSHOTS[arm])
        members = store.snapshot_members(snapshot.id)["preference"]
        assert len(members) == agreed  # one preference example per correction kept, none of the cut items
    excluded = [e for kind in ("preference", "reflection") for e in store.examples(kind, states=("excluded",))]
    assert excluded == []  # what was set aside for a snapshot is back in Curate


def _stopped_run(out: Path, **changed: object) -> Path:
    """OUT as a stopped --quick run leaves it: a store file and partial.json with its arguments."""
    out.mkdir()
    (out / "loop.db").write_bytes(b"")
    args = {"rule": "agreed-or-adjudicated", "top": 6, "threads": None, **changed}
    (out / "partial.json").write_text(json.dumps({"agreement": {"args": args}}))
    return out


@pytest.mark.parametrize("argv, problem", [
    pytest.param(["--reviewers", "ana=0.1,ben=2"], "ben's error rate must be a number from 0 to 1",
                 id="rate-out-of-range"),
    pytest.param(["--overlap", "3", "--reviewers", "ana=0.1,ben=0.2"], "--overlap 3 needs at least 3 reviewers",
                 id="overlap-beyond-reviewers"),
    pytest.param(["--top", "0"], "--top must be at least 1", id="empty-round"),
    pytest.param(["--adjudicator-error", "1.5"], "--adjudicator-error must be a rate from 0 to 1",
                 id="adjudicator-rate"),
    pytest.param(["--resume"], "--resume needs a stopped run's store", id="resume-without-a-stopped-run"),
    pytest.param(["--resume", "--rule", "agreed", "@stopped"], "these differ: rule",
                 id="resume-with-another-rule"),  # trap: a resumed run measuring something else than it began
    pytest.param(["@stopped"], "is not empty", id="a-used-folder-without-resume"),
])
def test_bad_arguments_are_refused_in_one_line_before_anything_runs(bench, tmp_path, monkeypatch, capsys, argv,
                                                                    problem) -> None:
    out = _stopped_run(tmp_path / "out") if "@stopped" in argv else tmp_path / "out"
    before = sorted(p.name for p in out.iterdir()) if out.exists() else None
    argv = [a for a in argv if a != "@stopped"]
    monkeypatch.setattr("sys.argv", ["agreement_pays.py", "--out", str(out), "--quick", *argv])

    def never(*args: object) -> None:
        raise AssertionError("the bench started its services: the arguments were not refused")

    monkeypatch.setattr(bench, "Loop", never)
    monkeypatch.setitem(bench.open_loop.__globals__, "Loop", never)
    with pytest.raises(SystemExit) as stop:
        bench.main()
    assert stop.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert problem in last and "Traceback" not in last
    assert (sorted(p.name for p in out.iterdir()) if out.exists() else None) == before  # nothing written
