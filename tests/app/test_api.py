"""The named API over a real (in-process) Gradio server: input errors are one readable line for the client,
through `gradio_client` or a raw HTTP call, and the server logs no traceback for them."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator

import pytest

from reflectrm_app.ui.blocks import build_app
from reflectrm.backends import ScriptedBackend
from tests.app.browser import free_port
from tests.app.conftest import make_services
from tests.db.helpers import scripted_output

gradio_client = pytest.importorskip("gradio_client")


@pytest.fixture(scope="module")
def api_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    services = make_services(f"sqlite:///{tmp_path_factory.mktemp('api') / 'app.db'}", ScriptedBackend(scripted_output))
    demo = build_app(services)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True,
                            show_error=False)
    yield url
    demo.close()
    services.close()


def raw_call(url: str, api: str, data: list) -> str:
    """The event stream a plain HTTP client gets for `data` sent to `api`."""
    request = urllib.request.Request(f"{url}gradio_api/call/{api}", data=json.dumps({"data": data}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        event = json.loads(answer.read())["event_id"]
    with urllib.request.urlopen(f"{url}gradio_api/call/{api}/{event}", timeout=120) as answer:
        return answer.read().decode()


@pytest.mark.parametrize(("args", "fragment"), [
    pytest.param(("q", "a", "b", "", "reflectrm", "abc"), "seed must be a whole number, got 'abc'", id="seed-text"),
    pytest.param(("q", "a", "b", "", "reflectrm", 0, 7), "label must be 0 (unknown), 1 or 2, got 7", id="label"),
])
def test_a_bad_argument_through_gradio_client_is_one_readable_line(api_url: str, args: tuple, fragment: str,
                                                                   capfd: pytest.CaptureFixture) -> None:
    client = gradio_client.Client(api_url, verbose=False)
    with pytest.raises(Exception) as caught:  # gradio_client's AppError
        client.predict(*args, api_name="/judge")
    assert fragment in str(caught.value) and "verbose" not in str(caught.value), str(caught.value)
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize(("data", "fragment"), [
    pytest.param(["q"], "/judge takes 7 values (query, response_1, response_2, messages, strategy, seed, label), "
                        "got 1", id="too-few-values"),  # used to stream {"error": null} and log a traceback
    pytest.param(["q", "a", "b", "", "reflectrm", "abc", 0], "seed must be a whole number", id="bad-seed"),
])
def test_a_bad_raw_call_streams_the_message_not_null(api_url: str, data: list, fragment: str,
                                                     capfd: pytest.CaptureFixture) -> None:
    stream = raw_call(api_url, "judge", data)
    assert "event: error" in stream and fragment in stream and '"error": null' not in stream, stream
    assert "Traceback" not in capfd.readouterr().err
