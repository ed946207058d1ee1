"""The reward service over a store answers a judgment asked before from it, on any replica, and stores each once.

Real stores (a SQLite file and a PostgreSQL database), the real service (`RewardService` with the store as its
cache, as `reflectrm serve --db` wires it) and the real pipeline on a scripted judge that counts what it generates.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text

from reflectrm_db import repository
from reflectrm_db.services import JudgmentStore
from reflectrm.backends import ScriptedBackend
from reflectrm.core.config import JudgeConfig
from reflectrm.core.types import PreferencePair
from reflectrm.pipeline import judge_many
from reflectrm.serving.cache import request_key
from reflectrm.serving.rewards import RewardConfig
from reflectrm.serving.server import RewardService, ServeConfig
from tests.db.helpers import scripted_output

CONFIG = JudgeConfig(n=2, max_new_tokens=16)
GROUP = {"prompts": ["What is 2 + 2?"], "completions": [["4", "5"]]}


def _service(store: JudgmentStore, backend: ScriptedBackend, *, seed: int = 0) -> RewardService:
    return RewardService(backend, judge_config=CONFIG.with_(seed=seed), reward_config=RewardConfig(seed=seed),
                         config=ServeConfig(batch_window_s=0.0), cache=store)


def _ask(service: RewardService, route: str, body: dict[str, Any]) -> dict[str, Any]:
    """One request, as the route runs it: a job with nothing to generate is answered without a round."""
    job = service.judge_job(body) if route == "judge" else service.rewards_job(
        body["prompts"], body["completions"], body.get("references"))
    service.batcher.submit(job) if job.pairs else service.batcher.finish(job)
    return job.future.result(120)


def _rows(store: JudgmentStore) -> tuple[int, int]:
    """(judgment rows, distinct cache keys among them)."""
    with store.engine.connect() as c:
        return tuple(c.execute(text("SELECT count(*), count(DISTINCT cache_key) FROM judgments")).one())


def _counting() -> ScriptedBackend:
    return ScriptedBackend(scripted_output)


# each case: a first request, a second one (by a second replica on the same store), and how many of the
# second's judgments the store answers; the trap each covers is in its id
REPLAYS = [
    pytest.param(("rewards", GROUP), ("rewards", GROUP), 0, 2, id="the-same-group-again-both-orders-from-the-store"),
    pytest.param(("rewards", GROUP), ("rewards", {"prompts": ["other", "What is 2 + 2?"],
                                                  "completions": [["x", "y"], ["4", "5"]]}), 0, 2,
                 id="the-same-comparison-at-another-place-in-a-group"),
    pytest.param(("rewards", GROUP), ("judge", {"query": "What is 2 + 2?", "response_1": "4", "response_2": "5",
                                                "id": "mine", "label": 1}), 0, 1,
                 id="a-judge-request-answered-by-a-rewards-judgment-with-its-own-id"),
    pytest.param(("rewards", GROUP), ("rewards", GROUP), 1, 0, id="another-seed-is-another-question"),
    pytest.param(("judge", {"query": "q", "response_1": "a", "response_2": "b"}),
                 ("judge", {"query": "q", "response_1": "b", "response_2": "a"}), 0, 0,
                 id="the-other-order-is-another-question"),
]


@pytest.mark.parametrize(("first", "second", "seed", "hits"), REPLAYS)
def test_a_second_replica_answers_from_the_store_what_the_first_judged(store, first, second, seed, hits):
    one, two = _counting(), _counting()
    _ask(_service(store, one), *first)
    rows, keys = _rows(store)
    assert rows == keys and len(one.calls) > 0
    replica = _service(store, two, seed=seed)
    out = _ask(replica, *second)
    judged = 1 if second[0] == "judge" else 2 * len(second[1]["prompts"])
    assert out["from_store"] == (bool(hits) if second[0] == "judge" else hits)
    assert replica.counters["store_hits"] == hits and replica.counters["judgments"] == judged - hits
    assert (len(two.calls) == 0) is (hits == judged)  # nothing generated when the store answered all
    assert _rows(store) == (rows + judged - hits,) * 2  # each judgment stored once, under its key
    if second[0] == "judge":
        assert out["pair"]["id"] == second[1].get("id", out["pair"]["id"])  # answered as it was asked
        assert store.load(out["stored_id"]).judgment.verdict == out["verdict"]


def test_a_hit_answers_what_the_store_holds_and_metrics_count_it(store):
    first = _ask(_service(store, _counting()), "judge", {"query": "q", "response_1": "a", "response_2": "b"})
    replica = _service(store, _counting())
    again = _ask(replica, "judge", {"query": "q", "response_1": "a", "response_2": "b"})
    assert again["from_store"] is True and first["from_store"] is False
    assert {k: v for k, v in again.items() if k != "from_store"} == {k: v for k, v in first.items()
                                                                     if k != "from_store"}
    assert replica.counters["store_hits"] == 1 and replica.counters["judgments"] == 0


def test_two_writers_of_one_key_store_one_judgment(store, db_url):
    """A writer that looked the key up before another committed it reads the other's row back (no conflict)."""
    backend = _counting()
    pair = PreferencePair.from_query("race?", "yes", "no")
    [judgment] = judge_many([pair], backend, CONFIG)
    keys = [request_key(pair, backend=backend, config=CONFIG)]
    store.add_pairs([pair])  # stored before: the second writer's wait is on the judgment's key, not the pair's
    result: dict[str, Any] = {}
    with store._writes() as session:  # the first writer: its row inserted, not yet committed
        session.connection()
        [first] = repository.add_judgments(session, judgments=[judgment], swapped=False, cache_keys=keys)
        second = threading.Thread(target=lambda: result.setdefault("ids", store.record_keyed(
            [judgment], swapped=False, keys=keys)))
        second.start()
        if db_url.startswith("postgresql"):  # the second's insert waits on the first's uncommitted key
            _wait_for(lambda: _waiting_on_a_lock(store) >= 1, "the second writer to wait on the key")
        session.commit()
    second.join(60)
    assert result["ids"] == [first] and _rows(store) == (1, 1)


def _waiting_on_a_lock(store: JudgmentStore) -> int:
    with store.engine.connect() as c:
        return c.execute(text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")).scalar_one()


def _wait_for(condition: Callable[[], bool], what: str, *, deadline_s: float = 60.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
