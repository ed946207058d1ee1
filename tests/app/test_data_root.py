"""The app reads files only inside its data root, and its messages never quote what a file holds.

A reviewer (or a web page through one) types a path into the Evaluate tab or the Train tab's base model: the
app must not open a file outside the operator's data folder, must not say whether such a path exists, must
not block on a FIFO or device, and a refusal of a bad row inside the root names the row and the field, never
the cell. Real SQLite stores, real files, FIFOs and links; the judge is the scripted one (nothing is judged).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from reflectrm.backends import ScriptedBackend
from reflectrm.errors import InputError
from reflectrm.files.inputs import MAX_PATH_CHARS
from reflectrm_app.services import Services
from reflectrm_app.services.training import TrainingService
from tests.app.conftest import make_services
from tests.db.helpers import scripted_output

SECRET = "SECRET-7f3a-do-not-echo"
GOOD = {"query": "What is 2+2?", "response_1": "4", "response_2": "5", "label": 1}


@pytest.fixture
def world(tmp_path: Path) -> Path:
    """tmp/data (the root: good files, links in and out, a FIFO) beside tmp/outside (the server's other files)."""
    root, outside = tmp_path / "data", tmp_path / "outside"
    (root / "bench" / "deep").mkdir(parents=True)
    (outside / "models" / "secret-model").mkdir(parents=True)
    good = json.dumps(GOOD) + "\n"
    (outside / "secrets.jsonl").write_text(good)
    (root / "pairs.jsonl").write_text(good)
    (root / "bench" / "deep" / "pairs.jsonl").write_text(good)
    (root / "link-in.jsonl").symlink_to(root / "pairs.jsonl")  # a link that stays inside: allowed
    (root / "link-out.jsonl").symlink_to(outside / "secrets.jsonl")
    (root / "link-dir").symlink_to(outside)
    (root / "link-zero.jsonl").symlink_to("/dev/zero")
    (root / "linky" / "a" / "b").mkdir(parents=True)
    (root / "linky" / "a" / "b" / "deep.jsonl").symlink_to(outside / "secrets.jsonl")  # a link out, deep down
    os.mkfifo(root / "pipe.jsonl")
    (root / "with-pipe").mkdir()
    os.mkfifo(root / "with-pipe" / "state.json")
    (root / "models" / "mine").mkdir(parents=True)
    return tmp_path


@pytest.fixture
def app_services(world: Path) -> Iterator[Services]:
    s = make_services(f"sqlite:///{world / 'app.db'}", ScriptedBackend(scripted_output), data_root=world / "data")
    yield s
    s.close()


def _refusal(services: Services, typed: str) -> str:
    evals = services.evaluation
    with pytest.raises(InputError) as caught:
        evals.run(evals.request("file", data=typed, limit=1), cancel=threading.Event())
    assert evals.evals.runs() == []  # nothing was started, nothing stored
    return str(caught.value)


OUTSIDE = "outside the app's data folder"

# Paths a hostile user types into "Local file or folder"; {w} is the folder holding data/ and outside/.
HOSTILE_PATHS = [
    pytest.param("../outside/secrets.jsonl", OUTSIDE, id="dot-dot-to-an-existing-file"),
    pytest.param("../outside/missing.jsonl", OUTSIDE, id="dot-dot-to-a-missing-file"),  # same words: no oracle
    pytest.param("{w}/outside/secrets.jsonl", OUTSIDE, id="absolute-path-outside"),
    pytest.param("/etc/passwd", OUTSIDE, id="etc-passwd"),
    pytest.param("/dev/zero", OUTSIDE, id="dev-zero"),  # trap: read forever
    pytest.param("~/.ssh/id_rsa", OUTSIDE, id="home-folder"),
    pytest.param("bench/../../outside/secrets.jsonl", OUTSIDE, id="dot-dot-after-a-real-folder"),
    pytest.param("link-out.jsonl", OUTSIDE, id="file-link-out"),  # trap: the name lies inside the root
    pytest.param("link-dir/secrets.jsonl", OUTSIDE, id="folder-link-out"),
    pytest.param("link-zero.jsonl", OUTSIDE, id="link-to-dev-zero"),
    pytest.param("linky", "links outside", id="folder-holding-a-deep-link-out"),  # trap: only the top is checked
    pytest.param("pairs\x00.jsonl", "control character", id="nul-byte"),
    pytest.param("pairs.jsonl\n../../etc/passwd", "control character", id="line-break"),
    pytest.param("a/" * (MAX_PATH_CHARS // 2 + 1), "over the limit", id="over-long"),
    pytest.param("pipe.jsonl", "FIFO", id="fifo-inside-the-root"),  # trap: opening it blocks
    pytest.param("with-pipe", "FIFO", id="folder-holding-a-fifo"),  # trap: a datasets folder's state.json
]


@pytest.mark.parametrize(("typed", "expected"), HOSTILE_PATHS)
def test_a_hostile_path_is_refused_in_one_line_that_names_nothing_outside(app_services: Services, world: Path,
                                                                         typed: str, expected: str) -> None:
    message = _refusal(app_services, typed.replace("{w}", str(world)))
    assert expected in message
    assert "\n" not in message and len(message) < 400
    for leak in (str(world / "outside"), "secrets", "passwd", "id_rsa", "/dev/zero"):
        assert leak not in message


def test_an_outside_path_is_refused_alike_whether_or_not_it_exists(app_services: Services, world: Path) -> None:
    there = _refusal(app_services, str(world / "outside" / "secrets.jsonl"))
    absent = _refusal(app_services, str(world / "outside" / "no-such.jsonl"))
    absent_folder = _refusal(app_services, str(world / "no-such-folder" / "x.jsonl"))
    assert there == absent == absent_folder


@pytest.mark.parametrize("typed", [
    pytest.param("pairs.jsonl", id="relative-to-the-root"),
    pytest.param("{w}/data/pairs.jsonl", id="absolute-inside"),
    pytest.param("link-in.jsonl", id="a-link-that-stays-inside"),
    pytest.param("bench/deep/pairs.jsonl", id="a-nested-file"),
])
def test_a_file_inside_the_root_is_read(app_services: Services, world: Path, typed: str) -> None:
    evals = app_services.evaluation
    request = evals.request("file", data=typed.replace("{w}", str(world)), limit=1)
    assert request.data == world / "data" / (typed if "/" in typed and "{w}" not in typed else "pairs.jsonl")
    assert len(request.load().pairs) == 1


def test_a_missing_data_root_says_so_without_reading_anything(world: Path) -> None:
    s = make_services(f"sqlite:///{world / 'other.db'}", ScriptedBackend(scripted_output),
                      data_root=world / "no-such-root")
    try:
        message = _refusal(s, "pairs.jsonl")
    finally:
        s.close()
    assert "data folder is not there" in message and "REFLECTRM_DATA_ROOT" in message


def test_the_default_root_is_data_beside_a_sqlite_store(world: Path) -> None:
    s = make_services(f"sqlite:///{world / 'app.db'}", ScriptedBackend(scripted_output))
    try:
        assert s.runtime.data_root == (world / "data").resolve()
    finally:
        s.close()


def test_a_stored_run_outside_the_root_does_not_resume_from_the_app(app_services: Services, world: Path) -> None:
    # a run `reflectrm eval --data` made from the operator's shell names a file the app may not read
    evals = app_services.evaluation
    run_id, _ = evals.evals.kept.start(run_key="k", values={
        "model": "m", "model_revision": "", "benchmark": "file:secrets.jsonl", "data": "", "partial": "",
        "items_total": 1, "config": {"benchmark": "file", "data": str(world / "outside" / "secrets.jsonl")}})
    evals.evals.kept.finish(run_id, status="stopped", error="")
    with pytest.raises(InputError, match=OUTSIDE):
        evals.resume(run_id, cancel=threading.Event())


# --- the Train tab's base model --------------------------------------------------------------------------------

BASE_MODELS = [
    pytest.param("/etc", None, id="a-system-folder"),
    pytest.param("{w}/outside/models/secret-model", None, id="a-model-folder-outside"),
    pytest.param("../outside/models/secret-model", None, id="dot-dot"),
    pytest.param("link-dir/models/secret-model", None, id="a-link-out"),
    pytest.param("models/mine", "{w}/data/models/mine", id="a-folder-in-the-root"),
    pytest.param("{w}/runs/run-1/checkpoint-2", "{w}/runs/run-1/checkpoint-2", id="a-checkpoint-of-a-run"),
    pytest.param("Qwen/Qwen3-0.6B", "Qwen/Qwen3-0.6B", id="a-hub-id"),
]


@pytest.mark.parametrize(("typed", "expected"), BASE_MODELS)
def test_a_base_model_path_is_confined_like_a_data_file(app_services: Services, world: Path, typed: str,
                                                        expected: str | None) -> None:
    (world / "runs" / "run-1" / "checkpoint-2").mkdir(parents=True)
    training: TrainingService = app_services.training
    assert training.runs_dir == (world / "runs").resolve()
    typed = typed.replace("{w}", str(world))
    if expected is None:
        with pytest.raises(InputError, match=OUTSIDE) as caught:
            training.base_model(typed)
        assert "secret-model" not in str(caught.value) and "\n" not in str(caught.value)
    else:
        assert training.base_model(typed) == expected.replace("{w}", str(world.resolve()))


# --- bad cells: the message names the row and the field, never the value ----------------------------------------

def _row(**changes: object) -> str:
    return json.dumps({**GOOD, **changes})


# Files inside the root whose bad cell holds a secret; the trap each covers: a message that quoted the cell.
SECRET_FILES = [
    pytest.param("label.jsonl", _row(label=SECRET), "label", id="label-text"),
    pytest.param("label.csv", f"query,response_1,response_2,label\nq,a,b,{SECRET}\n", "label", id="label-csv-cell"),
    pytest.param("tie.jsonl", _row(tie=SECRET, label=None), "'tie'", id="tie-text"),
    pytest.param("role.jsonl", json.dumps({"messages": [{"role": SECRET, "content": "hi"}],
                                           "response_1": "a", "response_2": "b"}), "role", id="message-role"),
    pytest.param("turn.jsonl", json.dumps({"messages": [SECRET], "response_1": "a", "response_2": "b"}),
                 "message 0", id="message-not-an-object"),
    pytest.param("dup.jsonl", _row(id=SECRET) + "\n" + _row(id=SECRET), "also row 1", id="duplicate-id"),
    pytest.param("bytes.jsonl", b'{"query": "\xff' + SECRET.encode() + b'"}', "UTF-8", id="not-utf8"),
    pytest.param("json.jsonl", '{"query": "' + SECRET, "not valid JSON", id="unterminated-json"),
    pytest.param("numeric.jsonl", _row(label=7.25), "label", id="a-number-that-is-no-label"),
]


@pytest.mark.parametrize(("name", "content", "expected"), SECRET_FILES)
def test_a_bad_cell_is_named_by_row_and_field_not_quoted(app_services: Services, world: Path, name: str,
                                                         content: str | bytes, expected: str) -> None:
    path = world / "data" / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    message = _refusal(app_services, name)
    assert expected in message and ("row" in message or "line" in message or "offset" in message)
    assert SECRET not in message and "7.25" not in message and "\n" not in message


def test_a_benchmark_file_with_a_secret_label_is_refused_without_it(app_services: Services, world: Path) -> None:
    row = {"pair_id": "p1", "question": "q", "response_A": "a", "response_B": "b", "label": SECRET, "source": "x"}
    (world / "data" / "jb.jsonl").write_text(json.dumps(row) + "\n")
    evals = app_services.evaluation
    with pytest.raises(InputError) as caught:
        evals.run(evals.request("judgebench", data="jb.jsonl"), cancel=threading.Event())
    assert "label" in str(caught.value) and SECRET not in str(caught.value)


# --- the same through the real HTTP route: the Evaluate tab's Run, as the page posts it ---------------------------

@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int, Path]]:
    """(app URL, the Run event's index, the world) of a real Gradio server over a data root."""
    from reflectrm_app.ui.blocks import build_app, launch_options
    from tests.app.browser import free_port

    world = tmp_path_factory.mktemp("served")
    (world / "data").mkdir()
    (world / "outside").mkdir()
    (world / "outside" / "secrets.jsonl").write_text(json.dumps(GOOD) + "\n")
    (world / "data" / "link-out.jsonl").symlink_to(world / "outside" / "secrets.jsonl")
    os.mkfifo(world / "data" / "pipe.jsonl")
    (world / "data" / "label.jsonl").write_text(_row(label=SECRET) + "\n")
    services = make_services(f"sqlite:///{world / 'app.db'}", ScriptedBackend(scripted_output),
                             data_root=world / "data")
    demo = build_app(services)
    [run_event] = [i for i, f in demo.fns.items() if getattr(f.fn, "__name__", "") == "launch"]
    previous = os.environ.get("GRADIO_TEMP_DIR")
    os.environ["GRADIO_TEMP_DIR"] = str(world / "uploads")
    try:
        _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(),
                                quiet=True, **launch_options(services.runtime.settings))
        yield url, run_event, world
    finally:
        demo.close()
        services.close()
        if previous is None:
            os.environ.pop("GRADIO_TEMP_DIR", None)
        else:
            os.environ["GRADIO_TEMP_DIR"] = previous


def _run_over_http(url: str, event: int, typed: str, session: str) -> str:
    """The Evaluate tab's status line after Run with `typed` as the local file (the queue's SSE answer)."""
    import urllib.request

    body = json.dumps({"data": ["file", typed, "", 1, ["reflectrm"], False], "fn_index": event,
                       "session_hash": session, "event_data": None, "trigger_id": None}).encode()
    urllib.request.urlopen(urllib.request.Request(f"{url}gradio_api/queue/join", data=body,
                                                  headers={"Content-Type": "application/json"}), timeout=60).read()
    with urllib.request.urlopen(f"{url}gradio_api/queue/data?session_hash={session}", timeout=120) as stream:
        for line in stream:
            if line.startswith(b"data:") and b'"process_completed"' in line:
                return json.loads(line[5:])["output"]["data"][0]
    raise AssertionError("the queue closed without an answer")


@pytest.mark.parametrize(("typed", "expected"), [
    pytest.param("/etc/passwd", OUTSIDE, id="http-etc-passwd"),
    pytest.param("{w}/outside/secrets.jsonl", OUTSIDE, id="http-absolute-outside"),
    pytest.param("link-out.jsonl", OUTSIDE, id="http-link-out"),
    pytest.param("pipe.jsonl", "FIFO", id="http-fifo"),  # trap: the worker thread blocks for good
    pytest.param("label.jsonl", "row 1", id="http-secret-cell"),
])
def test_the_real_route_refuses_in_one_line_and_never_echoes(served: tuple[str, int, Path], typed: str,
                                                             expected: str, request: pytest.FixtureRequest) -> None:
    url, event, world = served
    status = _run_over_http(url, event, typed.replace("{w}", str(world)), session=request.node.callspec.id)
    assert status.startswith("error:") and expected in status and "\n" not in status
    assert SECRET not in status and "secrets" not in status and str(world / "outside") not in status


# --- the CLI is the operator's own shell: unconfined, and its messages still point at the row and field ----------

@pytest.mark.parametrize(("name", "content", "expected"), [
    pytest.param("label.jsonl", _row(label=SECRET) + "\n", "row 1: label must be 1 or 2", id="cli-label"),
    pytest.param("dup.jsonl", _row(id=SECRET) + "\n" + _row(id=SECRET) + "\n", "row 2: its id is also row 1",
                 id="cli-duplicate-id"),
])
def test_the_cli_reads_any_path_and_names_the_row_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            name: str, content: str, expected: str) -> None:
    from reflectrm_app.cli import main

    path = tmp_path / "anywhere" / name  # no data root applies to `reflectrm eval --data`
    path.parent.mkdir()
    path.write_text(content)
    code = main(["eval", "--benchmark", "file", "--data", str(path), "--db", f"sqlite:///{tmp_path / 's.db'}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and expected in err and str(path) in err and SECRET not in err and "\n" not in err
