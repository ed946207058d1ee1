"""Honest refusals at start-up and on the wire: the reward service's token, the app's login users, misspelt
REFLECTRM_ variables, and every refusal of the reward service in its own error shape.

Each start-up refusal is exit 2 with one line on stderr, no traceback, nothing of the secret in it, and nothing
started (the model is never loaded). Each service refusal is one line in {"error": ...}, over real HTTP."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.serving.test_server import longer_wins, start  # noqa: F401 - `start` is the fixture

GOOD_TOKEN = "0123456789abcdefXYZ_-"  # 21 characters: what secrets.token_urlsafe() looks like, shorter


class _Started(Exception):
    """Raised where the command would load the model: everything before it was accepted."""


def _stop_before_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    import reflectrm.backends
    from reflectrm_app.services import Services

    def started(*_: object, **__: object) -> None:
        raise _Started()

    monkeypatch.setattr(reflectrm.backends, "load_backend", started)  # serve: the judge would load next
    monkeypatch.setattr(Services, "start", started)  # app: the services would start next


def _one_line_refusal(capsys: pytest.CaptureFixture[str], code: int, *secrets: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for secret in secrets:
        assert secret not in err, err  # a token or password is never shown
    return lines[0]


# --- the reward service's bearer token (`reflectrm serve`) ------------------------------------------------------

# Each: the environment, extra serve flags, what the one line must say, the secret it must not show.
# The trap in each: a service that starts open (a blank or misnamed token read as "no token"), or with a token a
# header cannot carry, or one guessed in minutes.
TOKENS = [
    pytest.param({"REFLECTRM_SERVE_TOKEN": ""}, [], "REFLECTRM_SERVE_TOKEN is set but blank", None, id="blank"),
    pytest.param({"REFLECTRM_SERVE_TOKEN": "   \t "}, [], "is set but blank", None, id="whitespace-only"),
    pytest.param({"REFLECTRM_SERVE_TOKEN": GOOD_TOKEN + "\n"}, [], "line break or control character", GOOD_TOKEN,
                 id="trailing-newline"),  # `echo $(cat token)`-style files keep their line end
    pytest.param({"REFLECTRM_SERVE_TOKEN": GOOD_TOKEN[:8] + "\x1b[31m" + GOOD_TOKEN[8:]}, [], "control character",
                 GOOD_TOKEN[8:], id="escape-sequence"),
    pytest.param({"REFLECTRM_SERVE_TOKEN": "s3cret pass phrase!"}, [], "space", "pass phrase", id="inner-space"),
    pytest.param({"REFLECTRM_SERVE_TOKEN": "s3cret"}, [], "6 characters, under the minimum of 16",
                 "s3cret", id="too-short"),
    pytest.param({"REFLECTRM_TOKEN": GOOD_TOKEN}, [], "did you mean REFLECTRM_SERVE_TOKEN?", GOOD_TOKEN,
                 id="misnamed-variable"),
    pytest.param({"REFLECTRM_SERVE_TOKN": GOOD_TOKEN}, [], "did you mean REFLECTRM_SERVE_TOKEN?", GOOD_TOKEN,
                 id="misspelt-variable"),
    pytest.param({}, ["--token-env", "LAB_TOKEN"], "--token-env 'LAB_TOKEN' names a variable that is not set", None,
                 id="token-env-unset"),
    pytest.param({"LAB_TOKEN": "short"}, ["--token-env", "LAB_TOKEN"], "LAB_TOKEN is 5 characters", "short",
                 id="token-env-too-short"),
]


@pytest.mark.parametrize(("env", "flags", "fragment", "secret"), TOKENS)
def test_serve_refuses_a_token_that_would_not_guard_it(monkeypatch, capsys, no_reflectrm_environment, env, flags,
                                                       fragment, secret):
    from reflectrm_app.cli import main

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    _stop_before_the_model(monkeypatch)
    line = _one_line_refusal(capsys, main(["serve", "--port", "0", *flags]), *([secret] if secret else []))
    assert fragment in line and ("secrets.token_urlsafe" in line or "variable" in line or "rename" in line), line


@pytest.mark.parametrize("env", [
    pytest.param({}, id="no-token-on-loopback"),  # the documented default: open, bound to 127.0.0.1
    pytest.param({"REFLECTRM_SERVE_TOKEN": GOOD_TOKEN}, id="good-token"),
    pytest.param({"LAB_TOKEN": GOOD_TOKEN, "REFLECTRM_DATABASE_URL": "sqlite:///x.db"}, id="token-env-and-settings"),
])
def test_serve_accepts_a_good_token_or_none(monkeypatch, no_reflectrm_environment, env):
    from reflectrm_app.cli import main

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    _stop_before_the_model(monkeypatch)
    with pytest.raises(_Started):
        main(["serve", "--port", "0", *(["--token-env", "LAB_TOKEN"] if "LAB_TOKEN" in env else [])])


# --- the app's login users (`REFLECTRM_AUTH`) and its other variables ------------------------------------------

# The trap: Gradio takes the list as given, so a user named twice logs in with the first password only (the
# second, perhaps the new one, silently refused), and a blank name or password is a login anyone can guess.
LOGINS = [
    pytest.param({"REFLECTRM_AUTH": "ana:first-pw,ben:x,ana:second-pw"}, "'ana' is listed twice", "second-pw",
                 id="user-twice"),
    pytest.param({"REFLECTRM_AUTH": "ana:first-pw,Ana:second-pw"}, "'Ana' is listed twice (as 'ana' before)",
                 "second-pw", id="user-twice-other-case"),
    pytest.param({"REFLECTRM_AUTH": "ana:first-pw, ana :second-pw"}, "has spaces around the name", "second-pw",
                 id="user-with-spaces"),
    pytest.param({"REFLECTRM_AUTH": ":lonely-pw"}, "neither part blank", "lonely-pw", id="blank-user"),
    pytest.param({"REFLECTRM_AUTH": "   :lonely-pw"}, "neither part blank", "lonely-pw", id="whitespace-user"),
    pytest.param({"REFLECTRM_AUTH": "ana:   ,ben:ok-pw"}, "'ana'... must be user:password", "ok-pw",
                 id="whitespace-password"),
    pytest.param({"REFLECTRM_AUTHS": "ana:hidden-pw"}, "did you mean REFLECTRM_AUTH?", "hidden-pw",
                 id="misnamed-auth"),  # the app would start with no login at all
    pytest.param({"REFLECTRM_APP__PROT": "8080"}, "did you mean REFLECTRM_APP__PORT?", None, id="misspelt-nested"),
]


@pytest.mark.parametrize(("env", "fragment", "secret"), LOGINS)
def test_the_app_refuses_login_users_it_cannot_honour(monkeypatch, capsys, no_reflectrm_environment, env, fragment,
                                                       secret):
    from reflectrm_app.cli import main

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    _stop_before_the_model(monkeypatch)
    line = _one_line_refusal(capsys, main(["app", "--port", "0"]), *([secret] if secret else []))
    assert fragment in line, line


def test_the_app_starts_with_distinct_users(monkeypatch, no_reflectrm_environment):
    from reflectrm_app.settings import load_settings, parse_auth

    monkeypatch.setenv("REFLECTRM_AUTH", "ana:a:b, ben:pw")
    assert load_settings().app.credentials() == [("ana", "a:b"), ("ben", "pw")]
    assert parse_auth("") == []
    _stop_before_the_model(monkeypatch)
    from reflectrm_app.cli import main

    with pytest.raises(_Started):
        main(["app", "--port", "0"])


# --- the reward service's refusals, in its own shape ------------------------------------------------------------

JSON = {"Content-Type": "application/json"}

# Each: method, path, headers, body, status, what the one line must say. The trap: FastAPI's own answers
# ({"detail": "Not Found"}), which a client reading "error" shows as no reason at all.
REFUSALS = [
    pytest.param("GET", "/no-such-route", {}, None, 404, "no such route: this service answers POST /v1/judge",
                 id="404-get"),
    pytest.param("POST", "/v1/judg", JSON, b"{}", 404, "no such route", id="404-post-typo"),
    pytest.param("GET", "/v1/judge", {}, None, 405, "method 'GET' is not allowed on this route: use POST",
                 id="405-get-a-post-route"),
    pytest.param("POST", "/health", JSON, b"{}", 405, "use GET", id="405-post-health"),
    pytest.param("PUT", "/v1/rewards", JSON, b"{}", 405, "'PUT' is not allowed", id="405-put"),
    pytest.param("DELETE", "/get_reward", {}, None, 405, "'DELETE' is not allowed", id="405-delete"),
    pytest.param("GET", "/probe?count=not-a-number-SECRET", {}, None, 422, "query.count:", id="422-names-the-field"),
    pytest.param("GET", "/boom", {}, None, 500, "internal error (RuntimeError): see the server's log", id="500"),
    pytest.param("POST", "/v1/judge", {**JSON, "Content-Length": "999999999", "Authorization": f"Bearer {GOOD_TOKEN}"}, b"{}", 413, "over the limit",
                 id="413-declared"),
    pytest.param("POST", "/v1/judge", {"Content-Type": "text/plain"}, b"{}", 415, "application/json", id="415"),
    pytest.param("POST", "/v1/judge", {**JSON, "Origin": "https://evil.example"}, b"{}", 403, "evil.example",
                 id="403-origin"),
    pytest.param("POST", "/v1/judge", {**JSON, "Authorization": "Bearer wrong"}, b"{}", 401, "bearer token",
                 id="401-wrong-token"),
]


@pytest.mark.parametrize(("method", "path", "headers", "body", "status", "fragment"), REFUSALS)
def test_every_refusal_of_the_service_is_its_own_one_line_shape(start, monkeypatch, method, path, headers, body,
                                                                status, fragment):
    from reflectrm.serving import server

    built = server.build_app
    monkeypatch.setattr(server, "build_app", lambda service: _with_probe_routes(built(service)))
    url, service, recorded = start(longer_wins(), token=GOOD_TOKEN, max_body_bytes=4096)
    if "Content-Length" in headers:  # sent by hand: httpx would set its own
        r = _raw(url, method, path, headers, body)
    else:
        r = httpx.request(method, url + path, headers=headers, content=body, timeout=10)
    assert r.status_code == status, r.text
    answer = r.json()
    assert set(answer) == {"error"} and "\n" not in answer["error"], answer  # never {"detail": ...}
    assert fragment in answer["error"], answer
    assert "SECRET" not in answer["error"] and "not-a-number" not in answer["error"]  # a value is never echoed
    assert recorded == [] and service.backend.calls == []
    assert f"reflectrm_rejected_{status}_total 1" in httpx.get(f"{url}/metrics").text


def _with_probe_routes(app):  # noqa: ANN001, ANN202
    """The service's real app with two routes it lacks, to reach FastAPI's own validation and an unexpected failure."""

    @app.get("/probe")
    def probe(count: int) -> dict:
        return {"count": count}

    @app.get("/boom")
    def boom() -> dict:
        raise RuntimeError("a bug with a secret value SECRET")

    return app


def _raw(url: str, method: str, path: str, headers: dict, body: bytes) -> httpx.Response:
    import socket

    host, port = url.removeprefix("http://").split(":")
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n{head}\r\n".encode() + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    body_bytes = rest.split(b"\r\n\r\n", 1)[1]
    return httpx.Response(int(status_line.split()[1]), content=body_bytes)


def test_a_good_request_is_still_answered(start):
    url, _, recorded = start(longer_wins(), token=GOOD_TOKEN)
    r = httpx.post(f"{url}/v1/judge", content=json.dumps({"query": "q", "response_1": "a", "response_2": "bb"}),
                   headers={**JSON, "Authorization": f"Bearer {GOOD_TOKEN}"}, timeout=30)
    assert r.status_code == 200 and r.json()["verdict"] == 2 and recorded == [(1, False)]
