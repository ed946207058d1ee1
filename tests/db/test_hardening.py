"""The store never duplicates a resumed run's judgments, and unique-key races end in a row or one clear error.

Races run on both SQLite and a real PostgreSQL server: on PostgreSQL two transactions can both see
"no such row yet" and race to insert it; the loser used to get a raw `IntegrityError`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from reflectrm_db import models as m
from reflectrm_db import schema
from reflectrm_db.curation import CorrectionExists
from reflectrm_db.services import JudgmentStore
from reflectrm.errors import ConfigError, InputError
from tests.db.helpers import JudgeFn, make_pairs

RACERS = 8


def _race(work: Callable[[int], Any]) -> tuple[list[Any], list[BaseException]]:
    """Run `work(k)` in RACERS threads released at the same moment; (results, errors)."""
    start = threading.Barrier(RACERS)
    results: list[Any] = []
    errors: list[BaseException] = []

    def run(k: int) -> None:
        start.wait()
        try:
            results.append(work(k))
        except BaseException as exc:  # noqa: BLE001 - every failure is what the test inspects
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(RACERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors


def test_an_idempotent_record_returns_the_stored_ids(store: JudgmentStore, judge_pairs: JudgeFn) -> None:
    judgments = judge_pairs(make_pairs(3), swap=True)
    first = store.record(judgments, swapped=True, idempotent=True)
    counts = store.counts()
    again = store.record(judgments, swapped=True, idempotent=True)  # a rerun after a crash before the output line
    assert again == first
    assert store.counts() == counts
    assert [s.twin_id for s in store.load_many(first)] == [first[1], first[0], first[3], first[2], first[5], first[4]]
    assert [s.judgment for s in store.load_many(first)] == judgments


def test_the_key_tells_apart_other_seeds_and_a_plain_record_still_adds_rows(
    store: JudgmentStore, judge_pairs: JudgeFn
) -> None:
    [pair] = make_pairs(1)
    a, b = judge_pairs([pair], seed=1)[0], judge_pairs([pair], seed=2)[0]
    ids = store.record([a, b], swapped=False, idempotent=True)
    assert len(set(ids)) == 2  # another seed is another judgment
    assert store.record([a], swapped=False) != store.record([a], swapped=False)  # not idempotent: as before
    assert store.counts()["judgments"] == 4


def test_racing_idempotent_records_store_one_row(store: JudgmentStore, judge_pairs: JudgeFn) -> None:
    judgments = judge_pairs(make_pairs(2))
    store.add_pairs([j.pair for j in judgments])  # stored already: the racers meet on the judgment key alone
    results, errors = _race(lambda k: store.record(judgments, swapped=False, idempotent=True))
    assert errors == []
    assert len({tuple(r) for r in results}) == 1
    assert store.counts()["judgments"] == 2


def test_racing_corrections_of_one_judgment_give_one_correction_and_clear_errors(
    store: JudgmentStore, judge_pairs: JudgeFn
) -> None:
    [jid] = store.record(judge_pairs(make_pairs(1)), swapped=False)
    results, errors = _race(lambda k: store.correct(jid, verdict=1 + k % 2, author=f"user{k}", seed=k))
    assert len(results) == 1
    assert len(errors) == RACERS - 1
    assert all(isinstance(e, CorrectionExists) and e.correction_id == results[0].id for e in errors), errors
    assert len(store.corrections(judgment_id=jid)) == 1


def test_racing_corrections_that_edit_give_one_correction_and_no_error(
    store: JudgmentStore, judge_pairs: JudgeFn
) -> None:
    # the app's path: the loser of the insert race edits the winner's correction; no error text is matched
    [jid] = store.record(judge_pairs(make_pairs(1)), swapped=False)
    results, errors = _race(lambda k: store.correct(jid, verdict=1 + k % 2, author=f"user{k}", edit_active=True))
    assert errors == []
    [correction] = store.corrections(judgment_id=jid)
    assert {r.id for r in results} == {correction.id} and correction.revision == RACERS


def test_racing_snapshots_of_one_name_give_one_snapshot_and_clear_errors(
    store: JudgmentStore, judge_pairs: JudgeFn
) -> None:
    [jid] = store.record(judge_pairs(make_pairs(1)), swapped=False)
    store.correct(jid, verdict=1, author="ana", seed=0)
    results, errors = _race(lambda k: store.snapshot("train-1"))
    assert len(results) == 1
    assert all(isinstance(e, InputError) and "already exists" in str(e) for e in errors), errors
    assert [s.name for s in store.snapshots()] == ["train-1"]


def test_the_0003_migration_round_trips_with_judgments_in_the_store(db_url: str, judge_pairs: JudgeFn) -> None:
    judgment = judge_pairs(make_pairs(1))[0]
    with JudgmentStore.open(db_url) as store:
        first = store.record([judgment], swapped=False, idempotent=True)
        engine = store.engine
        schema.downgrade(engine, "0002")  # the key column goes; the judgments stay
        schema.upgrade(engine)  # and comes back empty (NULL): rows from before carry no key
        assert schema.model_diffs(engine) == []
        with engine.connect() as c:
            assert c.execute(select(m.Judgment.idempotency_key)).scalars().all() == [None]
        again = store.record([judgment, judgment], swapped=False, idempotent=True)
        assert again[0] == again[1] != first[0]
        assert store.counts()["judgments"] == 2


def test_a_store_opened_for_reading_is_never_created(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        JudgmentStore.open(f"sqlite:///{tmp_path / 'typo.db'}", create=False)
    assert list(tmp_path.iterdir()) == []
