"""`reflectrm serve` for real: the demo judge behind HTTP, every served judgment stored for the app's History."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_stores_what_it_told_the_policy(tmp_path):
    from reflectrm_db.services import JudgmentStore

    db = f"sqlite:///{tmp_path / 'rewards.db'}"
    port = free_port()
    env = {**os.environ, "REFLECTRM_SERVE_TOKEN": "tok-0123456789abcdef", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "reflectrm_app.cli", "serve", "--port", str(port), "--db", db, "--n", "2",
                             "--max-new-tokens", "64", "--device", "cpu"], env=env, stderr=subprocess.PIPE, text=True)
    url, auth = f"http://127.0.0.1:{port}", {"Authorization": "Bearer tok-0123456789abcdef"}
    try:
        deadline = time.time() + 120
        while True:
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                assert proc.poll() is None and time.time() < deadline, proc.stderr.read() if proc.poll() else "timeout"
                time.sleep(0.5)
        one = httpx.post(f"{url}/v1/judge", headers=auth, timeout=120,
                         json={"query": "What is 2 + 3?", "response_1": "2 + 3 = 5", "response_2": "2 + 3 = 6"}).json()
        assert len(one["rollouts"]) == 2 and one["backend"] == "transformers" and one["stored_id"] >= 1
        r = httpx.post(f"{url}/v1/rewards", headers=auth, timeout=300,
                       json={"prompts": ["What is 4 + 4?"], "completions": [["4 + 4 = 8", "4 + 4 = 9"]]}).json()
        [[a, b]] = r["rewards"]
        assert a + b == pytest.approx(1.0)
    finally:
        proc.terminate()
        proc.wait(30)
    with JudgmentStore.open(db) as store:
        assert store.counts()["judgments"] == 3  # one judged + one pair in both orders
        assert store.load(one["stored_id"]).judgment.pair.response_2 == "2 + 3 = 6"
