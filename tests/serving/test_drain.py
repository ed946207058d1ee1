"""SIGTERM drains the reward service (a real process).

In flight: answered, or refused with a retryable 503; nothing half-stored; exit 0.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60  # every wait is bounded


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def until(check, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health").status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.parametrize(("release", "drain_s", "status"), [
    # the request in flight finishes during the drain: answered, stored once
    pytest.param(True, "30", 200, id="in-flight-answered"),
    # it would outlive the drain time-out: refused with a retryable 503, nothing of it stored
    pytest.param(False, "0.5", 503, id="past-the-drain-time-out-refused"),
])
def test_sigterm_drains_then_exits_0(tmp_path, release, drain_s, status):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "tests.serving.gated_server", str(tmp_path), str(port), drain_s],
                            cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        until(lambda: proc.poll() is None and healthy(url) or proc.poll() is not None, "the server to start")
        assert proc.poll() is None, proc.stderr.read()
        answers: list = []
        body = {"prompts": ["q"], "completions": [["a", "bb"]]}
        client = threading.Thread(target=lambda: answers.append(httpx.post(f"{url}/v1/rewards", json=body,
                                                                           timeout=WAIT_S)))
        client.start()
        until(lambda: (tmp_path / "started").exists(), "the request to start generating")
        proc.send_signal(signal.SIGTERM)
        until(lambda: httpx.get(f"{url}/health").json()["status"] == "draining", "/health to say draining")
        late = httpx.post(f"{url}/v1/rewards", json=body)
        assert late.status_code == 503 and late.headers["Retry-After"] == "1" and "draining" in late.json()["error"]
        if release:
            (tmp_path / "go").touch()
        client.join(WAIT_S)
        [answer] = answers
        assert answer.status_code == status
        if status == 503:
            assert answer.headers["Retry-After"] == "1"
        assert proc.wait(WAIT_S) == 0
    finally:
        (tmp_path / "go").touch()  # a refused request's round stops; never leave the process waiting
        if proc.poll() is None:
            proc.kill()
            proc.wait(WAIT_S)
    stored = (tmp_path / "stored.jsonl").read_text().splitlines() if (tmp_path / "stored.jsonl").exists() else []
    assert len(stored) == (2 if release else 0)  # one pair in both orders, once; or nothing at all


def test_a_drained_service_leaves_its_store_whole_and_a_restart_carries_on(tmp_path):
    # over a real store (SQLite, as `serve --db`): the request in flight is stored once, the process exits 0,
    # and a new process on the same store answers and stores after it
    from reflectrm_db.services import JudgmentStore

    db = f"sqlite:///{tmp_path / 'served.db'}"
    body = {"prompts": ["q"], "completions": [["a", "bb"]]}  # one pair in both orders: 2 judgments
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def launch(folder: Path) -> tuple[subprocess.Popen, str]:
        folder.mkdir()
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen([sys.executable, "-m", "tests.serving.gated_server", str(folder), str(port), "30", db],
                                cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
        until(lambda: proc.poll() is not None or healthy(url), "the server to start")
        assert proc.poll() is None, proc.stderr.read()
        return proc, url

    procs = []
    try:
        first, url = launch(tmp_path / "first")
        procs.append(first)
        answers: list = []
        client = threading.Thread(target=lambda: answers.append(httpx.post(f"{url}/v1/rewards", json=body,
                                                                           timeout=WAIT_S)))
        client.start()
        until(lambda: (tmp_path / "first" / "started").exists(), "the request to start generating")
        first.send_signal(signal.SIGTERM)
        until(lambda: httpx.get(f"{url}/health").json()["status"] == "draining", "/health to say draining")
        (tmp_path / "first" / "go").touch()
        client.join(WAIT_S)
        assert [a.status_code for a in answers] == [200]
        assert first.wait(WAIT_S) == 0
        with JudgmentStore.open(db, create=False) as store:
            assert store.counts()["judgments"] == 2

        second, url = launch(tmp_path / "second")
        procs.append(second)
        (tmp_path / "second" / "go").touch()
        again = httpx.post(f"{url}/v1/rewards", json=body, timeout=WAIT_S)
        assert again.status_code == 200 and again.json()["rewards"] == answers[0].json()["rewards"]
        second.send_signal(signal.SIGTERM)
        assert second.wait(WAIT_S) == 0
        with JudgmentStore.open(db, create=False) as store:
            assert store.counts()["judgments"] == 4  # both runs' judgments, each once
    finally:
        for folder in ("first", "second"):
            if (tmp_path / folder).exists():
                (tmp_path / folder / "go").touch()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(WAIT_S)
