"""Two `reflectrm serve` replicas on one store, one killed under load: no request lost, no judgment stored twice.

Real processes (the shipped demo judge on transformers), a real store (a SQLite file in WAL mode, and a
PostgreSQL database), the shipped client (`RewardClient`) with both URLs. One replica is killed with SIGKILL
while the client has a request in flight at it; the client retries that request on the other. Every request
is answered; the store holds one row per judgment the requests needed (counted by cache key); replaying every
request answers all of them from the store on the survivor, the killed replica's judgments included.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import text

from reflectrm_db.services import JudgmentStore
from reflectrm.serving.client import RewardClient

pytestmark = pytest.mark.slow

REQUESTS = 8  # one group of two completions each: one pair, judged in both orders
SMALL = ["--n", "2", "--max-new-tokens", "8", "--device", "cpu", "--threads", "1", "--batch-window-ms", "0"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(db: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "reflectrm_app.cli", "serve", "--port", str(port), "--db", db,
                             *SMALL], env=env, stderr=subprocess.DEVNULL)
    return proc, f"http://127.0.0.1:{port}"


def _wait_for(condition: Callable[[], bool], what: str, *, deadline_s: float = 240.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _healthy(proc: subprocess.Popen, url: str) -> bool:
    assert proc.poll() is None, f"the replica at {url} exited with {proc.returncode}"
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def _metric(url: str, name: str) -> float:
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    return 0.0


def _groups() -> list[tuple[list[str], list[list[str]]]]:
    return [([f"What is {k} + {k}?"], [[f"{k} + {k} = {2 * k}", f"{k} + {k} = {2 * k + 1}"]]) for k in range(REQUESTS)]


def test_a_replica_killed_under_load_loses_no_request_and_stores_each_judgment_once(db_url):
    with JudgmentStore.open(db_url):  # the schema, before two processes race to create it
        pass
    (victim, victim_url), (survivor, survivor_url) = _start(db_url), _start(db_url)
    try:
        _wait_for(lambda: _healthy(victim, victim_url) and _healthy(survivor, survivor_url), "both replicas")
        client = RewardClient([survivor_url, victim_url], cooldown_s=60.0)
        with ThreadPoolExecutor(4) as pool:
            answers = [pool.submit(client.post, "/v1/rewards", {"prompts": p, "completions": c}) for p, c in _groups()]
            # killed while the client waits on it: that request is lost unless the client retries it elsewhere
            _wait_for(lambda: client.fleet.snapshot()[1].in_flight >= 1, "a request in flight at the victim")
            victim.send_signal(signal.SIGKILL)
            victim.wait(30)
            first = [a.result(600) for a in answers]
        assert all(len(a["rewards"][0]) == 2 for a in first)  # every request answered
        with JudgmentStore.open(db_url) as store, store.engine.connect() as c:
            rows, keys, unkeyed = c.execute(text(
                "SELECT count(*), count(DISTINCT cache_key), count(*) - count(cache_key) FROM judgments")).one()
        assert (rows, keys, unkeyed) == (2 * REQUESTS, 2 * REQUESTS, 0)  # each judgment once, none missing
        hits_before = _metric(survivor_url, "reflectrm_store_hits_total")
        replays = [client.post("/v1/rewards", {"prompts": p, "completions": c}) for p, c in _groups()]
        assert [r["from_store"] for r in replays] == [2] * REQUESTS  # the victim's judgments too
        assert [r["rewards"] for r in replays] == [a["rewards"] for a in first]
        assert _metric(survivor_url, "reflectrm_store_hits_total") - hits_before == 2 * REQUESTS
        with JudgmentStore.open(db_url) as store:
            assert store.counts()["judgments"] == 2 * REQUESTS  # nothing stored again
    finally:
        for proc in (victim, survivor):
            if proc.poll() is None:
                proc.terminate()
                proc.wait(60)
