"""Fleet routing of the OpenAI-compatible backend: the router's decisions (a table on a fake clock), then real
sockets: a slow server's share, a server killed mid-run and restarted, the figures in the service's /metrics."""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
from collections.abc import Callable

import httpx
import pytest

from reflectrm.backends import openai_backend as ob
from reflectrm.backends.base import GenerationRequest, SamplingParams
from reflectrm.backends.engine import EngineConfig
from reflectrm.backends.fleet import Fleet
from reflectrm.core import JudgeConfig
from reflectrm.core.types import ChatMessage
from reflectrm.errors import BackendError, ConfigError
from reflectrm.serving.rewards import RewardConfig
from reflectrm.serving.server import RewardService, ServeConfig, uvicorn_config
from tests.engines.fake_server import FakeServer

PROMPT = (ChatMessage("user", "Which response is better?"),)
SAMPLE = SamplingParams(max_new_tokens=16, logprobs=True)


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch):
    monkeypatch.setattr(ob, "BACKOFF_BASE_S", 0.01)


# --- the router, on a fake clock ------------------------------------------------------------------------------

def run_steps(steps: str, *, servers: int, max_in_flight: int = 2, routing: str = "least-loaded",
              cooldown_max_s: float = 40.0) -> list[str]:
    """Apply steps ("pick", "pick!K" avoiding K, "ok K", "fail K", "pass K", "flunk K", "+S" seconds) and
    return what each pick gave: "K", "probe:K", "last:K" (every server down) or "wait"."""
    now = [0.0]
    fleet = Fleet([f"http://s{k}:8000/v1" for k in range(servers)], max_in_flight=max_in_flight, cooldown_s=10.0,
                  cooldown_max_s=cooldown_max_s, routing=routing, clock=lambda: now[0])
    picks = []
    for step in steps.split(","):
        op, _, arg = step.strip().partition(" ")
        if op.startswith("pick"):
            pick = fleet.choose(avoid=int(op[5:]) if "!" in op else None)
            picks.append("wait" if pick is None else
                         f"{'last:' if pick.last_resort else 'probe:' if pick.probe else ''}{pick.server}")
        elif op.startswith("+"):
            now[0] += float(op[1:])
        else:
            k = int(arg)
            {"ok": lambda: fleet.answered(k, latency_s=0.1), "fail": lambda: fleet.failed(k, reason="HTTP 500"),
             "pass": lambda: fleet.probed(k, ok=True), "flunk": lambda: fleet.probed(k, ok=False)}[op]()
    return picks


ROUTES = [
    # the trap: always the first server of a tie (server 0 would take everything at low load)
    pytest.param(3, "pick, pick, pick, pick", ["0", "1", "2", "0"], {}, id="ties-go-in-turn"),
    # round robin would give 0 here; least loaded gives the server that finished its request
    pytest.param(3, "pick, pick, pick, ok 1, pick", ["0", "1", "2", "1"], {}, id="fewest-in-flight-wins"),
    pytest.param(2, "pick, pick, pick", ["0", "1", "wait"], {"max_in_flight": 1}, id="a-full-fleet-waits"),
    # a retry goes elsewhere, but takes the server it failed on when nothing else is free
    pytest.param(2, "pick, pick, ok 0, ok 1, pick!0", ["0", "1", "1"], {}, id="a-retry-avoids-its-server"),
    pytest.param(2, "pick, pick, ok 0, pick!0", ["0", "1", "0"], {"max_in_flight": 1},
                 id="avoiding-is-only-a-preference"),
    pytest.param(2, "pick, fail 0, pick, pick", ["0", "1", "1"], {}, id="a-cooling-server-is-skipped"),
    # its cool-down over, it gets a probe and no request until the probe passes
    pytest.param(2, "pick, fail 0, +10, pick, pick, pass 0, pick", ["0", "probe:0", "1", "0"], {},
                 id="a-passed-probe-returns-it"),
    # a failed probe doubles the cool-down: 10 s later it is still out, 20 s later probed again
    pytest.param(2, "pick, fail 0, +10, pick, flunk 0, +10, pick, +10, pick", ["0", "probe:0", "1", "probe:0"], {},
                 id="a-failed-probe-keeps-it-out-longer"),
    # every server down: the one due first is probed now rather than failing the request; one probe at a time
    pytest.param(2, "pick, pick, fail 0, +1, fail 1, pick, pick, flunk 0, pick", ["0", "1", "last:0", "wait", "last:1"],
                 {}, id="every-server-down-probes-the-one-due-first"),
    # two requests in flight when it died: one failure, not two (a doubled cool-down would make this last:0)
    pytest.param(1, "pick, pick, fail 0, fail 0, +10, pick", ["0", "0", "probe:0"], {},
                 id="requests-in-flight-fail-once"),
    # an answer ends the run of failures: the next failure cools for 10 s again, not 20
    pytest.param(1, "pick, fail 0, +10, pick, pass 0, pick, ok 0, pick, fail 0, +10, pick",
                 ["0", "probe:0", "0", "0", "probe:0"], {}, id="an-answer-resets-the-failures"),
    pytest.param(1, "pick, fail 0, +10, pick, flunk 0, +15, pick", ["0", "probe:0", "probe:0"],
                 {"cooldown_max_s": 15.0}, id="the-cool-down-is-capped"),
    # round robin waits for the server whose turn it is, even when another one is free
    pytest.param(2, "pick, pick, ok 1, pick", ["0", "1", "wait"], {"max_in_flight": 1, "routing": "round-robin"},
                 id="round-robin-waits-its-turn"),
    pytest.param(2, "pick, pick, ok 1, pick", ["0", "1", "1"], {"max_in_flight": 1},
                 id="least-loaded-takes-the-free-one"),
]


@pytest.mark.parametrize(("servers", "steps", "picks", "kw"), ROUTES)
def test_routing(servers, steps, picks, kw):
    assert run_steps(steps, servers=servers, **kw) == picks


def test_the_figures_and_the_log_lines(caplog):
    now = [0.0]
    fleet = Fleet(["http://user:secret@gpu1:8000/v1"], max_in_flight=4, cooldown_s=5.0, cooldown_max_s=5.0,
                  clock=lambda: now[0])
    for k in range(1, 11):
        fleet.choose()
        fleet.answered(0, latency_s=k / 10)
    fleet.choose()
    with caplog.at_level(logging.WARNING, logger="reflectrm"):
        fleet.failed(0, reason="HTTP 503")
        now[0] += 2.0
        [s] = fleet.snapshot()
        now[0] += 3.0
        fleet.choose()
        fleet.probed(0, ok=True)
    assert (s.url, s.state, s.cooling_s, s.in_flight, s.requests, s.errors, s.consecutive_failures) == (
        "http://gpu1:8000/v1", "cooling", 3.0, 0, 11, 1, 1)
    assert (s.latency_count, s.latency_p50_s, s.latency_p95_s) == (10, 0.5, 1.0)
    assert s.latency_mean_s == pytest.approx(0.55)
    assert [r.getMessage() for r in caplog.records] == [
        "server http://gpu1:8000/v1 is down (HTTP 503): no requests for 5.0s, then a probe (GET /health)",
        "server http://gpu1:8000/v1 is back: its probe passed after 5.0s down"]
    assert all("secret" not in line for line in fleet.metric_lines())


@pytest.mark.parametrize(("kw", "message"), [
    pytest.param({"cooldown_s": 0.0}, "cooldown_s must be a positive number", id="zero-cooldown"),
    pytest.param({"cooldown_s": float("nan")}, "cooldown_s must be a positive number", id="nan-cooldown"),
    pytest.param({"cooldown_max_s": 5.0}, "raise --cooldown-max-s or lower --cooldown-s", id="cap-under-cooldown"),
    pytest.param({"cooldown_max_s": float("inf")}, "cooldown_max_s must be a number", id="infinite-cap"),
    pytest.param({"routing": "random"}, "routing 'random' is unknown: use least-loaded or round-robin",
                 id="unknown-routing"),
])
def test_bad_fleet_settings(kw, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        EngineConfig(**kw)


# --- real sockets ---------------------------------------------------------------------------------------------

def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout_s}s for {what}"
        time.sleep(0.01)


def generate_in_thread(backend: ob.OpenAIBackend, seeds: int) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run() -> None:
        try:
            out["rows"] = backend.generate([GenerationRequest(PROMPT, tuple(range(seeds)))], SAMPLE)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def finished(thread: threading.Thread, out: dict) -> list:
    thread.join(60)
    assert not thread.is_alive() and "error" not in out, out.get("error")
    [row] = out["rows"]
    return [c.text.split()[0] for c in row]


def seeds_of(*servers: FakeServer) -> list[int]:
    return sorted(body["seed"] for s in servers for body in s.answered)


@pytest.fixture
def servers():
    made: list[FakeServer] = []

    def make(**kw) -> FakeServer:
        made.append(FakeServer(**kw))
        return made[-1]

    yield make
    for s in made:
        s.close()


def test_a_slow_server_takes_fewer_requests(servers):
    # The slow server holds its requests until the fast one has answered 30 of the 40: under least-loaded routing
    # it cannot get more than its 2 slots before then, nor more than what is left after (round robin: a deadlock).
    fast, slow = servers(), servers()
    slow.gate.clear()
    b = ob.OpenAIBackend([fast.url, slow.url], config=EngineConfig(max_concurrency=2))
    thread, out = generate_in_thread(b, 40)
    wait_for(lambda: len(fast.answered) >= 30, "the fast server to answer 30 requests")
    slow.gate.set()
    assert finished(thread, out) == [f"seed{k}" for k in range(40)]
    assert len(slow.answered) <= 10 < 30 <= len(fast.answered)
    assert seeds_of(fast, slow) == list(range(40))


def test_round_robin_gives_a_slow_server_an_equal_share(servers):
    fast, slow = servers(), servers(delay_s=0.05)
    b = ob.OpenAIBackend([fast.url, slow.url], config=EngineConfig(max_concurrency=2, routing="round-robin"))
    thread, out = generate_in_thread(b, 40)
    assert finished(thread, out) == [f"seed{k}" for k in range(40)]
    assert len(slow.answered) == len(fast.answered) == 20


def test_a_server_killed_mid_run_and_restarted_loses_and_repeats_nothing(servers, caplog):
    a, b = servers(), servers()
    a.gate.clear()  # A holds its requests until B is back, so B must come back to finish the run
    b.gate.clear()  # B's first life never answers: it is killed holding its requests
    backend = ob.OpenAIBackend([a.url, b.url], config=EngineConfig(max_concurrency=2, cooldown_s=0.2,
                                                                   cooldown_max_s=1.0))
    with caplog.at_level(logging.WARNING, logger="reflectrm"):
        thread, out = generate_in_thread(backend, 24)
        wait_for(lambda: len(a.bodies) == 2 and len(b.bodies) == 2, "both servers to hold 2 requests")
        b.kill()
        wait_for(lambda: backend.fleet.snapshot()[1].state != "up", "B to be taken out")
        b.gate.set()
        b.restart()
        wait_for(lambda: len(b.answered) >= 1, "B to answer again after its restart")
        a.gate.set()
        texts = finished(thread, out)
    assert texts == [f"seed{k}" for k in range(24)]  # none lost
    assert seeds_of(a, b) == list(range(24))  # none answered twice
    assert "/health" in b.gets  # probed back before it got work
    sa, sb = backend.fleet.snapshot()
    assert (sa.errors, sb.errors, sb.state, sa.in_flight, sb.in_flight) == (0, 2, "up", 0, 0)
    assert sa.requests + sb.requests == 24 + 2
    messages = [r.getMessage() for r in caplog.records if r.name == "reflectrm.backends.fleet"]
    assert any(m.startswith(f"server {b.url} is down") for m in messages)
    assert messages[-1].startswith(f"server {b.url} is back")


def test_every_server_down_is_one_line_naming_them(servers, caplog):
    dead = [servers(), servers()]
    for s in dead:
        s.close()
    secret = dead[1].url.replace("http://", "http://user:secret@")  # a password in a URL is never shown
    b = ob.OpenAIBackend([dead[0].url, secret], model="judge", config=EngineConfig(max_retries=2))
    with caplog.at_level(logging.WARNING, logger="reflectrm"), pytest.raises(BackendError) as info:
        b.generate([GenerationRequest(PROMPT, (1,))], SAMPLE)
    message = str(info.value)
    assert "\n" not in message and "(gave up after 3 tries): every server is down: " in message
    assert all(f"{s.url} (cooling down" in message for s in dead)
    assert message.endswith("check the servers are up, or raise --max-retries / --timeout-s")
    assert f"server {dead[1].url} is down" in caplog.text and "secret" not in message + caplog.text


def test_metrics_show_each_server_without_credentials(servers):
    live, dead = servers(), servers()
    dead.close()
    port = live.url.split(":")[2].split("/")[0]
    backend = ob.OpenAIBackend([dead.url, f"http://user:secret@127.0.0.1:{port}/v1"],
                               config=EngineConfig(max_concurrency=1))
    [row] = backend.generate([GenerationRequest(PROMPT, (1, 2, 3, 4))], SAMPLE)
    assert len(row) == 4
    service = RewardService(backend, judge_config=JudgeConfig(n=2), reward_config=RewardConfig(),
                            config=ServeConfig())
    text = scrape_metrics(service)
    assert "secret" not in text
    up, down = f'server="{live.url}"', f'server="{dead.url}"'
    for line in (f"reflectrm_upstream_up{{{up}}} 1", f"reflectrm_upstream_requests_total{{{up}}} 4",
                 f"reflectrm_upstream_errors_total{{{up}}} 0", f"reflectrm_upstream_in_flight{{{up}}} 0",
                 f"reflectrm_upstream_latency_seconds_count{{{up}}} 4", f"reflectrm_upstream_up{{{down}}} 0",
                 f'reflectrm_upstream_state{{{down},state="cooling"}} 1',
                 f"reflectrm_upstream_latency_seconds_count{{{down}}} 0"):
        assert line in text.splitlines(), line
    assert re.search(rf'reflectrm_upstream_latency_seconds{{{re.escape(up)},quantile="0.95"}} \d', text)
    assert re.search(rf"reflectrm_upstream_errors_total{{{re.escape(down)}}} [1-9]", text)


def scrape_metrics(service: RewardService) -> str:
    """GET /metrics from the service run by uvicorn on a free port (in a thread)."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn_config(service, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, "the service to start")
        return httpx.get(f"http://127.0.0.1:{port}/metrics").text
    finally:
        server.should_exit = True
        thread.join(30)
