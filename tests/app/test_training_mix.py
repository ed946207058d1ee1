"""The Train tab trains a corrections snapshot on the paper's 4:1 mix by default: each correction yields one
preference example and up to 4 reflection pairs, so a corrections-only snapshot sits near 1:4, where the paper
found that even 2:1 hurts. "As is" keeps every row; the run's stored config says which mix it trained on."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from reflectrm_app.ui import views
from reflectrm_app.services import Services
from reflectrm_app.services.training import plan_mix
from reflectrm.demo import DEMO_MODEL_DIR
from reflectrm.errors import InputError
from reflectrm.training import jobs
from reflectrm.training.data import read_examples
from tests.app.test_training import request


class _Stop(Exception):
    """Raised instead of starting the worker: the test needs the data a run would get, not the run."""


@pytest.fixture
def services(tmp_path: Path):
    from tests.app.test_training import open_services
    from reflectrm.demo.tasks import make_pairs

    services = open_services(f"sqlite:///{tmp_path / 'app.db'}", tmp_path / "runs")
    for p in make_pairs(8, seed=7, source="demo-arith"):
        result = services.judging.judge(p)
        services.review.correct(result.judgment_id, verdict=p.label, author="tester")
    services.curation.snapshot("s1")
    yield services
    services.close()


def _start(services: Services, monkeypatch, **changes) -> tuple[Path, dict]:
    """Start a run as the tab does, stopped where the worker would start: the data folder and the stored config."""
    given: list[Path] = []

    def fake_start(run_dir, *, data, **_):  # noqa: ANN001
        given.append(Path(data))
        raise _Stop

    monkeypatch.setattr(jobs, "start_run", fake_start)
    with pytest.raises(_Stop):
        services.training.start(request("s1", base_model=str(DEMO_MODEL_DIR), **changes))
    return given[0], services.training.runs()[0].config


def _kinds(folder: Path) -> Counter:
    return Counter(e.task.value for e in read_examples(folder))


def test_the_default_run_trains_on_4_to_1_and_as_is_keeps_every_row(services: Services, monkeypatch) -> None:
    snapshot = {s.name: s for s in services.curation.snapshots()}["s1"]
    assert snapshot.num_preference == 8 and snapshot.num_reflection > 2  # corrections alone: far below 4:1

    data, config = _start(services, monkeypatch)
    kinds = _kinds(data)
    assert kinds["response"] == 8 and kinds["analysis"] == 2  # 4:1, every preference example kept
    assert config["data_mix"] == {"choice": "paper", "mix": [4, 1], "preference": 8, "reflection": 2,
                                  "snapshot_preference": 8, "snapshot_reflection": snapshot.num_reflection,
                                  "reflection_cut": snapshot.num_reflection - 2, "replay": 0, "seed": 0}
    again, _ = _start(services, monkeypatch)  # seeded: the same rows again
    assert again == data and read_examples(again) == read_examples(data)

    as_is, config = _start(services, monkeypatch, mix="as_is")
    assert _kinds(as_is) == {"response": 8, "analysis": snapshot.num_reflection}
    assert config["data_mix"]["choice"] == "as_is" and config["data_mix"]["reflection_cut"] == 0

    other, _ = _start(services, monkeypatch, mix_seed=1)  # another seed may keep other pairs, never other counts
    assert _kinds(other) == kinds and other != data


def test_the_tab_is_told_what_each_mix_keeps(services: Services) -> None:
    snapshot = {s.name: s for s in services.curation.snapshots()}["s1"]
    paper = services.training.data_mix("s1")
    assert (paper.kept_preference, paper.kept_reflection) == (8, 2) and paper.cut == snapshot.num_reflection - 2
    as_is = services.training.data_mix("s1", "as_is")
    assert (as_is.kept_preference, as_is.kept_reflection, as_is.cut) == (8, snapshot.num_reflection, 0)
    assert services.training.data_mix("no-such") is None
    text = views.snapshot_mix_text(services.curation.snapshots(), "s1", paper)
    assert "**The run will train on 8 preference example(s) and 2 reflection pair(s)** (" in text
    assert "train on 8 preference example(s) and" not in views.snapshot_mix_text(services.curation.snapshots(), "s1")


@pytest.mark.parametrize(("counts", "kept"), [
    pytest.param((8, 30), (8, 2), id="corrections-only-reflection-cut"),
    pytest.param((8, 1), (8, 1), id="few-reflection-pairs-kept-as-they-are"),
    pytest.param((3, 0), (3, 0), id="no-reflection-pairs"),
    pytest.param((0, 5), (0, 0), id="reflection-only"),
])
def test_the_papers_mix_cuts_reflection_pairs_only(counts: tuple[int, int], kept: tuple[int, int]) -> None:
    mix = plan_mix(*counts)
    assert (mix.kept_preference, mix.kept_reflection) == kept


def test_an_unknown_mix_is_refused_in_one_line() -> None:
    with pytest.raises(InputError, match="the mix must be one of paper, as_is"):
        plan_mix(1, 1, choice="half")


def test_too_few_preference_examples_are_made_up_with_replay_from_the_judges_own_rollouts(
        services: Services, monkeypatch) -> None:
    from reflectrm.demo.tasks import make_pairs

    snapshot = {s.name: s for s in services.curation.snapshots()}["s1"]
    held = {e.pair_id for e in read_examples(_start(services, monkeypatch, mix="as_is")[0])}
    for p in make_pairs(12, seed=11, source="demo-arith-more"):  # judged, never corrected: the judge's rollouts
        services.judging.judge(p)
    pool = services.training.replay_pool(snapshot)
    assert pool and not {e.pair_id for e in pool} & held  # never a pair the snapshot already holds

    data, config = _start(services, monkeypatch)
    used = config["data_mix"]
    assert used["replay"] == min(len(pool), 4 * snapshot.num_reflection - 8) > 0
    examples = read_examples(data)
    kinds = Counter(e.task.value for e in examples)
    assert kinds["response"] == 8 + used["replay"] and kinds["analysis"] == used["reflection"]
    assert used["reflection"] == min(snapshot.num_reflection, round((8 + used["replay"]) / 4))
    assert sum(e.origin == "replay" for e in examples) == used["replay"]
    assert services.training.data_mix("s1").replay == used["replay"]  # the tab says what the run does
    assert _start(services, monkeypatch)[0] == data  # seeded: the same rows again


def test_replay_skips_easy_items_and_greedy_judgments(tmp_path: Path) -> None:
    """A judge that always says Response 1: pairs labelled 1 are easy (every sample right: the paper drops them),
    pairs labelled 2 are all wrong (kept, as `build-data` keeps them); a greedy judgment has no rollouts to replay."""
    from reflectrm.backends import ScriptedBackend
    from reflectrm.backends.base import Completion
    from tests.app.conftest import make_services
    from tests.conftest import response_output
    from tests.db.helpers import make_pairs

    backend = ScriptedBackend(lambda prompt, seed, params: Completion(response_output(1, "one"), (-0.1,), 4, "stop"))
    services = make_services(f"sqlite:///{tmp_path / 'app.db'}", backend, runs_dir=tmp_path / "runs", device="cpu",
                             threads=1)
    try:
        empty = services.curation.snapshot("empty")
        for p in [*make_pairs(3, prefix="easy", label=1), *make_pairs(3, prefix="hard", label=2)]:
            services.judging.judge(p)
        services.judging.judge(make_pairs(1, prefix="greedy", label=2)[0], strategy="greedy")
        assert sorted(e.pair_id for e in services.training.replay_pool(empty)) == ["hard-0", "hard-1", "hard-2"]
    finally:
        services.close()


def test_replay_never_takes_a_conversation_an_evaluation_run_measured(tmp_path: Path) -> None:
    """Pairs of an evaluated data set are never replayed, nor the same conversation judged again in the Judge tab
    from another data set: training on them would inflate what the evaluation measured."""
    import threading

    from reflectrm.backends import ScriptedBackend
    from reflectrm.backends.base import Completion
    from reflectrm.core.types import PreferencePair
    from tests.app.conftest import make_services
    from tests.conftest import response_output
    from tests.db.helpers import make_pairs

    backend = ScriptedBackend(lambda prompt, seed, params: Completion(response_output(1, "one"), (-0.1,), 4, "stop"))
    services = make_services(f"sqlite:///{tmp_path / 'app.db'}", backend, runs_dir=tmp_path / "runs", device="cpu",
                             threads=1)
    try:
        empty = services.curation.snapshot("empty")
        measured = make_pairs(3, prefix="heldout", label=2)  # all wrong for this judge: replayable but for the run
        services.runtime.store.add_pairs(measured)
        evaluation = services.evaluation
        evaluation.run(evaluation.request("data set: tests", strategies=("majority",)), cancel=threading.Event())
        again = PreferencePair.from_query(measured[0].query, measured[0].response_1, measured[0].response_2,
                                          label=2, id="copy", source="elsewhere")
        services.judging.judge(again)
        for p in make_pairs(2, prefix="free", label=2):
            services.judging.judge(p)
        assert sorted(e.pair_id for e in services.training.replay_pool(empty)) == ["free-0", "free-1"]
    finally:
        services.close()


def _blocks(folder: Path) -> list[tuple[dict, dict]]:
    """The rows of a both-orders data folder as (example, other order) pairs, checked to be adjacent."""
    from reflectrm.training.data import load_snapshot

    rows = list(load_snapshot(folder))
    assert len(rows) % 2 == 0
    blocks = list(zip(rows[::2], rows[1::2], strict=True))
    for first, second in blocks:
        assert first["twin_key"] == second["twin_key"] and (first["order"], second["order"]) == (0, 1)
        assert first["task"] == second["task"] and first["label"] + second["label"] == 3
        assert first["pair_id"] == second["pair_id"] and first["prompt"] != second["prompt"]
    return blocks


@pytest.mark.parametrize("mix", ["paper", "as_is"])
def test_both_orders_trains_every_kept_example_with_its_other_order(services: Services, monkeypatch, mix) -> None:
    """The mix counts examples as it does in one order, and keeps or cuts an example with its other order."""
    one, _ = _start(services, monkeypatch, mix=mix)
    data, config = _start(services, monkeypatch, mix=mix, both_orders=True)
    assert config["both_orders"] is True and data != one
    blocks = _blocks(data)
    assert Counter(first["task"] for first, _ in blocks) == _kinds(one)  # the same counts, each in both orders
    assert _start(services, monkeypatch, mix=mix, both_orders=True)[0] == data  # seeded: the same rows again


def test_both_orders_replays_each_example_with_its_other_order(services: Services, monkeypatch) -> None:
    from reflectrm.demo.tasks import make_pairs

    for p in make_pairs(12, seed=11, source="demo-arith-more"):
        services.judging.judge(p)
    data, config = _start(services, monkeypatch, both_orders=True)
    replayed = [(a, b) for a, b in _blocks(data) if a["origin"] == "replay"]
    assert len(replayed) == config["data_mix"]["replay"] > 0
    assert all(b["origin"] == "replay" for _, b in replayed)


def test_the_store_exports_training_rows_in_both_orders_and_refuses_other_kinds(services: Services,
                                                                                tmp_path: Path) -> None:
    store = services.runtime.store
    one, both = tmp_path / "one.jsonl", tmp_path / "both.jsonl"
    n = store.export("training", fmt="jsonl", out=one, snapshot="s1")
    assert store.export("training", fmt="jsonl", out=both, snapshot="s1", both_orders=True) == 2 * n
    rows = [json.loads(line) for line in both.read_text().splitlines()]
    firsts = [{k: v for k, v in r.items() if k not in ("twin_key", "order")} for r in rows[::2]]
    assert firsts == [json.loads(line) for line in one.read_text().splitlines()]  # order 0: the rows as exported
    folder = tmp_path / "hf"
    store.export("training", fmt="hf", out=folder, snapshot="s1", both_orders=True)
    assert len(_blocks(folder)) == n
    with pytest.raises(InputError, match="both orders applies to training rows"):
        store.export("judgments", fmt="jsonl", out=tmp_path / "j.jsonl", both_orders=True)
