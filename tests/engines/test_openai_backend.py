"""The OpenAI-compatible backend against a tiny fake server: good answers, and each bad answer's documented error."""

from __future__ import annotations

import threading
import time

import pytest

from reflectrm.backends import BackendConfig, EngineConfig, load_backend
from reflectrm.backends import openai_backend as ob
from reflectrm.backends.base import GenerationRequest, SamplingParams
from reflectrm.backends.engine import EngineConfig
from reflectrm.core.types import ChatMessage
from reflectrm.errors import BackendError, ConfigError, ContextLengthError, GenerationCancelled
from tests.engines.fake_server import FakeServer

PROMPT = (ChatMessage("user", "Which response is better?"),)
SAMPLE = SamplingParams(max_new_tokens=16, logprobs=True)


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch):
    monkeypatch.setattr(ob, "BACKOFF_BASE_S", 0.01)


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.close()


def backend(*servers: FakeServer, **config) -> ob.OpenAIBackend:
    return ob.OpenAIBackend([s.url for s in servers], config=EngineConfig(**config))


def test_one_request_per_seed_with_logprobs_and_the_servers_only_model(server, monkeypatch):
    monkeypatch.setenv("REFLECTRM_OPENAI_API_KEY", "sk-test")
    b = load_backend(BackendConfig(backend="openai"), EngineConfig(base_urls=(server.url,)))
    assert b.model_id == "judge"
    [row] = b.generate([GenerationRequest(PROMPT, (11, 12, 13))], SAMPLE)
    # Sample j carries seed j: the text names the seed each request was sent with.
    assert [c.text.split()[0] for c in row] == ["seed11", "seed12", "seed13"]
    assert sorted(body["seed"] for body in server.bodies) == [11, 12, 13]
    assert all(body["n"] == 1 and body["logprobs"] is True and body["model"] == "judge" for body in server.bodies)
    assert row[0].token_logprobs == pytest.approx((-0.1, -0.2, -0.3, -0.4, -0.5))
    assert row[0].num_tokens == 5 and row[0].finish_reason == "stop"  # usage counts the stop token; we don't
    assert server.headers[0]["Authorization"] == "Bearer sk-test"


@pytest.mark.parametrize("routing", ["round-robin", "least-loaded"])
def test_several_servers_share_the_load(server, routing):
    """Round robin splits 8 requests 4/4; least-loaded splits them by what is in flight when each is sent, which
    the machine's timing decides (a fast answer frees its server for the next), so only both taking part is
    certain there: the second request finds the first's server busy, or both idle and the other next in turn."""
    other = FakeServer()
    try:
        b = backend(server, other, routing=routing)
        rows = b.generate([GenerationRequest(PROMPT, tuple(range(8)))], SAMPLE)
        assert len(rows[0]) == 8 and len(server.bodies) + len(other.bodies) == 8
        if routing == "round-robin":
            assert len(server.bodies) == 4 and len(other.bodies) == 4
        else:
            assert server.bodies and other.bodies
    finally:
        other.close()


# Each bad answer, the error it gives, and how many requests it may cost (retries only for 5xx and timeouts).
BAD = [
    pytest.param("no-logprobs", BackendError, "returned no log-probs", 1, id="no-logprobs-refused-at-once"),
    pytest.param("malformed", BackendError, "malformed JSON", 1, id="malformed-json"),
    pytest.param("http500", BackendError, "HTTP 500 (gave up after 3 tries)", 3, id="http-500-retried-then-fails"),
    pytest.param("slow", BackendError, "did not answer within 0.3s", 3, id="slow-server-times-out"),
    pytest.param("context", ContextLengthError, "maximum context length", 1, id="context-400"),
]


@pytest.mark.parametrize(("mode", "error", "message", "requests"), BAD)
def test_bad_answers_give_the_documented_errors(mode, error, message, requests):
    s = FakeServer(mode=mode, slow_s=1.0)
    try:
        # model named: start-up asks nothing, so only the chat requests run under the short timeout
        b = ob.OpenAIBackend([s.url], model="judge", config=EngineConfig(max_retries=2, timeout_s=0.3))
        with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
            b.generate([GenerationRequest(PROMPT, (1,))], SAMPLE)
        assert "\n" not in str(info.value)
        time.sleep(0.05 if mode != "slow" else 1.2)  # let the slow handler finish recording
        assert len(s.bodies) == requests
    finally:
        s.close()


def test_a_5xx_then_a_good_answer_succeeds():
    s = FakeServer(mode="fail-once")
    try:
        [[c]] = backend(s, max_retries=2).generate([GenerationRequest(PROMPT, (5,))], SAMPLE)
        assert c.text.startswith("seed5") and len(s.bodies) == 2
    finally:
        s.close()


def test_unreachable_server_is_one_line():
    b = ob.OpenAIBackend(["http://127.0.0.1:9/v1"], model="judge", config=EngineConfig(max_retries=1))
    with pytest.raises(BackendError, match=r"cannot reach server .* \(gave up after 2 tries\)"):
        b.generate([GenerationRequest(PROMPT, (1,))], SAMPLE)


@pytest.mark.parametrize(("kw", "message"), [
    pytest.param({}, "needs --base-url", id="no-url"),
    pytest.param({"base_urls": ("localhost:8000",)}, "must start with http", id="no-scheme"),
])
def test_bad_settings(kw, message):
    with pytest.raises(ConfigError, match=message):
        load_backend(BackendConfig(backend="openai"), EngineConfig(**kw))


def test_a_server_with_two_models_needs_model():
    s = FakeServer(models=("a", "b"))
    try:
        with pytest.raises(ConfigError, match="serves 2 models .*--model"):
            backend(s)
        assert ob.OpenAIBackend([s.url], model="b").model_id == "b"
    finally:
        s.close()


def test_should_stop_cancels_pending_requests():
    s = FakeServer(mode="stall", slow_s=0.5)
    try:
        b = backend(s, max_concurrency=1)
        flag = threading.Event()
        threading.Timer(0.2, flag.set).start()
        with pytest.raises(GenerationCancelled):
            b.generate([GenerationRequest(PROMPT, tuple(range(20)))], SAMPLE, should_stop=flag.is_set)
        assert len(s.bodies) < 5  # of 20 requests one at a time: the rest were never sent
    finally:
        s.close()


def test_check_prompt_uses_the_served_context(server):
    b = backend(server)
    b.check_prompt(PROMPT, max_new_tokens=100)
    with pytest.raises(ContextLengthError, match="context is 4096 tokens"):
        b.check_prompt((ChatMessage("user", "x" * 40000),), max_new_tokens=100)


def test_a_server_of_the_fleet_restarting_costs_no_sample(server):
    # an upstream vLLM restarting under load: its requests retry on the other servers, none lost, none twice
    restarting = FakeServer()
    restarting.close()  # its port now refuses connections, as during a restart
    b = backend(restarting, server, max_retries=1)
    [row] = b.generate([GenerationRequest(PROMPT, tuple(range(8)))], SAMPLE)
    assert [c.text.split()[0] for c in row] == [f"seed{k}" for k in range(8)]
    assert sorted(body["seed"] for body in server.bodies) == list(range(8))
