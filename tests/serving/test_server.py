"""The reward service over real HTTP (uvicorn in a thread) on scripted judges: routes, limits, auth, queueing."""

from __future__ import annotations

import asyncio
import json
import re
import select
import socket
import threading
import time

import httpx
import pytest

from reflectrm.backends import ScriptedBackend
from reflectrm.core import JudgeConfig
from reflectrm.errors import BackendError
from reflectrm.serving.rewards import RewardConfig
from reflectrm.serving.server import RewardService, ServeConfig, build_app, openrlhf_groups, uvicorn_config
from tests.conftest import critique_output, response_output

CONFIG = JudgeConfig(n=2, max_new_tokens=8, reflection_max_new_tokens=8)


def longer_wins(gate: threading.Event | None = None, fail: bool = False, wait_s: float = 10) -> ScriptedBackend:
    def responder(text, seed, params):
        if gate is not None:
            gate.wait(wait_s)
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
        server = uvicorn.Server(uvicorn_config(service, host="127.0.0.1", port=port, log_level="error"))
        threading.Thread(target=server.run, daemon=True).start()
        deadline = time.monotonic() + 60
        while not server.started:
            assert time.monotonic() < deadline, "the service did not start within 60 s"
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
    pytest.param("/v1/rewards", {"prompts": ["q"], "completions": [["a", 3]]}, 400,
                 "completions[0][1] must be a string or a list of messages, got a number", id="rewards-not-strings"),
    pytest.param("/v1/rewards", {"prompts": ["q", "r"], "completions": [["a"]]}, 400, "2 prompts but 1", id="mismatch"),
    pytest.param("/get_reward", {"query": ["a"], "prompts": []}, 400, "equal length", id="openrlhf-mismatch"),
    pytest.param("/v1/rewards", {"prompts": ["q"], "completions": [[str(i) * (i + 1) for i in range(40)]]}, 413,
                 "needs up to 1560 judgments", id="too-many-judgments"),
    pytest.param("/v1/judge", [1, 2], 400, "JSON object", id="not-an-object"),
    # issue 27: each of these was a 500 "Internal Server Error", uncounted in /metrics
    pytest.param("/v1/rewards", {"prompts": [7], "completions": [["a", "b"]]}, 400,
                 "prompts[0] must be a string or a list", id="prompt-a-number"),
    pytest.param("/v1/rewards", {"prompts": [{"role": "user"}], "completions": [["a", "b"]]}, 400,
                 "prompts[0] must be a string or a list", id="prompt-an-object"),
    pytest.param("/v1/rewards", {"prompts": [[{"role": "user", "content": 3}]], "completions": [["a", "b"]]}, 400,
                 "messages of strings", id="prompt-message-not-text"),
    pytest.param("/v1/rewards", {"prompts": ["q"], "completions": [["a", {"x": 1}]]}, 400,
                 "completions[0][1] must be a string or a list of messages, got an object", id="completion-object"),
    pytest.param("/v1/rewards", {"prompts": ["q"], "completions": [["a", [{"role": "assistant"}]]]}, 400,
                 "completions[0][1] must be a string", id="completion-message-without-text"),
    pytest.param("/v1/rewards", {"prompts": ["q", "r"], "completions": [["a", "b"], ["c", "d"]], "references": ["x"]},
                 400, '"references" must be a list of 2', id="references-shorter-than-groups"),
    pytest.param("/v1/rewards", {"prompts": ["q"], "completions": [["a", "b"]], "references": [5]},
                 400, "references\" must hold strings", id="reference-a-number"),
    pytest.param("/get_reward", {"query": ["qa", "qb"], "prompts": ["q", "q"], "labels": [1, 2]}, 400,
                 '"labels" must hold strings', id="openrlhf-label-number"),
    pytest.param("/v1/judge", {"query": "q", "response_1": 5, "response_2": "b"}, 400, "'response_1' must be a string",
                 id="judge-response-a-number"),
    pytest.param("/v1/judge", {"query": "q", "response_1": "a", "response_2": "b", "id": {"x": 1}}, 400,
                 "id must be a string or a number", id="judge-id-an-object"),
    pytest.param("/v1/judge", {"query": "q", "response_1": "a", "response_2": "b", "n": 16}, 400,
                 "unknown field 'n': /v1/judge takes query, messages", id="judge-setting-not-ignored"),
    pytest.param("/v1/rewards", {"prompts": ["q"], "completions": [["a", "b"]], "opponent": 1}, 400,
                 "unknown field 'opponent'", id="rewards-misspelt-field"),
]

# Raw bodies: what a JSON encoder would never send (the trap: json.loads succeeds, the answer's encoding fails)
RAW = [
    pytest.param("/v1/judge", r'{"query": "q", "response_1": "a\ud800", "response_2": "b"}', r"lone surrogate (\ud800)",
                 id="judge-lone-surrogate"),
    pytest.param("/v1/judge", r'{"query": "q", "response_1": "a", "response_2": "b", "id": "\udfff"}', "lone surrogate",
                 id="judge-id-lone-surrogate"),
    pytest.param("/v1/rewards", r'{"prompts": ["\ud83d"], "completions": [["a", "b"]]}', "lone surrogate",
                 id="rewards-lone-surrogate"),
    pytest.param("/v1/rewards", '{"prompts": ["q"], "completions": [["a", "b"]], "references": [' + "9" * 5000 + "]}",
                 "not valid JSON (Exceeds the limit", id="integer-of-5000-digits"),
    pytest.param("/v1/judge", '{"query": "q", "response_1": "a", "response_2": "b", "id": ' + "1" * 5000 + "}",
                 "not valid JSON", id="id-of-5000-digits"),
    pytest.param("/v1/judge", "[" * 100_000 + "]" * 100_000, "nests too deeply", id="deep-nesting"),
    pytest.param("/v1/judge", b'{"query": "\xff"}'.decode("unicode_escape").encode("latin-1"), "not valid JSON",
                 id="bad-utf8"),
]


@pytest.mark.parametrize(("path", "body", "status", "message"), BAD)
def test_bad_requests(start, path, body, status, message):
    url, _, _ = start(longer_wins(), max_judgments=1000)
    r = httpx.post(url + path, json=body)
    assert r.status_code == status and message in r.json()["error"]
    assert f"reflectrm_rejected_{status}_total 1" in httpx.get(f"{url}/metrics").text


@pytest.mark.parametrize(("path", "body", "message"), RAW)
def test_bad_bodies_are_one_line_400s_and_nothing_is_stored(start, path, body, message):
    url, _, recorded = start(longer_wins())
    r = httpx.post(url + path, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and message in r.json()["error"] and "\n" not in r.json()["error"]
    assert recorded == [] and "reflectrm_rejected_400_total 1" in httpx.get(f"{url}/metrics").text


@pytest.mark.parametrize("given", [pytest.param(0, id="zero"), pytest.param(False, id="false"),
                                   pytest.param(0.0, id="zero-float"), pytest.param("0", id="zero-string")])
def test_a_falsy_id_is_kept_as_given(start, given):
    # the trap: str(d.get("id") or "") replaced these with a content hash, so an answer could not be joined
    url, _, _ = start(longer_wins())
    j = httpx.post(f"{url}/v1/judge", json={"query": "q", "response_1": "a", "response_2": "bb", "id": given}).json()
    assert j["pair"]["id"] == (given if isinstance(given, str) else json.dumps(given))


def test_a_chunked_body_over_the_limit_is_413_without_being_read_whole(start):
    # the trap: only Content-Length was checked, so a chunked body was read (and parsed) whole, then 400
    url, service, _ = start(longer_wins(), max_body_bytes=1000)
    with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=10) as s:
        s.sendall(b"POST /v1/rewards HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        for _ in range(3):  # 3000 bytes of a body that never ends: the answer cannot wait for its end
            s.sendall(b"3e8\r\n" + b" " * 1000 + b"\r\n")
        reply = s.recv(4096).decode()
    assert reply.startswith("HTTP/1.1 413") and "over the limit of 1000 bytes" in reply
    assert service.counters["rejected_413"] == 1


def test_a_body_that_stalls_gets_408(start):
    url, _, _ = start(longer_wins(), body_timeout_s=0.5)
    with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=10) as s:
        s.sendall(b"POST /v1/rewards HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{")  # headers, then one byte of 100, then nothing
        reply = s.recv(4096).decode()
    assert reply.startswith("HTTP/1.1 408") and "stalled for 0.5s" in reply
    assert httpx.get(f"{url}/health").json()["status"] == "ok"


def _head_of(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


@pytest.mark.parametrize("sent", [
    pytest.param(b"POST /v1/rewards HTTP/1.1\r\nHost: 127.0.0.1\r\n", id="headers-never-finished"),
    pytest.param(b"POS", id="request-line-cut"),
    pytest.param(b"drip", id="a-byte-at-a-time"),  # each byte restarts uvicorn's idle timer: no deadline but ours
])
def test_a_request_whose_headers_never_finish_gets_408_and_the_others_are_answered(start, sent):
    url, _, _ = start(longer_wins(), header_timeout_s=0.5)
    head = b"POST /v1/rewards HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    with socket.create_connection(_head_of(url), timeout=10) as s:
        if sent == b"drip":
            opened = time.monotonic()
            for byte in head:  # one byte every 0.1 s: 5 s of headers, never whole within the deadline
                if select.select([s], [], [], 0.1)[0]:  # the answer came: stop sending (a byte after the
                    break  # server's close would be answered with a reset, which may discard the 408)
                s.sendall(bytes([byte]))
            assert time.monotonic() - opened < 5, "the dripping connection was never closed"
        else:
            s.sendall(sent)
        # meanwhile the service answers another client
        other = httpx.post(f"{url}/v1/judge", json={"query": "q", "response_1": "a", "response_2": "bb"}, timeout=10)
        assert other.status_code == 200
        reply = b""
        while chunk := s.recv(4096):  # the server closes the connection after its 408
            reply += chunk
    text = reply.decode()
    assert text.startswith("HTTP/1.1 408") and "not whole within 0.5s" in text, text


def test_a_connection_that_sends_nothing_is_closed_silently(start):
    url, _, _ = start(longer_wins(), header_timeout_s=0.3)
    with socket.create_connection(_head_of(url), timeout=10) as s:
        assert s.recv(4096) == b""  # closed at the deadline, nothing written (an idle keep-alive ends the same)


def test_a_keep_alive_connection_is_judged_again_after_its_first_answer(start):
    url, _, _ = start(longer_wins(), header_timeout_s=0.5)
    body = {"query": "q", "response_1": "a", "response_2": "bb"}
    with httpx.Client(timeout=10) as client:  # one connection: the deadline re-arms after each answer
        for _ in range(3):
            assert client.post(f"{url}/v1/judge", json=body).status_code == 200
            time.sleep(0.2)


def test_a_flood_of_1000_requests_is_refused_at_once_and_the_queue_recovers(start):
    # a full queue refuses before reading or parsing a body: 1,000 requests at once cost their connections only
    gate = threading.Event()
    url, service, _ = start(longer_wins(gate, wait_s=120), max_queue=2)
    body = {"query": "q", "response_1": "a", "response_2": "bb"}
    admitted: list = []
    try:
        _flood(url, service, gate, body, admitted)
    finally:
        gate.set()  # never leave the generating request waiting


def _flood(url, service, gate, body, admitted) -> None:
    def post() -> None:
        admitted.append(httpx.post(f"{url}/v1/judge", json=body, timeout=60))

    first = [threading.Thread(target=post) for _ in range(3)]
    first[0].start()  # generating (behind the gate) ...
    deadline = time.monotonic() + 60
    while not service.batcher.backend.calls and time.monotonic() < deadline:
        time.sleep(0.02)
    for t in first[1:]:  # ... and two queued behind it: the queue is full
        t.start()
    while service.batcher.queued < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert service.batcher.queued == 2

    async def flood() -> list[int]:
        limits = httpx.Limits(max_connections=100)
        async with httpx.AsyncClient(timeout=60, limits=limits) as client:
            replies = await asyncio.gather(*(client.post(f"{url}/v1/judge", json=body) for _ in range(1000)))
        return [r.status_code for r in replies if r.headers.get("Retry-After") == "1"]

    codes = asyncio.run(flood())
    assert codes == [429] * 1000 and service.counters["rejected_429"] == 1000
    assert not gate.is_set() and admitted == []  # nothing of the flood waited for the generating request
    gate.set()
    for t in first:
        t.join(60)
    assert sorted(r.status_code for r in admitted) == [200] * 3
    assert httpx.post(f"{url}/v1/judge", json=body, timeout=60).status_code == 200  # the queue is free again


def test_body_limit_token_and_backend_failure(start):
    url, _, _ = start(longer_wins(fail=True), token="s3cret-0123456789abcdef", max_body_bytes=1000)
    body = {"query": "q", "response_1": "a", "response_2": "b"}
    assert httpx.post(f"{url}/v1/judge", json=body).status_code == 401
    assert httpx.post(f"{url}/v1/judge", json=body, headers={"Authorization": "Bearer wrong"}).status_code == 401
    auth = {"Authorization": "Bearer s3cret-0123456789abcdef"}
    big = httpx.post(f"{url}/v1/judge", json={**body, "response_1": "x" * 2000}, headers=auth)
    assert big.status_code == 413
    down = httpx.post(f"{url}/v1/judge", json=body, headers={"Authorization": "Bearer s3cret-0123456789abcdef"})
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

    url, _, _ = start(longer_wins(), token="t-0123456789abcdef")
    monkeypatch.setenv("REFLECTRM_SERVE_TOKEN", "t-0123456789abcdef")
    trl = RemotePairwiseReward(url)
    assert trl(prompts=["q", "q", "p", "p"], completions=["a", "bb", "ccc", "d"]) == [0.0, 1.0, 1.0, 0.0]
    infos = [{"question": "q"}, {"question": "q"}]
    assert verl_compute_score(["src"] * 2, ["xyz", "x"], [None, None], infos, url=url) == [1.0, 0.0]
    assert verl_compute_score(["src"] * 2, ["xyz", "x"], ["yy", "yy"], infos, url=url, use_reference=True) == [1.0, 0.0]
    with pytest.raises(BackendError, match="HTTP 401"):
        RemotePairwiseReward(url, token="wrong")(prompts=["q"], completions=["a"])
