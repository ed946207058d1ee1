"""The queries behind the app's pages filter and limit in SQL (History, one review item, the data sets)."""

from __future__ import annotations

from reflectrm_db.services import JudgmentStore
from reflectrm.core.types import PreferencePair
from tests.db.helpers import JudgeFn, make_pairs


def test_history_is_newest_first_limited_and_searched_in_the_database(store: JudgmentStore,
                                                                       judge_pairs: JudgeFn) -> None:
    pairs = make_pairs(4)
    odd = PreferencePair.from_query("Wie viel ist 12 × 3? 100%_off", "36", "35", label=1, source="Other")
    ids = store.record(judge_pairs([*pairs, odd]), swapped=False)
    assert [s.id for s in store.history(limit=3)] == ids[::-1][:3]
    assert [s.id for s in store.history(limit=10, before=ids[2])] == ids[:2][::-1]
    assert [s.id for s in store.history(search="12 × 3", limit=10)] == [ids[-1]]  # non-ASCII text is searchable
    assert [s.id for s in store.history(search="other", limit=10)] == [ids[-1]]  # the source, any case
    assert [s.id for s in store.history(search="0%_", limit=10)] == [ids[-1]]  # % and _ are literal
    assert store.history(search="nothing like this", limit=10) == []


def test_one_summary_and_the_source_list(store: JudgmentStore, judge_pairs: JudgeFn) -> None:
    pairs = [*make_pairs(2), PreferencePair.from_query("q", "a", "b", source="b-set")]
    ids = store.record(judge_pairs(pairs), swapped=False)
    summary = store.summary(ids[-1])
    assert (summary.id, summary.source) == (ids[-1], "b-set")
    assert store.sources() == sorted({p.source for p in pairs})
    assert store.pairs_by_id(store.pair_ids("b-set")) == [pairs[-1]]
