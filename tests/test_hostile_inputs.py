"""Pair files that are not what they seem, through `import`, `judge --input` and `eval`: one line, exit 2,
nothing stored, nothing written, no model loaded, and no cell of the file echoed back.

Every text cell below holds SECRET: a message that names a problem must name the field and the row, never
repeat what the row holds. The reward service's body and the app's typed conversation get the same rules.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import json
import lzma
import sqlite3
import zipfile
from pathlib import Path
from typing import Any

import pytest

from reflectrm_app.cli import main
from reflectrm_db.services import JudgmentStore
from reflectrm.errors import InputError

S = "SECRET cell"
PAIR = {"id": "p1", "query": f"{S} q", "response_1": f"{S} a", "response_2": f"{S} b", "label": 1}
LINE = json.dumps(PAIR)


def _dup(key: str, first: Any, second: Any) -> str:
    """A JSONL line whose object gives `key` twice (json.dumps cannot write one)."""
    rest = json.dumps({k: v for k, v in PAIR.items() if k != key})[1:]
    return f'{{"{key}": {json.dumps(first)}, "{key}": {json.dumps(second)}, {rest}\n'


def _zip(text: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("pairs.jsonl", text)
    return buffer.getvalue()


def _sqlite(path: Path) -> bytes:
    con = sqlite3.connect(path.with_suffix(".tmp"))
    con.execute("CREATE TABLE t (x TEXT)")
    con.execute("INSERT INTO t VALUES (?)", (S,))
    con.commit()
    con.close()
    data = path.with_suffix(".tmp").read_bytes()
    path.with_suffix(".tmp").unlink()
    return data


GOOD = LINE + "\n"
# (file name, its bytes or a function of its path, extra flags, what the one line must say); the trap per id
FILES = [
    # duplicate keys: json.loads kept the last one silently
    pytest.param("dup.jsonl", _dup("label", 1, 2), [], "key 'label' twice", id="duplicate-label-key"),
    pytest.param("dup.jsonl", GOOD + _dup("query", f"{S} 1", f"{S} 2"), [], "row 2: an object gives key 'query' twice",
                 id="duplicate-query-key-names-the-line"),
    pytest.param("dup.jsonl", json.dumps({**PAIR, "messages": [{"role": "user", "content": S}]})
                 .replace('"role": "user"', '"role": "user", "role": "assistant"') + "\n", [], "key 'role' twice",
                 id="duplicate-key-in-a-message"),
    pytest.param("dup.json", "[" + _dup("response_1", S, S).strip() + "]", [], "key 'response_1' twice",
                 id="duplicate-key-in-a-json-array"),
    pytest.param("dup.csv", 'query,response_1,response_2,messages\nq,a,b,"[{""role"": ""user"", ""role"": ""user"", '
                 '""content"": ""SECRET""}]"\n', [], "key 'role' twice", id="duplicate-key-in-a-csv-messages-cell"),
    # a text field of another JSON type: stored as its Python repr ("{'a': 1}") before
    pytest.param("t.jsonl", json.dumps({**PAIR, "query": {"text": S}}) + "\n", [],
                 "row 1: 'query' must be a string, got an object", id="query-an-object"),
    pytest.param("t.jsonl", json.dumps({**PAIR, "response_2": [S]}) + "\n", [],
                 "'response_2' must be a string, got a list", id="response-a-list"),
    pytest.param("t.jsonl", json.dumps({**PAIR, "response_1": True}) + "\n", [], "must be a string, got a boolean",
                 id="response-a-boolean"),
    pytest.param("t.jsonl", json.dumps({**PAIR, "response_1": None}) + "\n", [], "missing field 'response_1'",
                 id="response-null-is-missing"),
    pytest.param("t.jsonl", json.dumps({**PAIR, "response_1": 4.0}) + "\n", [], "must be a string, got a number",
                 id="response-a-number-is-not-guessed-as-text"),
    pytest.param("t.jsonl", json.dumps({**PAIR, "source": {"name": S}}) + "\n", [],
                 "'source' must be a string, got an object", id="source-an-object"),
    pytest.param("t.jsonl", json.dumps({**PAIR, "subset": [S]}) + "\n", [], "'subset' must be a string, got a list",
                 id="subset-a-list"),
    pytest.param("t.jsonl", json.dumps({**PAIR, "messages": [{"role": "user", "content": {"t": S}}]}) + "\n", [],
                 "message 0's content must be a string, got an object", id="message-content-an-object"),
    pytest.param("t.jsonl", json.dumps({**PAIR, "instruction": S, "input": 12345}) + "\n",
                 ["--map", "query=instruction+input"], "column 'input' must hold text, got a number",
                 id="joined-query-part-a-number"),
    # bytes that are not UTF-8 text: "save the file as UTF-8" was the advice for a gzip file
    pytest.param("z.jsonl", gzip.compress(GOOD.encode()), [], "not text but a gzip file: decompress it first",
                 id="gzip-named-jsonl"),
    pytest.param("z.json", gzip.compress(("[" + LINE + "]").encode()), [], "a gzip file", id="gzip-named-json"),
    pytest.param("z.csv", _zip(GOOD), [], "not text but a zip archive", id="zip-named-csv"),
    pytest.param("z.jsonl", bz2.compress(GOOD.encode()), [], "a bzip2 file", id="bzip2-named-jsonl"),
    pytest.param("z.jsonl", lzma.compress(GOOD.encode()), [], "an xz file", id="xz-named-jsonl"),
    pytest.param("z.jsonl", b"(\xb5/\xfd" + GOOD.encode(), [], "a zstd file", id="zstd-named-jsonl"),
    pytest.param("z.parquet", gzip.compress(GOOD.encode()), [], "a gzip file", id="gzip-named-parquet"),
    pytest.param("z.jsonl.gz", gzip.compress(gzip.compress(GOOD.encode())), [], "a gzip file",
                 id="gzip-inside-jsonl-gz"),
    pytest.param("z.jsonl", _sqlite, [], "not text but a SQLite database", id="sqlite-database-named-jsonl"),
    pytest.param("u.jsonl", GOOD.encode("utf-16"), [], "not UTF-8 text but UTF-16", id="utf16-with-bom"),
    pytest.param("u.csv", "query,response_1,response_2\nq,a,b\n".encode("utf-16"), [], "not UTF-8 text but UTF-16",
                 id="utf16-csv-with-bom"),
    pytest.param("u.jsonl", GOOD.encode("utf-16-le"), [], "not UTF-8 text but, by its NUL bytes, UTF-16",
                 id="utf16-without-bom"),
    pytest.param("u.json", ("[" + LINE + "]").encode("utf-32"), [], "not UTF-8 text but UTF-32", id="utf32-with-bom"),
    pytest.param("l.jsonl", json.dumps({**PAIR, "query": "caf\u00e9 " + S}, ensure_ascii=False).encode("latin-1")
                 + b"\n", [], "as Latin-1 or Windows-1252 write an accented letter", id="latin1"),
]

COMMANDS = {
    "import": ["import", "{f}", "--db", "{w}/store.db"],
    "judge": ["judge", "--input", "{f}", "--output", "{w}/out.jsonl", "--db", "{w}/store.db"],
    "eval": ["eval", "--benchmark", "file", "--data", "{f}", "--db", "{w}/store.db"],
}
MAPS = ("import", "eval")  # the commands that take --map (judge reads the pair fields by their own names)


@pytest.fixture(autouse=True)
def no_model_work(monkeypatch: pytest.MonkeyPatch) -> None:
    import reflectrm.backends

    def reached(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded before the input was refused")

    monkeypatch.setattr(reflectrm.backends, "load_backend", reached)


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.endswith(("-wal", "-shm"))}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(("name", "content", "flags", "message"), FILES)
def test_a_hostile_pair_file_is_one_line_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, name: str, content: Any, flags: list[str],
    message: str,
) -> None:
    if flags and command not in MAPS:
        pytest.skip(f"{command} takes no --map")
    with JudgmentStore.open(f"sqlite:///{tmp_path / 'store.db'}") as store:
        store.add_pairs([])
    path = tmp_path / name
    path.write_bytes(content(path) if callable(content) else content.encode() if isinstance(content, str) else content)
    before = _snapshot(tmp_path)
    argv = [a.format(f=path, w=tmp_path) for a in COMMANDS[command]] + flags
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert message in err, err
    assert "SECRET" not in err and "SECRET" not in out  # the problem is named, the data is not repeated
    assert _snapshot(tmp_path) == before  # no pair stored, no output begun
    with JudgmentStore.open(f"sqlite:///{tmp_path / 'store.db'}", read_only=True) as store:
        assert store.counts()["pairs"] == 0


@pytest.mark.parametrize(("body", "message"), [
    pytest.param(_dup("label", 1, 2), "gives key 'label' twice", id="duplicate-label"),
    pytest.param(_dup("response_1", S, S), "gives key 'response_1' twice", id="duplicate-response"),
    pytest.param(json.dumps({**PAIR, "query": {"t": S}}), "'query' must be a string, got an object", id="query-object"),
    pytest.param(json.dumps({**PAIR, "source": [S]}), "'source' must be a string, got a list", id="source-list"),
])
def test_the_reward_service_refuses_what_the_readers_refuse(body: str, message: str) -> None:
    from reflectrm.backends import ScriptedBackend
    from reflectrm.core import JudgeConfig
    from reflectrm.serving.rewards import RewardConfig
    from reflectrm.serving.server import RewardService, ServeConfig, parse_json

    service = RewardService(ScriptedBackend(lambda *a: "never asked"), judge_config=JudgeConfig(n=2),
                            reward_config=RewardConfig(), config=ServeConfig())
    with pytest.raises(InputError, match=message) as caught:
        service.judge_job(parse_json(body.encode()))
    assert "SECRET" not in str(caught.value) and "\n" not in str(caught.value)
    assert service.batcher.drain(10)


@pytest.mark.parametrize(("messages", "message"), [
    pytest.param('[{"role": "user", "role": "user", "content": "SECRET"}]', "key 'role' twice", id="duplicate-role"),
    pytest.param('[{"role": "user", "content": 5}]', "content must be a string, got a number", id="content-number"),
])
def test_the_apps_typed_conversation_follows_the_same_rules(messages: str, message: str) -> None:
    from reflectrm_app.ui.forms import build_pair

    with pytest.raises(InputError, match=message) as caught:
        build_pair(query="", messages=messages, response_1="a", response_2="b")
    assert "SECRET" not in str(caught.value)
