"""Every `reflectrm` sub-command against hostile input: exit 2, one line on stderr, no traceback, and every
file it was given (inputs, outputs, stores) byte for byte as it was, with nothing created beside them.

The model never loads: each case must be refused by a precondition checked before any model work
(`load_backend` and training are replaced by functions that fail the test if reached).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from reflectrm_app.cli import main
from reflectrm_db.services import JudgmentStore
from tests.hostile import assert_one_line_refusal, copy_world

ROOT = Path(__file__).resolve().parents[1]
PAIR = {"id": "p1", "query": "What is 2 + 2?", "response_1": "4", "response_2": "5", "label": 1}
ONE = ["--query", "What is 2 + 2?", "--response-1", "4", "--response-2", "5"]
# A judgment line made with other options (n=4): a rerun with the defaults must not append to it.
OTHER_RUN = {"id": "p1", "pair": {}, "strategy": "reflectrm", "rollouts": [], "config": {"n": 4}}


def _build_world(root: Path) -> None:
    """The files a tester hands the commands: good ones, broken ones, and stores of every kind."""
    root.mkdir()
    (root / "pairs.jsonl").write_text(json.dumps(PAIR) + "\n")
    (root / "empty.jsonl").write_bytes(b"")
    (root / "blank.jsonl").write_text("\n  \n\n")
    latin1 = json.dumps({**PAIR, "query": "caf\u00e9"}, ensure_ascii=False).encode("latin-1")
    (root / "latin1.jsonl").write_bytes(latin1 + b"\n")
    (root / "utf16.jsonl").write_bytes((json.dumps(PAIR) + "\n").encode("utf-16"))
    (root / "surrogate.jsonl").write_text(json.dumps(PAIR).replace('"4"', '"\\ud800"') + "\n")
    (root / "array.jsonl").write_text(json.dumps([PAIR]) + "\n")
    (root / "types.jsonl").write_text(json.dumps({**PAIR, "response_1": 4}) + "\n")
    (root / "nested.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n")
    (root / "huge.jsonl").write_text(json.dumps({**PAIR, "response_1": "x" * 20_000_000}) + "\n")  # 20 MB
    (root / "notes.txt").write_text("my notes\nthe last line has no newline")
    (root / "notes-nl.txt").write_text("my notes\n")
    (root / "other-run.jsonl").write_text(json.dumps(OTHER_RUN) + "\n")
    (root / "folder").mkdir()
    (root / "folder" / "keep.txt").write_text("keep")
    (root / "link.jsonl").symlink_to("pairs.jsonl")  # relative: it follows the world when copied
    (root / "notdb.db").write_text("this is not a database\n")
    (root / "zero.db").write_bytes(b"")
    con = sqlite3.connect(root / "other.db")  # somebody else's SQLite database
    con.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    con.execute("INSERT INTO customers (name) VALUES ('ana')")
    con.commit()
    con.close()
    with JudgmentStore.open(f"sqlite:///{root / 'store.db'}") as store:
        store.add_pairs([])
    (root / "run").mkdir()  # a folder that holds no training run
    (root / "data").mkdir()  # an (empty) dataset folder


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile") / "world"
    _build_world(root)
    return root


@pytest.fixture
def world(template: Path, tmp_path: Path) -> Path:
    return copy_world(template, tmp_path)


@pytest.fixture(autouse=True)
def no_model_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a model or training fails the test: every refusal below must come before that."""
    import reflectrm.backends
    import reflectrm.training.grpo

    def reached(*args: object, **kwargs: object) -> None:
        raise AssertionError("model work was reached before the input was refused")

    monkeypatch.setattr(reflectrm.backends, "load_backend", reached)
    monkeypatch.setattr(reflectrm.training.grpo, "_train", reached)


def snapshot(root: Path) -> dict[str, str]:
    """Every path under `root` -> the sha256 of its bytes (or its kind): a change, a new or lost file shows.

    SQLite's -wal/-shm side files are left out: they hold no data of a store that was only read, and a
    read-only connection cannot remove them. The database files themselves are compared byte for byte.
    """
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if rel.endswith(("-wal", "-shm")):  # SQLite's side files of a WAL store: a read-only opener leaves them
            continue
        if path.is_symlink():
            out[rel] = f"link -> {os.readlink(path)}"
        elif path.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


RO = "sqlite:///{w}/store.db?mode=ro"  # a read-only store (the tests may run as root)

CASES = [
    # --- judge: input files --------------------------------------------------------------------------
    pytest.param(["judge", "--input", "{w}/empty.jsonl"], "holds no pairs", id="judge-empty-file"),
    pytest.param(["judge", "--input", "{w}/blank.jsonl"], "holds no pairs", id="judge-blank-lines"),
    pytest.param(["judge", "--input", "{w}/latin1.jsonl"], "not UTF-8", id="judge-latin1"),
    pytest.param(["judge", "--input", "{w}/utf16.jsonl"], "not UTF-8", id="judge-utf16"),
    # a JSON escape of half a surrogate pair: valid JSON, but no character a model could read
    pytest.param(["judge", "--input", "{w}/surrogate.jsonl"], "lone surrogate", id="judge-lone-surrogate"),
    pytest.param(["judge", "--input", "{w}/array.jsonl"], "must be a JSON object", id="judge-array-line"),
    pytest.param(["judge", "--input", "{w}/types.jsonl"], "must be a string", id="judge-number-response"),
    pytest.param(["judge", "--input", "{w}/nested.jsonl"], "nested too deeply", id="judge-deep-nesting"),
    # 20 MB in one response: refused at once, before any tokenising (it used to take 145 s and 2.6 GB)
    pytest.param(["judge", "--input", "{w}/huge.jsonl"], "over the limit", id="judge-20MB-response"),
    pytest.param(["judge", "--input", "{w}/missing.jsonl"], "does not exist", id="judge-missing-input"),
    pytest.param(["judge", "--input", "{w}/folder"], "is a folder", id="judge-input-folder"),
    # --- judge: the output file (the data-loss bugs) ------------------------------------------------
    pytest.param(["judge", "--input", "{w}/pairs.jsonl", "--output", "{w}/pairs.jsonl"], "is the --input file",
                 id="judge-output-is-input"),
    pytest.param(["judge", "--input", "{w}/pairs.jsonl", "--output", "{w}/link.jsonl"], "is the --input file",
                 id="judge-output-symlink-to-input"),
    pytest.param(["judge", "--input", "{w}/pairs.jsonl", "--output", "{w}/folder/../pairs.jsonl"],
                 "is the --input file", id="judge-output-input-via-dotdot"),
    pytest.param(["judge", "--input", "{w}/link.jsonl", "--output", "{w}/pairs.jsonl"], "is the --input file",
                 id="judge-input-symlink-to-output"),
    # a text file without a final newline: its last line used to be cut as a "torn judgment"
    pytest.param(["judge", "--input", "{w}/pairs.jsonl", "--output", "{w}/notes.txt"], "not a judgment line",
                 id="judge-output-text-no-newline"),
    pytest.param(["judge", "--input", "{w}/pairs.jsonl", "--output", "{w}/notes-nl.txt"], "not a judgment line",
                 id="judge-output-text"),
    pytest.param(["judge", "--input", "{w}/pairs.jsonl", "--output", "{w}/other-run.jsonl"], "judged with n=4",
                 id="judge-output-other-options"),
    pytest.param(["judge", "--input", "{w}/pairs.jsonl", "--output", "{w}/latin1.jsonl"], "not a judgment line",
                 id="judge-output-binary"),
    pytest.param(["judge", "--input", "{w}/pairs.jsonl", "--output", "{w}/nodir/out.jsonl"], "does not exist",
                 id="judge-output-missing-folder"),
    pytest.param(["judge", "--input", "{w}/pairs.jsonl", "--output", "{w}/folder"], "is a folder",
                 id="judge-output-folder"),
    pytest.param(["judge", *ONE, "--output", "{w}/out.jsonl"], "--output needs --input", id="judge-output-alone"),
    # --- judge: the store ---------------------------------------------------------------------------
    pytest.param(["judge", *ONE, "--db", "{w}/notdb.db"], "not a SQLite database", id="judge-db-not-sqlite"),
    pytest.param(["judge", *ONE, "--db", "{w}/other.db"], "no store schema", id="judge-db-foreign-tables"),
    pytest.param(["judge", *ONE, "--db", ""], "URL is empty", id="judge-db-empty-url"),
    pytest.param(["judge", *ONE, "--db", RO], "cannot be written", id="judge-db-read-only"),
    pytest.param(["judge", *ONE, "--db", "{w}/nodir/x.db"], "folder does not exist", id="judge-db-missing-folder"),
    pytest.param(["judge", *ONE, "--db", "{w}/folder"], "is a folder", id="judge-db-folder"),
    pytest.param(["judge", *ONE, "--db", "mysql://h/db"], "not supported", id="judge-db-unknown-scheme"),
    pytest.param(["judge", "--input", "{w}/pairs.jsonl", "--output", "{w}/out.jsonl", "--db", RO],
                 "cannot be written", id="judge-file-db-read-only"),
    # --- judge: sizes, counts and flags -------------------------------------------------------------
    pytest.param(["judge", *ONE, "--n", "10000"], "over the limit of 64", id="judge-n-10000"),
    pytest.param(["judge", *ONE, "--n", "0"], "positive integer", id="judge-n-0"),
    pytest.param(["judge", *ONE, "--max-new-tokens", "-1"], "positive integer", id="judge-max-new-tokens-negative"),
    pytest.param(["judge", *ONE, "--batch-size", "0"], "at least 1", id="judge-batch-size-0"),
    pytest.param(["judge", "--query", "q\udcff", "--response-1", "a", "--response-2", "b"], "lone surrogate",
                 id="judge-argv-not-utf8"),  # what Python makes of a non-UTF-8 byte in argv
    pytest.param(["judge", "--query", "q", "--response-1", "a" * 3_000_000, "--response-2", "b"], "over the limit",
                 id="judge-argv-huge"),
    pytest.param(["judge", "--query", "q"], "give --response-1", id="judge-no-responses"),
    pytest.param(["judge", "--messages", "[{", "--response-1", "a", "--response-2", "b"], "not valid JSON",
                 id="judge-messages-bad-json"),
    pytest.param(["judge", "--messages", "{}", "--response-1", "a", "--response-2", "b"], "must be a list",
                 id="judge-messages-object"),
    pytest.param(["judge", *ONE, "--strategy", "bogus"], "invalid choice", id="judge-unknown-strategy"),
    pytest.param(["judge", *ONE, "--n", "many"], "invalid int", id="judge-n-not-a-number"),
    # --- import -------------------------------------------------------------------------------------
    pytest.param(["import", "{w}/empty.jsonl", "--db", "{w}/store.db"], "no pairs|holds no|empty", id="import-empty"),
    pytest.param(["import", "{w}/latin1.jsonl", "--db", "{w}/store.db"], "UTF-8", id="import-latin1"),
    pytest.param(["import", "{w}/types.jsonl", "--db", "{w}/store.db"], "must be a string", id="import-wrong-type"),
    pytest.param(["import", "{w}/huge.jsonl", "--db", "{w}/store.db"], "over the limit", id="import-20MB"),
    pytest.param(["import", "{w}/missing.jsonl", "--db", "{w}/store.db"], "does not exist|not found",
                 id="import-missing"),
    pytest.param(["import", "{w}/pairs.jsonl", "--db", "{w}/notdb.db"], "not a SQLite database",
                 id="import-db-not-sqlite"),
    pytest.param(["import", "{w}/pairs.jsonl", "--db", "{w}/other.db"], "no store schema", id="import-db-foreign"),
    pytest.param(["import", "{w}/pairs.jsonl", "--db", ""], "URL is empty", id="import-db-empty-url"),
    pytest.param(["import", "{w}/pairs.jsonl", "--db", RO], "readonly|read-only|cannot be written",
                 id="import-db-read-only"),
    # --- export: a reading command never creates a store --------------------------------------------
    pytest.param(["export", "judgments", "--out", "{w}/e.jsonl", "--db", "{w}/typo.db"], "does not exist",
                 id="export-db-typo"),
    pytest.param(["export", "judgments", "--out", "{w}/e.jsonl", "--db", "{w}/zero.db"], "holds no ReflectRM store",
                 id="export-db-empty-file"),
    pytest.param(["export", "judgments", "--out", "{w}/e.jsonl", "--db", "{w}/notdb.db"], "not a SQLite database",
                 id="export-db-not-sqlite"),
    pytest.param(["export", "judgments", "--out", "{w}/e.jsonl", "--db", "{w}/other.db"], "no store schema",
                 id="export-db-foreign"),
    pytest.param(["export", "judgments", "--out", "{w}/e.jsonl", "--db", ""], "URL is empty", id="export-db-empty"),
    pytest.param(["export", "judgments", "--out", "{w}/nodir/e.jsonl", "--db", "{w}/store.db"], "does not exist",
                 id="export-out-missing-folder"),
    pytest.param(["export", "judgments", "--out", "{w}/notes.txt", "--db", "{w}/store.db"], "already exists",
                 id="export-out-exists"),
    pytest.param(["export", "judgments", "--out", "{w}/folder", "--db", "{w}/store.db"], "already exists",
                 id="export-out-folder"),
    # --- db upgrade / backup ------------------------------------------------------------------------
    pytest.param(["db", "upgrade", "--db", "{w}/notdb.db"], "not a SQLite database", id="upgrade-not-sqlite"),
    pytest.param(["db", "upgrade", "--db", "{w}/other.db"], "no store schema", id="upgrade-foreign"),
    pytest.param(["db", "upgrade", "--db", "{w}/folder"], "is a folder", id="upgrade-folder"),
    pytest.param(["db", "upgrade", "--db", ""], "URL is empty", id="upgrade-empty-url"),
    pytest.param(["db", "backup", "{w}/b.db", "--db", "{w}/typo.db"], "does not exist", id="backup-db-typo"),
    pytest.param(["db", "backup", "{w}/notes.txt", "--db", "{w}/store.db"], "already exists", id="backup-exists"),
    pytest.param(["db", "backup", "{w}/nodir/b.db", "--db", "{w}/store.db"], "does not exist",
                 id="backup-missing-folder"),
    # --- build-data: every input read before the model loads ----------------------------------------
    pytest.param(["build-data"], "give --pairs", id="build-data-nothing"),
    pytest.param(["build-data", "--pairs", "{w}/latin1.jsonl", "--out", "{w}/d"], "not UTF-8",
                 id="build-data-latin1"),
    pytest.param(["build-data", "--pairs", "{w}/empty.jsonl", "--out", "{w}/d"], "holds no pairs",
                 id="build-data-empty"),
    # the eval file used to be read only after the model had loaded and rolled out
    pytest.param(["build-data", "--pairs", "{w}/pairs.jsonl", "--eval", "{w}/missing.jsonl", "--out", "{w}/d"],
                 "does not exist", id="build-data-missing-eval"),
    pytest.param(["build-data", "--judgments", "{w}/notes.txt", "--out", "{w}/d"], "not a judgment line",
                 id="build-data-judgments-not-judgments"),
    pytest.param(["build-data", "--judgments", "{w}/latin1.jsonl", "--out", "{w}/d"], "not a judgment line",
                 id="build-data-judgments-latin1"),
    pytest.param(["build-data", "--pairs", "{w}/pairs.jsonl", "--out", "{w}/notes.txt"], "is a file",
                 id="build-data-out-is-file"),
    pytest.param(["build-data", "--pairs", "{w}/pairs.jsonl", "--mix", "lots"], "--mix must look like",
                 id="build-data-bad-mix"),
    pytest.param(["build-data", "--extra", "{w}/latin1.jsonl", "--out", "{w}/d"], "UTF-8",
                 id="build-data-extra-latin1"),
    # --- train --------------------------------------------------------------------------------------
    pytest.param(["train", "--data", "{w}/data", "--output", "{w}/r", "--max-steps", "0"], "max_steps",
                 id="train-max-steps-0"),
    pytest.param(["train", "--data", "{w}/data", "--output", "{w}/r", "--max-steps", "-5"], "max_steps",
                 id="train-max-steps-negative"),
    pytest.param(["train", "--data", "{w}/data", "--output", "{w}/r", "--lr-scheduler", "bogus"], "lr_scheduler",
                 id="train-bad-lr-scheduler"),
    pytest.param(["train", "--data", "{w}/data", "--output", "{w}/notes.txt"], "is a file", id="train-output-file"),
    pytest.param(["train", "--data", "{w}/missing", "--output", "{w}/r"], "does not exist", id="train-data-missing"),
    pytest.param(["train", "--data", "{w}/data", "--output", "{w}/r", "--model", "{w}/no-model"], "does not exist",
                 id="train-model-missing"),
    pytest.param(["train", "--data", "{w}/data", "--output", "{w}/r", "--batch-size", "0"], "batch_size must be a whole number",
                 id="train-batch-size-0"),
    # --- train-status: a typo used to read as an "interrupted" run, exit 0 ---------------------------
    pytest.param(["train-status", "{w}/missing"], "does not exist", id="train-status-missing"),
    pytest.param(["train-status", "{w}/notes.txt"], "is a file", id="train-status-file"),
    pytest.param(["train-status", "{w}/run"], "holds no training run", id="train-status-empty-folder"),
    # --- app ----------------------------------------------------------------------------------------
    pytest.param(["app", "--db", "{w}/notdb.db"], "not a SQLite database", id="app-db-not-sqlite"),
    pytest.param(["app", "--db", "{w}/other.db"], "no store schema", id="app-db-foreign"),
    # --- eval / compare: inputs read and the store checked before the model loads ------------------
    pytest.param(["eval", "--benchmark", "nosuch"], "invalid choice", id="eval-unknown-benchmark"),
    pytest.param(["eval", "--benchmark", "demo", "--threads", "0"], "not a thread count", id="eval-zero-threads"),
    pytest.param(["eval", "--benchmark", "demo", "--threads", "2", "--backend", "vllm", "--db", "{w}/store.db"],
                 "drop --threads", id="eval-threads-for-an-engine"),
    pytest.param(["judge", *ONE, "--threads", "two"], "not a thread count", id="judge-threads-not-a-number"),
    pytest.param(["serve", "--threads", "2", "--backend", "openai", "--base-url", "http://127.0.0.1:9"],
                 "drop --threads", id="serve-threads-for-an-engine"),
    pytest.param(["eval", "--benchmark", "judgebench", "--data", "{w}/missing"], "does not exist",
                 id="eval-data-missing"),
    pytest.param(["eval", "--benchmark", "file", "--data", "{w}/latin1.jsonl", "--db", "{w}/store.db"], "UTF-8",
                 id="eval-data-latin1"),
    pytest.param(["eval", "--benchmark", "file", "--data", "{w}/empty.jsonl", "--db", "{w}/store.db"], "holds no pairs",
                 id="eval-data-empty"),
    pytest.param(["eval", "--benchmark", "demo", "--limit", "0", "--db", "{w}/store.db"], "at least 1",
                 id="eval-limit-zero"),
    pytest.param(["eval", "--benchmark", "demo", "--strategies", "bogus", "--db", "{w}/store.db"], "is unknown",
                 id="eval-unknown-strategy"),
    pytest.param(["eval", "--benchmark", "demo", "--db", "{w}/notdb.db"], "not a SQLite database",
                 id="eval-db-not-sqlite"),
    pytest.param(["eval", "--benchmark", "demo", "--limit", "2", "--db", RO], "cannot be written",
                 id="eval-db-read-only"),
    pytest.param(["eval", "--benchmark", "demo", "--backend", "vllm", "--gpu-memory-utilization", "2",
                  "--db", "{w}/store.db"], "gpu_memory_utilization", id="eval-engine-flag-out-of-range"),
    pytest.param(["compare", "1", "2", "--db", "{w}/typo.db"], "does not exist", id="compare-db-typo"),
    pytest.param(["compare", "1", "2", "--db", "{w}/notdb.db"], "not a SQLite database", id="compare-db-not-sqlite"),
    pytest.param(["compare", "1", "2", "--db", "{w}/store.db"], "does not exist|share no", id="compare-unknown-runs"),
    pytest.param(["eval-merge", "1", "--db", "{w}/typo.db"], "does not exist", id="eval-merge-db-typo"),
    pytest.param(["eval-merge", "1", "--db", "{w}/notdb.db"], "not a SQLite database", id="eval-merge-db-not-sqlite"),
    pytest.param(["eval-merge", "x", "--db", "{w}/store.db"], "is not an id", id="eval-merge-run-not-an-id"),
    pytest.param(["eval-merge", "987", "--db", "{w}/store.db"], "does not exist", id="eval-merge-unknown-run"),
    pytest.param(["round", "progress", "r1", "--db", "{w}/typo.db"], "does not exist", id="round-db-typo"),
    pytest.param(["reviewers", "list", "--db", "{w}/typo.db"], "does not exist", id="reviewers-db-typo"),
    # --- serve: flags and the store checked before the model loads -----------------------------------
    pytest.param(["serve", "--port", "99999"], "not a port", id="serve-port-out-of-range"),
    pytest.param(["serve", "--db", "{w}/notdb.db"], "not a SQLite database", id="serve-db-not-sqlite"),
    pytest.param(["serve", "--backend", "nosuch"], "is unknown|invalid choice", id="serve-unknown-backend"),
    pytest.param(["serve", "--max-judgments", "0"], "max-judgments", id="serve-no-judgments"),
]


def _fill(args: list[str], root: Path) -> list[str]:
    return [a.replace("{w}", str(root)) for a in args]


@pytest.mark.parametrize(("args", "expected"), CASES)
def test_hostile_input_is_one_line_and_changes_nothing(
    args: list[str], expected: str, world: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import re

    monkeypatch.chdir(world)  # a default ./reflectrm.db would land here, and be seen
    if args[0] == "app":
        import reflectrm_app.ui.blocks

        monkeypatch.setattr(reflectrm_app.ui.blocks, "build_app", lambda *a, **k: pytest.fail("the app started"))
    before = snapshot(world)
    code = _exit_code(_fill(args, world))
    err = capsys.readouterr().err
    assert_one_line_refusal(code, err, expected)
    assert snapshot(world) == before  # nothing changed, nothing created


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse refusals exit from inside the parser
        return int(exc.code or 0)


# --- a few through a real process: what a user's shell sees ---------------------------------------------


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "reflectrm_app.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(["judge", "--input", "pairs.jsonl", "--output", "pairs.jsonl"], "is the --input file",
                     id="same-file"),
        pytest.param(["export", "judgments", "--out", "e.jsonl", "--db", "typo.db"], "does not exist",
                     id="export-typo-db"),
        pytest.param(["judge", "--input", "latin1.jsonl"], "not UTF-8", id="latin1-input"),
        pytest.param(["train-status", "missing"], "does not exist", id="train-status-missing"),
    ],
)
def test_a_real_process_prints_one_line_and_exits_2(args: list[str], expected: str, world: Path) -> None:
    before = snapshot(world)
    done = _run(*args, cwd=world)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1 and expected in done.stderr, done.stderr
    assert snapshot(world) == before


def test_a_non_utf8_argument_from_the_shell_is_one_line(world: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "LC_ALL": "C.UTF-8"}
    done = subprocess.run([sys.executable, "-m", "reflectrm_app.cli", "judge", "--query", b"caf\xe9", "--response-1", "a",
                           "--response-2", "b"], capture_output=True, cwd=world, env=env, timeout=300)
    assert done.returncode == 2 and b"lone surrogate" in done.stderr and len(done.stderr.splitlines()) == 1


def test_every_subcommand_has_hostile_cases() -> None:
    from reflectrm_app.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    commands = set(sub.choices)
    covered = {c.values[0][0] for c in CASES}
    assert commands <= covered, f"sub-commands without hostile cases: {sorted(commands - covered)}"


def test_the_model_refuses_a_prompt_past_its_context_before_tokenising_it(demo_backend: object) -> None:
    """The library's own bound (the app and any service get it too): no tokeniser call on a 20 MB prompt."""
    from reflectrm.core.types import ChatMessage
    from reflectrm.errors import ContextLengthError

    backend: Any = demo_backend
    limit = backend.max_context * backend.max_token_chars
    calls: list[int] = []
    real_encode = backend.encode
    backend.encode = lambda prompt: calls.append(1) or real_encode(prompt)
    try:
        with pytest.raises(ContextLengthError, match="characters, more than the model's context"):
            backend.check_prompt([ChatMessage("user", "x" * (limit + 1))], max_new_tokens=1)
        assert calls == []
        backend.check_prompt([ChatMessage("user", "2 + 2?")], max_new_tokens=1)  # a short prompt is tokenised
        assert calls == [1]
    finally:
        del backend.encode
