"""`reflectrm serve` over real HTTP: what a web page can send is refused before its body is read, and nothing is
stored for it; the clients the service is for (no Origin, JSON bodies) are answered as before."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

import reflectrm.backends
from reflectrm.serving.hosts import AccessConfig
from tests.serving.test_server import longer_wins, start  # noqa: F401 - `start` is the fixture

BODY = {"query": "q", "response_1": "a", "response_2": "bb"}


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


# What a page on another site can make a browser send without asking (a "simple" request), and a rebinding page.
# The trap: a service that reads any body as JSON whatever its type, and never looks at Host or Origin.
PAGE_REQUESTS = [
    pytest.param({"Content-Type": "text/plain;charset=UTF-8", "Origin": "https://evil.example"}, 403,
                 "Origin 'https://evil.example'", id="fetch-text-plain-from-another-site"),
    pytest.param({"Content-Type": "application/x-www-form-urlencoded", "Origin": "null"}, 403, "Origin 'null'",
                 id="form-from-a-sandboxed-frame"),
    pytest.param({"Content-Type": "text/plain", "Sec-Fetch-Site": "cross-site"}, 403, "cross-site",
                 id="cross-site-without-origin"),
    pytest.param({"Content-Type": "text/plain"}, 415, "Content-Type 'text/plain'", id="text-plain"),
    pytest.param({"Content-Type": "application/x-www-form-urlencoded"}, 415, "application/json", id="curl-d"),
    pytest.param({"Content-Type": "multipart/form-data; boundary=b"}, 415, "application/json", id="multipart"),
    pytest.param({}, 415, "no Content-Type", id="no-content-type"),
    pytest.param({"Content-Type": "application/json", "Host": "evil.example:8000"}, 403, "Host 'evil.example:8000'",
                 id="rebinding-host"),
    pytest.param({"Content-Type": "application/json", "Host": "127.0.0.1.evil.example"}, 403, "DNS-rebinding",
                 id="rebinding-host-like-an-address"),
    pytest.param({"Content-Type": "application/json", "Origin": "http://localhost:1"}, 403, "--allowed-origin",
                 id="another-local-page"),
]


@pytest.mark.parametrize(("headers", "status", "fragment"), PAGE_REQUESTS)
@pytest.mark.parametrize("path", ["/v1/judge", "/v1/rewards", "/get_reward"])
def test_a_page_cannot_make_the_service_judge_or_store(start, path, headers, status, fragment):
    url, service, recorded = start(longer_wins())
    body = {"/v1/judge": BODY, "/v1/rewards": {"prompts": ["q"], "completions": [["a", "bb"]]},
            "/get_reward": {"query": ["qa", "qbb"], "prompts": ["q", "q"]}}[path]
    r = httpx.post(url + path, content=json.dumps(body), headers=headers, timeout=10)
    assert r.status_code == status and fragment in r.json()["error"], r.text
    assert "\n" not in r.json()["error"] and set(r.json()) == {"error"}  # the service's shape, not {"detail": ...}
    assert recorded == [] and service.counters["judgments"] == 0 and service.backend.calls == []
    assert f"reflectrm_rejected_{status}_total 1" in httpx.get(f"{url}/metrics").text


@pytest.mark.parametrize("headers", [
    pytest.param({}, id="no-origin"),  # TRL, OpenRLHF, verl, curl
    pytest.param({"Origin": "http://127.0.0.1:{port}"}, id="own-page"),
    pytest.param({"Host": "localhost:{port}"}, id="localhost"),
    pytest.param({"Host": "LOCALHOST.:{port}"}, id="localhost-upper-case-dot"),
    pytest.param({"Content-Type": "application/json; charset=utf-8"}, id="json-charset"),
    pytest.param({"Sec-Fetch-Site": "same-origin", "Origin": "http://127.0.0.1:{port}"}, id="fetch-metadata"),
])
def test_local_clients_are_judged_and_stored_as_before(start, headers):
    url, _, recorded = start(longer_wins())
    sent = {"Content-Type": "application/json", **{k: v.format(port=_port(url)) for k, v in headers.items()}}
    r = httpx.post(f"{url}/v1/judge", content=json.dumps(BODY), headers=sent, timeout=30)
    assert r.status_code == 200 and r.json()["verdict"] == 2 and recorded == [(1, False)]


def test_a_rebinding_page_cannot_read_health_or_metrics_either(start):
    url, _, _ = start(longer_wins())
    for path in ("/health", "/metrics", "/no-such-route"):
        r = httpx.get(url + path, headers={"Host": f"rebind.evil.example:{_port(url)}"})
        assert r.status_code == 403 and "rebind.evil.example" in r.json()["error"]
    assert httpx.get(f"{url}/health").status_code == 200


def test_operator_names_and_origins(start):
    access = AccessConfig(allowed_hosts=("rm.lab.example",), allowed_origins=("https://dash.lab.example",))
    url, _, recorded = start(longer_wins(), access=access)
    ok = httpx.post(f"{url}/v1/judge", json=BODY, headers={"Host": "rm.lab.example",
                                                          "Origin": "https://dash.lab.example"}, timeout=30)
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == "https://dash.lab.example"
    preflight = httpx.options(f"{url}/v1/judge", headers={"Origin": "https://dash.lab.example",
                                                           "Access-Control-Request-Method": "POST",
                                                           "Access-Control-Request-Headers": "content-type"})
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "https://dash.lab.example"
    foreign = httpx.options(f"{url}/v1/judge", headers={"Origin": "https://evil.example",
                                                         "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in foreign.headers  # the browser then never sends the POST
    assert httpx.post(f"{url}/v1/judge", json=BODY, headers={"Origin": "https://evil.example"}).status_code == 403
    assert recorded == [(1, False)]


@pytest.mark.parametrize(("head", "status"), [
    pytest.param(b"Host: evil.example\r\nContent-Type: application/json\r\n", 403, id="foreign-host"),
    pytest.param(b"Host: 127.0.0.1\r\nOrigin: https://evil.example\r\nContent-Type: application/json\r\n", 403,
                 id="foreign-origin"),
    pytest.param(b"Host: 127.0.0.1\r\nContent-Type: text/plain\r\n", 415, id="text-plain"),
    pytest.param(b"Host: 127.0.0.1\r\nHost: evil.example\r\nContent-Type: application/json\r\n", 403, id="two-hosts"),
    pytest.param(b"Content-Type: application/json\r\n", 403, id="no-host"),
])
def test_the_refusal_comes_before_the_body(start, head, status):
    # headers and 1 byte of a 100-byte body that never comes: an answer at once, not a 408 after the body timeout
    url, service, recorded = start(longer_wins(), body_timeout_s=30)
    opened = time.monotonic()
    with socket.create_connection(("127.0.0.1", _port(url)), timeout=10) as s:
        s.sendall(b"POST /v1/judge HTTP/1.1\r\n" + head + b"Content-Length: 100\r\n\r\n{")
        status_line, answer = one_response(s)
    assert status_line.startswith(f"HTTP/1.1 {status}") and time.monotonic() - opened < 10, status_line
    assert json.loads(answer)["error"] and recorded == []


def one_response(s: socket.socket) -> tuple[str, bytes]:
    """The status line and body of one response (the connection may stay open: its unread body is dropped)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(4096) or b"\r\n\r\n"  # closed early: what came is all there is
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next((line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(
        b"content-length:")), b"0"))
    while len(body) < length and (chunk := s.recv(4096)):
        body += chunk
    return head.split(b"\r\n")[0].decode(), body[:length]


class _Stop(Exception):
    pass


@pytest.mark.parametrize(("host", "token", "warned"), [
    pytest.param("0.0.0.0", None, True, id="every-interface-no-token"),
    pytest.param("192.168.1.20", None, True, id="lan-address-no-token"),
    pytest.param("0.0.0.0", "s3cret-0123456789abcdef", False, id="every-interface-token"),
    pytest.param("127.0.0.1", None, False, id="loopback"),
    pytest.param("localhost", None, False, id="localhost"),
])
def test_serve_warns_in_one_line_when_it_listens_beyond_loopback_without_a_token(monkeypatch, caplog, host, token,
                                                                                 warned):
    from reflectrm_app.cli import main

    monkeypatch.delenv("REFLECTRM_SERVE_TOKEN", raising=False)
    if token:
        monkeypatch.setenv("REFLECTRM_SERVE_TOKEN", token)

    def stop(*args, **kwargs):  # the model would load next: the warning is already out
        raise _Stop()

    monkeypatch.setattr(reflectrm.backends, "load_backend", stop)
    with caplog.at_level("WARNING"), pytest.raises(_Stop):
        main(["serve", "--host", host, "--port", "0"])
    lines = [r.getMessage() for r in caplog.records if "listens on" in r.getMessage()]
    assert len(lines) == int(warned) and all("set REFLECTRM_SERVE_TOKEN" in line for line in lines), lines


def test_serve_refuses_a_malformed_allowed_host_before_loading(capsys):
    from reflectrm_app.cli import main

    assert main(["serve", "--allowed-host", "http://lab.example.com"]) == 2
    assert "is not a host name: give the name alone" in capsys.readouterr().err
