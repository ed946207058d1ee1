"""Batching across requests: one batch for every waiting request, each answered as if alone, failures kept apart.

Jobs are submitted to the service directly (no HTTP) behind a "blocker" request whose generation
waits on an event, so which requests share a batch is decided by the test, not by timing.
"""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest

from reflectrm.backends import ScriptedBackend
from reflectrm.core import JudgeConfig
from reflectrm.errors import BackendError, ContextLengthError
from reflectrm.serving.batcher import ClientLeft
from reflectrm.serving.rewards import RewardConfig, group_rewards
from reflectrm.serving.server import RewardService, ServeConfig, uvicorn_config
from tests.conftest import critique_output, response_output

CONFIG = JudgeConfig(n=3, max_new_tokens=8, reflection_max_new_tokens=8)
WAIT_S = 30  # every wait is bounded


def seeded_judge(gate: threading.Event | None = None, *, poison: str = "", down: str = "",
                 max_context_chars: int = 1_000_000) -> ScriptedBackend:
    """Each sample's verdict depends on its seed (so a seed that moved with batch position changes rewards).

    A prompt holding "BLOCK" waits for `gate`; one holding `poison` raises a bug; one holding `down` a BackendError.
    """

    def responder(text, seed, params):
        if "BLOCK" in text and gate is not None:
            gate.wait(WAIT_S)
        if poison and poison in text:
            raise ValueError("a bug this request triggers")
        if down and down in text:
            raise BackendError("cannot reach server http://gpu1:8000/v1 (ConnectError)")
        if "## Critiques for Judgment" in text:
            return critique_output(1 + seed % 2)
        return response_output(1 + (seed >> 7) % 2, analysis=f"a{seed % 97}")

    return ScriptedBackend(responder, max_context_chars=max_context_chars)


def service_over(backend, **config) -> tuple[RewardService, list]:
    stored: list = []

    def record(judgments, swapped):
        stored.append((len(judgments), swapped))
        return list(range(len(judgments)))

    settings = {"batch_window_s": 0.0, **config}
    return RewardService(backend, judge_config=CONFIG, reward_config=RewardConfig(), config=ServeConfig(**settings),
                         record=record), stored


REQUESTS = [  # (prompts, groups): different sizes, so a request's pairs sit at different batch positions
    (["What is 2+2?"], [["4", "5", "four", "22"]]),
    (["Name a colour.", "Name a fruit."], [["red", "blue"], ["apple", "pear", "fig"]]),
    ([[{"role": "user", "content": "Say hi."}]], [["hi", "hello", "hey", "yo", "hiya"]]),
]


def blocked(service, gate):
    """A first request that holds the backend until `gate` is set; the rest queue behind it."""
    job = service.batcher.submit(service.rewards_job(["BLOCK"], [["x", "y"]], None))
    deadline = time.monotonic() + WAIT_S
    while service.batcher.queued and time.monotonic() < deadline:  # wait until its round has started
        time.sleep(0.01)
    return job


def test_requests_waiting_together_are_judged_in_one_batch_with_the_rewards_they_get_alone():
    gate = threading.Event()
    backend = seeded_judge(gate)
    service, stored = service_over(backend)
    blocker = blocked(service, gate)
    jobs = [service.batcher.submit(service.rewards_job(p, g, None)) for p, g in REQUESTS]
    calls_before = len(backend.calls)
    gate.set()
    batched = [job.future.result(WAIT_S)["rewards"] for job in jobs]
    assert blocker.future.result(WAIT_S)["rewards"]
    # one round for the three queued requests: one stage-1 call and one stage-2 call in all
    assert service.counters["batches"] == 2 and service.counters["batched_requests"] == 4
    stage1_prompts = {text for text, _, params in backend.calls[calls_before:] if params.logprobs}
    assert {"What is 2+2?" in t for t in stage1_prompts} == {True, False}
    alone = [group_rewards(p, g, seeded_judge(), judge_config=CONFIG) for p, g in REQUESTS]
    assert batched == alone
    assert len({tuple(r) for rewards in alone for r in rewards}) > 2  # the seeds matter: rewards are not all 0.5
    assert [n for n, _ in stored[1:]] == [12, 2 + 6, 20]  # each request stores its own judgments, both orders


@pytest.mark.parametrize(("trap", "bad_group", "error"), [
    # a bug only this request's content triggers, mid-generation
    pytest.param({"poison": "POISON"}, ["POISON", "b"], ValueError, id="a-bug-in-one-request"),
    # a prompt too long for the model: judge_many's up-front check raises for the whole batch
    pytest.param({"max_context_chars": 2000}, ["x" * 3000, "b"], ContextLengthError, id="one-prompt-too-long"),
])
def test_a_bad_request_never_fails_its_batchmates(trap, bad_group, error):
    gate = threading.Event()
    service, stored = service_over(seeded_judge(gate, **trap))
    blocked(service, gate)
    good = [service.batcher.submit(service.rewards_job(p, g, None)) for p, g in REQUESTS[:2]]
    bad = service.batcher.submit(service.rewards_job(["q"], [bad_group], None))
    gate.set()
    with pytest.raises(error):
        bad.future.result(WAIT_S)
    assert [job.future.result(WAIT_S)["rewards"] for job in good] == [
        group_rewards(p, g, seeded_judge(), judge_config=CONFIG) for p, g in REQUESTS[:2]]
    assert service.counters["isolated_rounds"] == 1


def test_a_backend_failure_fails_each_request_of_its_batch():
    gate = threading.Event()
    service, stored = service_over(seeded_judge(gate, down="Name a"))
    blocked(service, gate)
    jobs = [service.batcher.submit(service.rewards_job(p, g, None)) for p, g in REQUESTS]
    gate.set()
    for job in jobs:
        with pytest.raises(BackendError, match="cannot reach server"):
            job.future.result(WAIT_S)
    assert len(stored) == 1  # only the blocker's judgments: nothing of the failed batch


def test_a_request_whose_client_left_is_dropped_before_its_batch():
    gate = threading.Event()
    backend = seeded_judge(gate)
    service, stored = service_over(backend)
    blocked(service, gate)
    left, stays = (service.batcher.submit(service.rewards_job(p, g, None)) for p, g in REQUESTS[:2])
    left.cancel()
    gate.set()
    assert stays.future.result(WAIT_S)["rewards"]
    with pytest.raises(ClientLeft):
        left.future.result(WAIT_S)
    assert not any("What is 2+2?" in text for text, _, _ in backend.calls)  # never generated
    assert service.counters["cancelled"] == 1 and len(stored) == 2


def test_a_client_that_leaves_mid_batch_is_cancelled_and_its_batchmate_answered():
    # the traps: stopping the round for one leaver would fail its batchmate; finishing it as usual would
    # answer (and store) a request nobody waits for
    gate, hold, holding = threading.Event(), threading.Event(), threading.Event()
    judge = seeded_judge(gate)

    def responder(text, seed, params):
        if "HOLD" in text:  # the leaver's generation is under way when its client goes
            holding.set()
            hold.wait(WAIT_S)
        return judge.responder(text, seed, params)

    backend = ScriptedBackend(responder)
    service, stored = service_over(backend)
    blocked(service, gate)
    leaver = service.batcher.submit(service.rewards_job(["HOLD: what is 1+1?"], [["2", "3"]], None))
    stays = service.batcher.submit(service.rewards_job(*REQUESTS[0], None))
    gate.set()
    assert holding.wait(WAIT_S)
    leaver.cancel()
    hold.set()
    assert stays.future.result(WAIT_S)["rewards"] == group_rewards(*REQUESTS[0], seeded_judge(),
                                                                   judge_config=CONFIG)
    with pytest.raises(ClientLeft):
        leaver.future.result(WAIT_S)
    assert service.counters["batched_requests"] == 3  # the blocker alone, then the leaver with its batchmate
    assert [n for n, _ in stored] == [2, 12]  # the blocker's and the batchmate's judgments; none of the leaver's


@pytest.fixture
def serve_http():
    servers = []

    def run(service):
        import uvicorn

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = uvicorn.Server(uvicorn_config(service, host="127.0.0.1", port=port, log_level="error"))
        threading.Thread(target=server.run, daemon=True).start()
        deadline = time.monotonic() + WAIT_S
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        servers.append(server)
        return port

    yield run
    for server in servers:
        server.should_exit = True


def test_a_client_that_disconnects_mid_generation_stops_costing_anything(serve_http):
    # the trap: a request of 870 judgments whose client left generated for ~50 s more, blocking the next client
    slow = threading.Event()  # never set: each completion waits 20 ms, so the request would take minutes

    def responder(text, seed, params):
        slow.wait(0.02)
        return critique_output(1) if "## Critiques" in text else response_output(1)

    backend = ScriptedBackend(responder)
    service, stored = service_over(backend)
    port = serve_http(service)
    big = {"prompts": ["q"], "completions": [[f"answer {i}" for i in range(30)]]}  # 870 judgments
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        body = httpx.Request("POST", f"http://127.0.0.1:{port}/v1/rewards", json=big)
        head = "".join(f"{k}: {v}\r\n" for k, v in body.headers.items())
        s.sendall(f"POST /v1/rewards HTTP/1.1\r\n{head}\r\n".encode() + body.read())
        deadline = time.monotonic() + WAIT_S
        while not backend.calls and time.monotonic() < deadline:
            time.sleep(0.01)
    # the socket is closed: the service notices within its poll, and the round stops within a completion
    deadline = time.monotonic() + WAIT_S
    while service.counters["cancelled"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert service.counters["cancelled"] == 1 and service.counters["disconnected"] == 1
    generated = len(backend.calls)
    assert generated < 870 * 3 // 2 and stored == []
    # the next client is served at once, and the abandoned request generates nothing more
    r = httpx.post(f"http://127.0.0.1:{port}/v1/rewards", json={"prompts": ["p"], "completions": [["a", "b"]]},
                   timeout=WAIT_S)
    assert r.status_code == 200 and len(backend.calls) <= generated + 2 * 3 + 2 * 2


def test_a_flood_gets_429_with_retry_after_and_the_queue_does_not_wedge(serve_http):
    gate = threading.Event()
    service, _ = service_over(seeded_judge(gate), max_queue=4)
    port = serve_http(service)
    blocked(service, gate)
    url = f"http://127.0.0.1:{port}/v1/rewards"
    body = {"prompts": ["q"], "completions": [["a", "b"]]}
    with httpx.Client(timeout=WAIT_S) as client:
        results: list = []
        threads = [threading.Thread(target=lambda: results.append(client.post(url, json=body))) for _ in range(40)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + WAIT_S
        while service.counters["rejected_429"] < 36 and time.monotonic() < deadline:
            time.sleep(0.02)
        gate.set()
        for t in threads:
            t.join(WAIT_S)
        codes = sorted(r.status_code for r in results)
        assert codes == [200] * 4 + [429] * 36
        assert all(r.headers["Retry-After"] == "1" for r in results if r.status_code == 429)
        assert client.post(url, json=body).status_code == 200  # the queue is free again


@pytest.mark.slow
def test_the_demo_judge_gives_a_request_the_same_rewards_alone_and_batched(demo_backend):
    config = JudgeConfig(n=2, max_new_tokens=24, reflection_max_new_tokens=24)
    requests = [(["What is 3 + 4?"], [["3 + 4 = 7", "3 + 4 = 8", "seven"]]),
                (["What is 5 - 2?"], [["5 - 2 = 3", "5 - 2 = 2"]])]

    def serve_all(jobs_of):
        service = RewardService(demo_backend, judge_config=config, reward_config=RewardConfig(),
                                config=ServeConfig(batch_window_s=2.0))  # both land in one window
        jobs = [service.batcher.submit(service.rewards_job(p, g, None)) for p, g in jobs_of]
        out = [job.future.result(300)["rewards"] for job in jobs]
        assert service.counters["batches"] == 1
        return out

    [alone] = serve_all(requests[1:])
    batched = serve_all(requests)
    assert batched[1] == alone  # second in the batch: its pairs sit behind the first request's
    assert alone == group_rewards(*requests[1], demo_backend, judge_config=config)
