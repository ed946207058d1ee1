"""A swapped order is a judgment of the same pair: audits never add pairs, and 0004 repairs old stores."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session

from reflectrm_db import models as m
from reflectrm_db import repository, schema
from reflectrm_db.derivation import content_hash
from reflectrm_db.engine import make_engine
from reflectrm_db.services import JudgmentStore
from reflectrm.core.types import Judgment
from tests.db.helpers import JudgeFn, make_pairs


def test_recording_both_orders_adds_no_pair_and_loads_back_equal(store: JudgmentStore, judge_pairs: JudgeFn) -> None:
    pairs = make_pairs(3)
    store.add_pairs(pairs)
    judgments = judge_pairs(pairs, swap=True)
    ids = store.record(judgments, swapped=True)
    assert store.counts()["pairs"] == 3  # was 6: each swapped order stored as a pair of the audited data set
    loaded = store.load_many(ids)
    assert [s.judgment for s in loaded] == list(judgments)
    assert loaded[0].pair_id == loaded[1].pair_id
    assert {p.pair.id for p in store.list_pairs(limit=10)} == {p.id for p in pairs}


def test_review_queue_reads_the_label_in_the_swapped_numbering(store: JudgmentStore, judge_pairs: JudgeFn) -> None:
    pair = make_pairs(1)[0]
    ids = store.record(judge_pairs([pair], swap=True), swapped=True)
    rows = {s.id: s for s in store.review_queue(limit=10, include_corrected=True)}
    assert rows[ids[0]].label == pair.label
    assert rows[ids[1]].label == 3 - pair.label


def _old_style_record(store: JudgmentStore, judgment: Judgment) -> list[int]:
    """Record `judgment` on a pair row of its own, keyed by every field as stores before one pair identity were."""
    def work(session: Session) -> list[int]:
        values = {**repository._pair_values(judgment.pair), "pair_key": content_hash(judgment.pair.to_dict())}
        pair_id = session.execute(m.Pair.__table__.insert().values(**values).returning(m.Pair.id)).scalar_one()
        return [repository.add_judgment(session, judgment=judgment, pair_id=pair_id, swapped=False)]

    return store._write(work)


def _old_style_audit(url: str, store: JudgmentStore, judge_pairs: JudgeFn) -> tuple[list[int], list]:
    """Write what audits wrote before 0004 (the swapped order as a pair copy of its own) and mark the store 0003."""
    pair = make_pairs(1)[0]
    original, swapped = judge_pairs([pair], swap=True)
    [oid] = store.record([original], swapped=False)
    [sid] = store.record([swapped], swapped=False)  # its own pair row "<id>:swapped"
    [ssid] = _old_style_record(store, judge_pairs([pair.swapped().swapped()])[0])  # "<id>:swapped:swapped"
    engine = make_engine(url)
    with engine.begin() as c:
        c.execute(text("UPDATE judgments SET twin_id = :t WHERE id = :i"), {"t": sid, "i": oid})
        c.execute(text("UPDATE judgments SET twin_id = :t, swapped = :s WHERE id = :i"),
                  {"t": oid, "i": sid, "s": True})
        c.execute(text("UPDATE alembic_version SET version_num = '0003'"))
    engine.dispose()
    return [oid, sid, ssid], [original, swapped]


def test_migration_0004_merges_the_pair_copies_of_old_audits(db_url: str, judge_pairs: JudgeFn) -> None:
    with JudgmentStore.open(db_url) as store:
        ids, [original, swapped] = _old_style_audit(db_url, store, judge_pairs)
        store.correct(ids[1], verdict=1, author="ana")
        assert store.counts()["pairs"] == 3
    engine = make_engine(db_url)
    schema.upgrade(engine, "0004")  # the repair alone; later revisions' tables exist already (made at head)
    with engine.begin() as c:
        c.execute(text("UPDATE alembic_version SET version_num = :head"), {"head": schema.head_revision()})
    engine.dispose()
    with JudgmentStore.open(db_url) as store:
        assert store.counts()["pairs"] == 1
        a, b, c = store.load_many(ids)
        assert a.pair_id == b.pair_id == c.pair_id
        assert (a.swapped, b.swapped, c.swapped) == (False, True, False)
        assert b.judgment.pair == original.pair.swapped()
        assert c.judgment.pair.response_1 == original.pair.response_1
        assert [e.pair_id for e in store.examples("preference")] == [a.pair_id]
