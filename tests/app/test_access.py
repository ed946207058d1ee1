"""The workbench over a real (in-process) Gradio server launched as `reflectrm app` launches it (`launch_options`):
a DNS-rebinding Host and another site's page can neither read nor write the store nor upload, and the upload
folder as a whole is bounded; the app's own page and `gradio_client` work as before."""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from reflectrm.backends import ScriptedBackend
from reflectrm_app.services import Services
from reflectrm_app.settings import load_settings
from reflectrm_app.ui.blocks import build_app, launch_options
from tests.app.browser import free_port
from tests.app.conftest import make_services
from tests.db.helpers import scripted_output
from tests.serving.test_server_access import one_response

CAP_MB = 1


@dataclass
class RunningApp:
    url: str
    port: int
    services: Services
    uploads: Path  # Gradio's upload folder (GRADIO_TEMP_DIR) for this app alone


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApp]:
    folder = tmp_path_factory.mktemp("access")
    uploads = folder / "gradio-uploads"
    previous = os.environ.get("GRADIO_TEMP_DIR"), os.environ.get("FORWARDED_ALLOW_IPS")
    os.environ["GRADIO_TEMP_DIR"] = str(uploads)  # read by launch_options and by Gradio's server as it starts
    services = make_services(f"sqlite:///{folder / 'app.db'}", ScriptedBackend(scripted_output),
                             upload_folder_max_mb=CAP_MB, allowed_hosts="workbench.lab.example")
    demo = build_app(services)
    port = free_port()
    try:
        _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True,
                                **{**launch_options(services.runtime.settings), "show_error": False})
        yield RunningApp(url=url, port=port, services=services, uploads=uploads)
    finally:
        demo.close()
        services.close()
        for name, value in zip(("GRADIO_TEMP_DIR", "FORWARDED_ALLOW_IPS"), previous):
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def send(app: RunningApp, method: str, path: str, *, headers: dict[str, str] | None = None,
         body: bytes | None = None) -> tuple[int, str]:
    """(status, body text) of one request over a raw socket: the Host header is exactly the one given."""
    head = {"Host": f"127.0.0.1:{app.port}", **(headers or {})}
    if body is not None:
        head.setdefault("Content-Length", str(len(body)))
    lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in head.items() if v is not None), "", ""]
    with socket.create_connection(("127.0.0.1", app.port), timeout=30) as s:
        s.sendall("\r\n".join(lines).encode("latin-1") + (body or b""))
        status_line, answer = one_response(s)
    return int(status_line.split()[1]), answer.decode("utf-8", "replace")


def multipart(name: str, data: bytes) -> tuple[dict[str, str], bytes]:
    boundary = "reflectrm-test-boundary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"{name}\"\r\n"
            f"Content-Type: text/csv\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    return {"Content-Type": f"multipart/form-data; boundary={boundary}"}, body


def stored_files(app: RunningApp) -> list[Path]:
    return sorted(p for p in app.uploads.rglob("*") if p.is_file()) if app.uploads.exists() else []


def judge_call(app: RunningApp, headers: dict[str, str]) -> tuple[int, str]:
    data = json.dumps({"data": ["What is 2+2?", "4", "5", "", "reflectrm", 0, 0]}).encode()
    return send(app, "POST", "/gradio_api/call/judge", headers={"Content-Type": "application/json", **headers},
                body=data)


# Requests a rebinding page or another site's page can make; the trap: Gradio answers any Host, and keeps any upload.
HOSTILE = [
    pytest.param("GET", "/", {"Host": "rebind.evil.example:{port}"}, "DNS-rebinding", id="rebinding-page"),
    pytest.param("GET", "/gradio_api/info", {"Host": "127.0.0.1.evil.example"}, "DNS-rebinding",
                 id="rebinding-reads-the-api"),
    pytest.param("GET", "/config", {"Host": "localhost.attacker:{port}"}, "DNS-rebinding", id="rebinding-config"),
    pytest.param("GET", "/", {"Host": ""}, "not a name of this service", id="empty-host"),
    pytest.param("POST", "/gradio_api/call/judge", {"Host": "rebind.evil.example"}, "DNS-rebinding",
                 id="rebinding-writes"),
    pytest.param("POST", "/gradio_api/call/judge", {"Origin": "https://evil.example"}, "Origin 'https://evil.example'",
                 id="cross-site-write"),
    pytest.param("POST", "/gradio_api/queue/join", {"Origin": "null"}, "Origin 'null'", id="sandboxed-frame"),
    pytest.param("POST", "/gradio_api/upload", {"Origin": "https://evil.example"}, "Origin", id="cross-site-upload"),
    pytest.param("POST", "/gradio_api/upload", {"Sec-Fetch-Site": "cross-site"}, "cross-site",
                 id="cross-site-upload-without-origin"),
    pytest.param("POST", "/gradio_api/upload", {"Origin": "http://localhost:1"}, "Origin", id="another-local-page"),
    pytest.param("POST", "/gradio_api/process_recording", {"Origin": "https://evil.example"}, "Origin",
                 id="cross-site-recording"),
]


@pytest.mark.parametrize(("method", "path", "headers", "fragment"), HOSTILE)
def test_a_hostile_page_gets_403_and_nothing_is_stored_or_uploaded(app, method, path, headers, fragment):
    before, files = app.services.runtime.store.counts(), stored_files(app)
    sent = {k: v.format(port=app.port) for k, v in headers.items()}
    if path.endswith(("upload", "recording")):
        kind, body = multipart("pairs.csv", b"query,response_1,response_2\nq,a,b\n")
        sent = {**kind, **sent}
    elif method == "POST":
        sent, body = {"Content-Type": "application/json", **sent}, json.dumps(
            {"data": ["What is 2+2?", "4", "5", "", "reflectrm", 0, 0]}).encode()
    else:
        body = None
    status, text = send(app, method, path, headers=sent, body=body)
    assert status == 403 and fragment in text and text.count("\n") == 1, text
    assert app.services.runtime.store.counts() == before and stored_files(app) == files


@pytest.mark.parametrize("headers", [
    pytest.param({}, id="no-origin"),  # gradio_client, curl
    pytest.param({"Origin": "http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"}, id="own-page"),
    pytest.param({"Host": "localhost:{port}", "Origin": "http://localhost:{port}"}, id="own-page-by-localhost"),
    pytest.param({"Host": "workbench.lab.example"}, id="configured-name"),
])
def test_the_apps_own_page_and_clients_still_judge(app, headers):
    before = app.services.runtime.store.counts()["judgments"]
    status, text = judge_call(app, {k: v.format(port=app.port) for k, v in headers.items()})
    assert status == 200 and "event_id" in text, text
    event = json.loads(text)["event_id"]
    with urllib.request.urlopen(f"{app.url}gradio_api/call/judge/{event}", timeout=120) as answer:
        stream = answer.read().decode()
    assert "event: complete" in stream, stream
    assert app.services.runtime.store.counts()["judgments"] == before + 1


def test_the_page_itself_opens_for_a_link_from_another_site(app):
    status, text = send(app, "GET", "/", headers={"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"})
    assert status == 200 and "<html" in text.lower()


def test_the_upload_folder_is_bounded_as_a_whole(app):
    own = {"Origin": f"http://127.0.0.1:{app.port}"}
    kind, first = multipart("a.csv", b"x" * (600 << 10))
    status, text = send(app, "POST", "/gradio_api/upload", headers={**kind, **own}, body=first)
    assert status == 200 and len(json.loads(text)) == 1, text
    kind, second = multipart("b.csv", b"y" * (600 << 10))  # 1.2 MB in all: over the 1 MB cap
    status, text = send(app, "POST", "/gradio_api/upload", headers={**kind, **own}, body=second)
    assert status == 413 and "REFLECTRM_UPLOAD_FOLDER_MAX_MB" in text and str(app.uploads) in text, text
    assert sum(p.stat().st_size for p in stored_files(app)) < CAP_MB << 20  # the second was never written
    status, text = send(app, "POST", "/gradio_api/upload", headers={**kind, **own, "Transfer-Encoding": "chunked",
                                                                     "Content-Length": None}, body=b"0\r\n\r\n")
    assert status == 411 and "Content-Length" in text, text


def test_gradio_client_calls_as_before(app):
    gradio_client = pytest.importorskip("gradio_client")
    before = app.services.runtime.store.counts()["judgments"]
    result = gradio_client.Client(app.url, verbose=False).predict("What is 2+2?", "4", "5", "", "reflectrm", 0, 0,
                                                                  api_name="/judge")
    assert result["judgment_id"] >= 1 and app.services.runtime.store.counts()["judgments"] == before + 1


def test_settings_refuse_a_malformed_entry_naming_the_variable():
    from reflectrm.errors import ConfigError

    with pytest.raises(ConfigError, match=r"REFLECTRM_ALLOWED_HOSTS.*not a host name"):
        load_settings(allowed_hosts="lab.example.com,http://x")
    with pytest.raises(ConfigError, match=r"REFLECTRM_ALLOWED_ORIGINS.*not an origin"):
        load_settings(allowed_origins="lab.example.com")
    settings = load_settings(allowed_hosts=" a.example , .b.example ", host="myhost")
    assert settings.app.access().allowed_hosts == ("a.example", ".b.example", "myhost")  # the bind name too


def test_a_foreign_host_is_refused_even_through_urllib(app):
    request = urllib.request.Request(app.url, headers={"Host": "evil.example"})
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=30)
    assert caught.value.code == 403


class _Stop(Exception):
    pass


@pytest.mark.parametrize(("host", "auth", "warned"), [
    pytest.param("0.0.0.0", "", True, id="every-interface-no-login"),
    pytest.param("0.0.0.0", "ana:secret", False, id="every-interface-login"),
    pytest.param("127.0.0.1", "", False, id="loopback"),
])
def test_the_app_warns_in_one_line_when_it_listens_beyond_loopback_without_a_login(
        monkeypatch, caplog, no_reflectrm_environment, host, auth, warned):
    from reflectrm_app.cli import main
    from reflectrm_app.services import Services

    monkeypatch.setenv("REFLECTRM_AUTH", auth)

    def stop(settings):  # the services would start next: the warning is already out
        raise _Stop()

    monkeypatch.setattr(Services, "start", stop)
    with caplog.at_level("WARNING"), pytest.raises(_Stop):
        main(["app", "--host", host, "--allowed-host", "lab.example.com"])
    lines = [r.getMessage() for r in caplog.records if "listens on" in r.getMessage()]
    assert len(lines) == int(warned) and all("REFLECTRM_AUTH" in line for line in lines), lines
