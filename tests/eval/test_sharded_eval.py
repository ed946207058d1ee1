"""Sharded evaluation (`eval --shard K/N`, `eval-merge`) on real SQLite stores with scripted judges: the shards,
run in any order and with any batch size, merge into the report one process writes; a stopped shard resumes with
only its missing pairs; a merge with a shard missing, unfinished or off the evaluation is refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from reflectrm_app.cli import main
from reflectrm_app.commands import options
from reflectrm_app.evaluations import EvalRequest, Evaluations
from reflectrm_db.services import JudgmentStore
from reflectrm.backends.base import Completion
from reflectrm.backends.scripted import ScriptedBackend
from reflectrm.core.config import JudgeConfig
from reflectrm.eval.runner import EvalPlan, evaluate
from reflectrm.eval.shards import Shard, parse_shard, shard_of
from reflectrm.files.readers import load_pairs
from tests.conftest import critique_output, response_output

PAIRS = 13
JUDGE = ["--n", "4", "--matched-compute-n", "6", "--max-new-tokens", "8", "--reflection-max-new-tokens", "8"]
CONFIG = JudgeConfig(n=4, matched_compute_n=6, max_new_tokens=8, reflection_max_new_tokens=8)
PLAN = EvalPlan(strategies=("reflectrm", "greedy", "majority"), both_orders=True, batch_size=3)


def _respond(text: str, seed: int, params) -> Completion:
    """A judge whose every output depends on its seed (right 3 times in 4, confidence by seed): a pair judged with
    other seeds, in one shard or another, gives other figures."""
    if "Critique 1" in text:
        out = critique_output(seed % 2 + 1)
    else:
        good_first = text.find("GOOD") < text.find("BAD")
        out = response_output(1 if (seed % 4 != 0) == good_first else 2)
    words = out.split()
    return Completion(out, tuple(-((seed + k) % 7 + 1) / 10 for k in range(len(words))), len(words), "stop")


def _data(path: Path, *, offset: int = 0) -> Path:
    """13 labelled pairs in 3 subsets, one a tie and one too long for the scripted context (skipped)."""
    rows = []
    for k in range(PAIRS):
        good, bad, first = f"GOOD answer {k + offset}", f"BAD answer {k + offset}", k % 3 != 0
        rows.append({"id": f"p{k}", "query": f"question {k}" + ("x" * 3000 if k == 5 else ""),
                     "response_1": good if first else bad, "response_2": bad if first else good,
                     "label": "tie" if k == 7 else (1 if first else 2), "subset": f"s{k % 3}"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _backend(model_id: str = "scripted") -> ScriptedBackend:
    return ScriptedBackend(_respond, max_context_chars=2500, model_id=model_id)


def _eval_argv(data: Path, db: Path, *extra: str) -> list[str]:
    return ["eval", "--benchmark", "file", "--data", str(data), "--strategies", "reflectrm,greedy,majority",
            "--both-orders", *JUDGE, "--device", "cpu", "--db", str(db), *extra]


def _figures(report: dict) -> dict:
    """A report without what names its run (the run id, or the shards' run ids)."""
    return {k: v for k, v in report.items() if k not in ("run_id", "shards")}


@pytest.mark.parametrize("order", [pytest.param((3, 1, 2), id="3-1-2"), pytest.param((1, 2, 3), id="1-2-3")])
def test_shards_in_any_order_merge_into_the_single_process_report(tmp_path, monkeypatch, capsys, order) -> None:
    data = _data(tmp_path / "pairs.jsonl")
    judges: list[ScriptedBackend] = []
    monkeypatch.setattr(options, "load_judge", lambda *configs: judges.append(_backend()) or judges[-1])
    # the single run in batches of 5, the shards in batches of 2: a pair's seeds must not hang on its batch
    assert main(_eval_argv(data, tmp_path / "one.db", "--batch-size", "5", "--out", str(tmp_path / "one"))) == 0
    single = json.loads((tmp_path / "one" / "report.json").read_text(encoding="utf-8"))
    capsys.readouterr()
    for k in order:
        assert main(_eval_argv(data, tmp_path / "shared.db", "--batch-size", "2", "--shard", f"{k}/3",
                               "--out", str(tmp_path / "merged"))) == 0
        out = capsys.readouterr().out
        assert ("every shard is complete" in out) == (k == order[-1]), out
        assert (tmp_path / "merged" / "report.json").exists() == (k == order[-1])  # only the whole report
    merged = json.loads((tmp_path / "merged" / "report.json").read_text(encoding="utf-8"))
    assert _figures(merged) == _figures(single)
    assert single["items_total"] == 2 * PAIRS and merged["skipped"]["count"] == 2 and merged["ties"] == 1
    assert sorted(merged["shards"]) == ["1/3", "2/3", "3/3"]
    # every pair was judged once, in one shard or in the single run: the same prompts with the same seeds
    assert Counter(c[:2] for c in judges[0].calls) == Counter(c[:2] for j in judges[1:] for c in j.calls)
    assert main(["eval-merge", str(merged["shards"]["2/3"]), "--db", str(tmp_path / "shared.db"),
                 "--out", str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again" / "report.json").read_text(encoding="utf-8"))
    assert again == merged


def test_a_shard_that_is_not_the_last_says_what_is_left_and_writes_no_report(tmp_path, monkeypatch, capsys) -> None:
    data = _data(tmp_path / "pairs.jsonl")
    monkeypatch.setattr(options, "load_judge", lambda *configs: _backend())
    assert main(_eval_argv(data, tmp_path / "s.db", "--shard", "2/3", "--out", str(tmp_path / "out"))) == 0
    out = capsys.readouterr().out
    assert "(shard 2/3," in out and "shards 1/3, 3/3 not complete yet" in out and "reflectrm eval-merge 1" in out
    assert not (tmp_path / "out").exists()


def test_seeds_follow_the_pair_not_its_place_in_a_batch(tmp_path) -> None:
    pairs = load_pairs(_data(tmp_path / "pairs.jsonl")).pairs
    alone, together = _backend(), _backend()
    for pair in pairs:  # each pair in a batch of its own
        list(evaluate([pair], alone, CONFIG, plan=PLAN, done=set()))
    reordered = pairs[::-1]
    list(evaluate(reordered, together, CONFIG, plan=EvalPlan(strategies=PLAN.strategies, both_orders=True,
                                                             batch_size=len(pairs)), done=set()))
    assert alone.calls and Counter(c[:2] for c in alone.calls) == Counter(c[:2] for c in together.calls)


def test_a_stopped_shard_resumes_with_only_its_missing_pairs(tmp_path) -> None:
    data = _data(tmp_path / "pairs.jsonl")
    request = EvalRequest(benchmark="file", data=data, plan=PLAN, shard=Shard(1, 2))
    mine = {p.id for p in load_pairs(data).pairs if Shard(1, 2).holds(p.id)}
    with JudgmentStore.open(f"sqlite:///{tmp_path / 'whole.db'}") as store:
        whole = _backend()
        Evaluations(store).run(request, backend=whole, config=CONFIG)
    with JudgmentStore.open(f"sqlite:///{tmp_path / 's.db'}") as store:
        evals, first = Evaluations(store), _backend()
        stopped = evals.run(request, backend=first, config=CONFIG, should_stop=lambda: bool(first.calls))
        assert stopped.status == "stopped" and 0 < stopped.items_done < stopped.items_total
        done = {i.item_id for i in evals.items(stopped.id)}
        second = _backend()
        resumed = evals.run(request, backend=second, config=CONFIG)
        items = evals.items(resumed.id)
    assert resumed.id == stopped.id and resumed.status == "completed"
    assert {i.item_id for i in items} == mine and len(items) == len(mine) * 2 * len(PLAN.strategies)
    # the resume judged the rest and nothing twice: the two parts add up to the uninterrupted shard's calls
    assert len(first.calls) + len(second.calls) == len(whole.calls)
    assert Counter(c[:2] for c in first.calls + second.calls) == Counter(c[:2] for c in whole.calls)
    assert not {c[0] for c in first.calls} & {c[0] for c in second.calls}
    assert done < mine


@pytest.fixture
def shard_store(tmp_path: Path) -> tuple[Path, Path, dict[str, int]]:
    """Shards 1/3 and 2/3 completed, 3/3 stopped; 3/3 also run by another model and on changed data at the same
    path (into a copy of the store); a whole run without --shard. Run ids by name."""
    data = _data(tmp_path / "pairs.jsonl")
    db = tmp_path / "s.db"
    ids = {}
    with JudgmentStore.open(f"sqlite:///{db}") as store:
        evals = Evaluations(store)
        for k in (1, 2):
            ids[f"{k}/3"] = evals.run(EvalRequest(benchmark="file", data=data, plan=PLAN, shard=Shard(k, 3)),
                                      backend=_backend(), config=CONFIG).id
        ids["other model 3/3"] = evals.run(EvalRequest(benchmark="file", data=data, plan=PLAN, shard=Shard(3, 3)),
                                           backend=_backend("other"), config=CONFIG).id
        ids["whole"] = evals.run(EvalRequest(benchmark="file", data=data, plan=PLAN), backend=_backend(),
                                 config=CONFIG).id
        third = _backend()
        ids["3/3"] = evals.run(EvalRequest(benchmark="file", data=data, plan=PLAN, shard=Shard(3, 3)),
                               backend=third, config=CONFIG, should_stop=lambda: bool(third.calls)).id
    return data, db, ids


@pytest.mark.parametrize(
    ("merge", "message"),
    [
        # a shard stopped part way: its figures would pass for the whole evaluation's
        pytest.param("1/3", "shard 3/3 (run {3/3}) is stopped, ", id="a-shard-unfinished"),
        # another model's shard 3/3 is complete, but it is not this evaluation's: 1/3 and 2/3 are missing there
        pytest.param("other model 3/3", "shard 1/3 of this evaluation has not run", id="another-models-shard"),
        pytest.param("whole", "run {whole} is not a shard (it ran without --shard)", id="not-a-shard"),
        pytest.param(99, "evaluation run 99 does not exist", id="no-such-run"),
    ],
)
def test_a_merge_is_refused_in_one_line_naming_the_shard(shard_store, tmp_path, capsys, merge, message) -> None:
    data, db, ids = shard_store
    run = ids.get(merge, merge)
    assert main(["eval-merge", str(run), "--db", str(db), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert message.format(**ids) in err, err
    assert not (tmp_path / "out" / "report.json").exists()


def test_a_missing_shard_is_named_with_the_command_that_runs_it(tmp_path, capsys) -> None:
    data, db = _data(tmp_path / "pairs.jsonl"), tmp_path / "s.db"
    with JudgmentStore.open(f"sqlite:///{db}") as store:
        runs = [Evaluations(store).run(EvalRequest(benchmark="file", data=data, plan=PLAN, shard=Shard(k, 3)),
                                       backend=_backend(), config=CONFIG) for k in (1, 3)]
    assert all(r.status == "completed" for r in runs)
    assert main(["eval-merge", str(runs[1].id), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "shard 2/3 of this evaluation has not run" in err and "with --shard 2/3" in err and err.count("\n") == 1


def test_a_stopped_shard_does_not_resume_over_data_changed_under_the_same_path(shard_store, monkeypatch,
                                                                              capsys) -> None:
    data, db, ids = shard_store
    _data(data, offset=100)  # the same ids, other pairs
    monkeypatch.setattr(options, "load_judge", lambda *configs: _backend())
    assert main(_eval_argv(data, db, "--batch-size", "3", "--shard", "3/3")) == 2
    err = capsys.readouterr().err
    assert f"evaluation run {ids['3/3']} was started on other pairs than the data holds now" in err, err
    assert err.count("\n") == 1
    with JudgmentStore.open(f"sqlite:///{db}", read_only=True) as store:
        assert Evaluations(store).get(ids["3/3"]).status == "stopped"  # refused before it was marked running


def test_shards_that_judged_different_data_are_not_merged(tmp_path, capsys) -> None:
    data, db = _data(tmp_path / "pairs.jsonl"), tmp_path / "s.db"
    with JudgmentStore.open(f"sqlite:///{db}") as store:
        evals = Evaluations(store)
        for k in (1, 2, 3):
            if k == 3:
                _data(data, offset=100)  # the file changed between shards: the same ids, other pairs
            last = evals.run(EvalRequest(benchmark="file", data=data, plan=PLAN, shard=Shard(k, 3)),
                             backend=_backend(), config=CONFIG)
    assert main(["eval-merge", "1", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert f"shard 3/3 (run {last.id}) judged other data than the others" in err and err.count("\n") == 1, err


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param("0/2", "K must be from 1 to N=2", id="zero-is-no-shard"),  # shards count from 1
        pytest.param("3/2", "K must be from 1 to N=2", id="past-the-count"),
        pytest.param("1/0", "the count N must be from 1 to 10000", id="no-shards"),  # a modulo by zero
        pytest.param("a/b", "is not K/N", id="not-numbers"),
        pytest.param("1/2/3", "is not K/N", id="three-parts"),
        pytest.param("2", "is not K/N", id="no-count"),
        pytest.param("-1/2", "is not K/N", id="negative"),
        pytest.param("1/20000", "the count N must be from 1 to 10000", id="too-many-shards"),
        pytest.param("1/" + "9" * 5000, "is not K/N", id="huge"),  # int() of 5,000 digits: slow, and no count
        pytest.param("１/２", "is not K/N", id="full-width-digits"),  # str.isdigit says yes, int() reads them
        pytest.param("", "is not K/N", id="empty"),
    ],
)
def test_bad_shard_values_are_refused_in_one_line_before_a_model_loads(tmp_path, monkeypatch, capsys, value,
                                                                      message) -> None:
    def refuse(*configs: object) -> None:
        raise AssertionError("the judge was loaded")

    monkeypatch.setattr(options, "load_judge", refuse)
    assert main(["eval", "--benchmark", "demo", f"--shard={value}", "--db", str(tmp_path / "e.db")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "e.db").exists()


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_every_pair_falls_in_exactly_one_shard_whatever_the_others(count) -> None:
    ids = [f"p{k}" for k in range(200)] + ["", "é", "x" * 1000]
    held = [[Shard(k, count).holds(i) for k in range(1, count + 1)] for i in ids]
    assert all(sum(row) == 1 for row in held)
    assert [shard_of(i, count) for i in ids[::-1]] == [shard_of(i, count) for i in ids][::-1]
    if count > 1:
        assert len({shard_of(i, count) for i in ids}) == count  # no shard left empty on 200 pairs


def test_a_pairs_shard_never_changes_between_releases() -> None:
    # a resumed shard finds its stored run by the same split: a new hash would judge other pairs under its name
    assert [shard_of(f"p{k}", 3) for k in range(8)] == GOLDEN
    assert parse_shard(" 2/3 ") == Shard(2, 3) and str(Shard(2, 3)) == "2/3"


GOLDEN = [2, 1, 2, 2, 3, 2, 2, 1]


ROOT = Path(__file__).resolve().parents[2]
DEMO = ["--benchmark", "demo", "--limit", "6", "--strategies", "greedy", "--max-new-tokens", "32", "--batch-size", "1",
        "--device", "cpu", "--threads", "1"]


def test_two_shard_processes_at_once_on_one_sqlite_store_merge_into_the_single_report(tmp_path, capsys) -> None:
    """Real `reflectrm eval` processes on the shipped demo judge, both writing one SQLite file at the same time."""
    db = tmp_path / "shared.db"
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, "-m", "reflectrm_app.cli", "eval", *DEMO, "--shard", f"{k}/2",
                               "--db", str(db), "--out", str(tmp_path / f"out{k}")], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in (1, 2)]
    results = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in results]
    written = [json.loads(path.read_text(encoding="utf-8"))
               for path in (tmp_path / "out1" / "report.json", tmp_path / "out2" / "report.json") if path.exists()]
    assert written  # the shard that finished last saw both complete (both may have)
    assert main(["eval", *DEMO, "--db", str(tmp_path / "one.db"), "--out", str(tmp_path / "one")]) == 0
    single = json.loads((tmp_path / "one" / "report.json").read_text(encoding="utf-8"))
    assert single["items_total"] == 6 and single["strategies"]["greedy"]["judged"] == 6
    assert all(_figures(report) == _figures(single) for report in written)
