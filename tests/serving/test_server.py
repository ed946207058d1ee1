"""The reward service over real HTTP (uvicorn in a thread) on scripted judges: routes, limits, auth, queueing."""

from __future__ import annotations

import re
import socket
import threading
import time

import httpx
import pytest

from reflectrm.backends import ScriptedBackend
from reflectrm.core import JudgeConfig
from reflectrm.errors import BackendError
from reflectrm.serving.rewards import RewardConfig
from reflectrm.serving.server import RewardService, ServeConfig, build_app, openrlhf_groups
from tests.conftest import critique_output, response_output

CONFIG = JudgeConfig(n=2, max_new_tokens=8, reflection_max_new_tokens=8)


def longer_wins(gate: threading.Event | None = None, fail: bool = False) -> ScriptedBackend:
    def responder(text, seed, params):
        if gate is not None:
            gate.wait(10)
        if fail:
            raise BackendError("cannot reach server http://gpu1:8000/v1 (ConnectError)")
        if "## Critiques for Judgment" in text:
            return critique_output(1)
        r1 = re.search(r"\[Response 1\]\n(.*?)\n\[Response 2\]", text, re.S).group(1)
        r2 = re.search(r"\[Response 2\]\n(.*?)\n\n## Output", text, re.S).group(1)
        return response_output(1 if len(r1) > len(r2) else 2)

    return ScriptedBackend(responder)


@pytest.fixture
def start():
    servers = []

    def run(backend, **config):
        import uvicorn

        recorded = []
        service = RewardService(backend, judge_config=CONFIG, reward_config=RewardConfig(),
                                config=ServeConfig(**config),
                                record=lambda js, swapped: recorded.append((len(js), swapped)) or list(range(len(js))))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(build_app(service), host="127.0.0.1", port=port, log_level="error"))
        threading.Thread(target=server.run, daemon=True).start()
        while not server.started:
            time.sleep(0.02)
        servers.append(server)
        return f"http://127.0.0.1:{port}", service, recorded

    yield run
    for server in servers:
        server.should_exit = True


def test_judge_rewards_openrlhf_health_metrics(start):
    url, service, recorded = start(longer_wins())
    j = httpx.post(f"{url}/v1/judge", json={"query": "q", "response_1": "short", "response_2": "much longer"}).json()
    assert j["verdict"] == 2 and len(j["rollouts"]) == 2 and j["stored_id"] == 0  # the full anatomy, stored
    r = httpx.post(f"{url}/v1/rewards", json={"prompts": ["q", "p"], "completions": [["a", "bbb", "cc"], ["x", "yy"]]})
    assert r.json() == {"rewards": [[0.0, 1.0, 0.5], [0.0, 1.0]]}
    o = httpx.post(f"{url}/get_reward", json={"query": ["Q: a", "Q: bbb", "P: x"], "prompts": ["Q:", "Q:", "P:"],
                                               "labels": ["", "", "xx"]}).json()
    assert o["rewards"] == [0.0, 1.0, 0.0]  # "x" loses to its reference "xx"
    assert recorded == [(1, False), (8, True), (4, True)]  # 4 pairs x 2 orders; 1 pair + 1 reference x 2
    assert httpx.get(f"{url}/health").json()["status"] == "ok"
    metrics = httpx.get(f"{url}/metrics").text
    assert "reflectrm_judgments_total 13" in metrics and "reflectrm_requests_total" in metrics


# Each bad request and its status: the trap is a 500 with a traceback instead of a one-line answer.
BAD = [
    pytest.param("/v1/judge", {"query": "q"}, 400, "missing field 'response_1'", id="judge-missing-response"),
    pytest.param("/v1/rewards", {"prompts": ["q"]}, 400, "completions", id="rewards-no-completions"),
    pytest.param("/v1/rewards", {"prompts": ["q"], "completions": [["a", 3]]}, 400, "lists of strings",
                 id="rewards-not-strings"),
    pytest.param("/v1/rewards", {"prompts": ["q", "r"], "completions": [["a"]]}, 400, "2 prompts but 1", id="mismatch"),
    pytest.param("/get_reward", {"query": ["a"], "prompts": []}, 400, "equal length", id="openrlhf-mismatch"),
    pytest.param("/v1/rewards", {"prompts": ["q"], "completions": [[str(i) * (i + 1) for i in range(40)]]}, 413,
                 "needs up to 1560 judgments", id="too-many-judgments"),
    pytest.param("/v1/judge", [1, 2], 400, "JSON object", id="not-an-object"),
    pytest.param("/v1/judge", {"query": "q", "response_1": "a", "response_2": "b", "n": 16}, 400,
                 "unknown field 'n': /v1/judge takes query, messages", id="judge-setting-not-ignored"),
    pytest.param("/v1/rewards", {"prompts": ["q"], "completions": [["a", "b"]], "opponent": 1}, 400,
                 "unknown field 'opponent'", id="rewards-misspelt-field"),
]


@pytest.mark.parametrize(("path", "body", "status", "message"), BAD)
def test_bad_requests(start, path, body, status, message):
    url, _, _ = start(longer_wins(), max_judgments=1000)
    r = httpx.post(url + path, json=body)
    assert r.status_code == status and message in r.json()["error"]


def test_body_limit_token_and_backend_failure(start):
    url, _, _ = start(longer_wins(fail=True), token="s3cret", max_body_bytes=1000)
    body = {"query": "q", "response_1": "a", "response_2": "b"}
    assert httpx.post(f"{url}/v1/judge", json=body).status_code == 401
    assert httpx.post(f"{url}/v1/judge", json=body, headers={"Authorization": "Bearer wrong"}).status_code == 401
    auth = {"Authorization": "Bearer s3cret"}
    big = httpx.post(f"{url}/v1/judge", json={**body, "response_1": "x" * 2000}, headers=auth)
    assert big.status_code == 413
    down = httpx.post(f"{url}/v1/judge", json=body, headers={"Authorization": "Bearer s3cret"})
    assert down.status_code == 503 and "cannot reach server" in down.json()["error"]
    assert httpx.get(f"{url}/health").status_code == 200  # GETs need no token


def test_a_full_queue_answers_429_at_once(start):
    gate = threading.Event()
    url, service, _ = start(longer_wins(gate), max_queue=1)
    body = {"query": "q", "response_1": "a", "response_2": "bb"}
    results = []
    threads = [threading.Thread(target=lambda: results.append(httpx.post(f"{url}/v1/judge", json=body, timeout=20)))
               for _ in range(2)]
    for t in threads:
        t.start()
        time.sleep(0.3)  # the first generates, the second waits in the queue
    third = httpx.post(f"{url}/v1/judge", json=body, timeout=10)  # answered while the gate is shut: it did not wait
    assert third.status_code == 429 and "retry later" in third.json()["error"]
    assert not gate.is_set() and len(results) == 0
    gate.set()
    for t in threads:
        t.join()
    assert sorted(r.status_code for r in results) == [200, 200]


def test_openrlhf_groups_split_prompt_and_response():
    g = openrlhf_groups({"query": ["U: hi A: yo", "U: hi A: hey"], "prompts": ["U: hi"] * 2})
    assert (g.prompts, g.groups, g.references, g.slots) == (["U: hi"], [["A: yo", "A: hey"]], None, [(0, 0), (0, 1)])


def test_trl_and_verl_clients_get_the_services_rewards(start, monkeypatch):
    from reflectrm.serving.client import RemotePairwiseReward, verl_compute_score

    url, _, _ = start(longer_wins(), token="t")
    monkeypatch.setenv("REFLECTRM_SERVE_TOKEN", "t")
    trl = RemotePairwiseReward(url)
    assert trl(prompts=["q", "q", "p", "p"], completions=["a", "bb", "ccc", "d"]) == [0.0, 1.0, 1.0, 0.0]
    infos = [{"question": "q"}, {"question": "q"}]
    assert verl_compute_score(["src"] * 2, ["xyz", "x"], [None, None], infos, url=url) == [1.0, 0.0]
    assert verl_compute_score(["src"] * 2, ["xyz", "x"], ["yy", "yy"], infos, url=url, use_reference=True) == [1.0, 0.0]
    with pytest.raises(BackendError, match="HTTP 401"):
        RemotePairwiseReward(url, token="wrong")(prompts=["q"], completions=["a"])
