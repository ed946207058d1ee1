"""One identity for a pair across every command that stores one (`repository.pair_key`, `find_stored_pair`).

Each case runs a sequence of real commands on one real SQLite store and one pair file, judged by the shipped
demo judge: `import`, `judge --input --db`, `eval --db`, `judge --query --db`, the reward service's
`/v1/judge` and the app's Judge tab. Whatever the order, the file's two pairs are two rows, every judgment
is attached to one of them, and what the rows say (source, id, label) is what the file said.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from reflectrm_app.cli import main
from reflectrm.core.types import PreferencePair

FIRST = {"id": "a", "query": "What is 2 + 2?", "response_1": "4", "response_2": "5", "label": 1}
SECOND = {"query": "Capital of France?", "response_1": "Paris", "response_2": "Rome"}  # no id, no label
SMALL = ["--n", "2", "--max-new-tokens", "16"]


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _cli(argv: list[str]) -> None:
    assert main(argv) == 0


def _serve(world: Path, demo_backend: Any, body: dict[str, Any]) -> None:
    """A `/v1/judge` request to `reflectrm serve --db` (the service over the store, as `serve` wires it)."""
    from reflectrm_db.services import JudgmentStore
    from reflectrm.core import JudgeConfig
    from reflectrm.serving.rewards import RewardConfig
    from reflectrm.serving.server import RewardService, ServeConfig, parse_json

    with JudgmentStore.open(f"sqlite:///{world / 'store.db'}") as store:
        service = RewardService(demo_backend, judge_config=JudgeConfig(n=2, max_new_tokens=16),
                                reward_config=RewardConfig(), config=ServeConfig(), cache=store)
        job = service.batcher.submit(service.judge_job(parse_json(json.dumps(body).encode())))
        assert isinstance(job.future.result(300)["stored_id"], int)
        assert service.batcher.drain(60)


def _app(world: Path, demo_backend: Any) -> None:
    """The app's Judge tab: a pair typed into the form (no data set picked), judged and stored."""
    from reflectrm_app.ui.forms import build_pair
    from tests.app.conftest import make_services

    services = make_services(f"sqlite:///{world / 'store.db'}", demo_backend)
    try:
        pair = build_pair(query=FIRST["query"], messages="", response_1="4", response_2="5")
        services.judging.judge(pair)
    finally:
        services.close()


def _step(name: str, world: Path, demo_backend: Any) -> None:
    db = ["--db", str(world / "store.db")]
    pairs, copy = str(world / "pairs.jsonl"), str(world / "copy.jsonl")
    if name == "import":
        _cli(["import", pairs, *db])
    elif name == "import-copy":  # the same pairs in another file: another source name
        _cli(["import", copy, *db])
    elif name == "import-unlabelled":
        _cli(["import", str(world / "unlabelled.jsonl"), "--source", "pairs", *db])
    elif name == "import-relabelled":
        _cli(["import", str(world / "relabelled.jsonl"), "--source", "pairs", *db])
    elif name == "judge":
        _cli(["judge", "--input", pairs, "--output", str(world / "judged.jsonl"), *SMALL, *db])
    elif name == "judge-swap":
        _cli(["judge", "--input", pairs, "--output", str(world / "swapped.jsonl"), "--swap", *SMALL, *db])
    elif name == "eval":
        _cli(["eval", "--benchmark", "file", "--data", pairs, *SMALL, *db])
    elif name == "query":
        _cli(["judge", "--query", FIRST["query"], "--response-1", "4", "--response-2", "5", "--json", *SMALL, *db])
    elif name == "serve":
        _serve(world, demo_backend, {k: FIRST[k] for k in ("query", "response_1", "response_2")})
    elif name == "app":
        _app(world, demo_backend)
    else:
        raise AssertionError(name)


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_backend: Any) -> Path:
    import reflectrm.backends

    monkeypatch.setattr(reflectrm.backends, "load_backend", lambda *a, **k: demo_backend)  # loaded once a session
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "pairs.jsonl", [FIRST, SECOND])
    shutil.copy(tmp_path / "pairs.jsonl", tmp_path / "copy.jsonl")
    _write(tmp_path / "unlabelled.jsonl", [{k: v for k, v in FIRST.items() if k not in ("label", "id")}, SECOND])
    _write(tmp_path / "relabelled.jsonl", [{**FIRST, "label": 2}, SECOND])
    return tmp_path


A_HASH = PreferencePair.from_dict(SECOND).id  # the id a pair without one gets: its content hash
STORED = [("pairs", "a", 1), ("pairs", A_HASH, None)]  # (source, id, label) of the file's two pairs

# (steps in order, judgments stored, the rows' (source, id, label)); the trap each case covers is in its id
CASES = [
    pytest.param(["import", "judge"], 2, STORED, id="import-then-judge-attaches-to-the-imported-rows"),
    pytest.param(["judge", "import"], 2, STORED, id="judge-then-import-adds-nothing"),
    pytest.param(["judge", "judge"], 2, STORED, id="a-file-judged-twice-is-judged-once"),
    pytest.param(["import", "judge", "eval"], 4, STORED, id="import-judge-eval-one-row-per-line"),
    pytest.param(["import", "eval", "judge-swap"], 6, STORED, id="a-swap-audit-adds-no-pair"),
    pytest.param(["import", "query"], 1, STORED, id="a-typed-pair-finds-the-file's-row"),
    pytest.param(["import", "serve"], 1, STORED, id="a-reward-request-finds-the-file's-row"),
    pytest.param(["serve", "import"], 1, STORED, id="an-import-names-a-pair-a-request-stored"),
    pytest.param(["query", "judge"], 3, STORED, id="a-file-names-a-pair-judged-by-hand"),
    pytest.param(["import", "app"], 1, STORED, id="the-app's-typed-pair-finds-the-file's-row"),
    pytest.param(["import", "import-copy"], 0, STORED, id="the-same-pairs-in-two-files-are-stored-once"),
    pytest.param(["import-unlabelled", "import"], 0, STORED, id="a-label-fills-in-a-pair-stored-without-one"),
    pytest.param(["import", "import-unlabelled"], 0, STORED, id="a-pair-without-a-label-is-the-labelled-one"),
    pytest.param(["import", "import-relabelled", "query"], 1, [*STORED, ("pairs", "a", 2)],
                 id="two-labels-for-one-pair-keep-both-a-typed-pair-takes-the-first"),
]


@pytest.mark.parametrize(("steps", "judgments", "rows"), CASES)
def test_one_pair_row_per_pair_whatever_the_commands_and_their_order(
    world: Path, demo_backend: Any, steps: list[str], judgments: int, rows: list[tuple[str, str, int | None]]
) -> None:
    for name in steps:
        _step(name, world, demo_backend)
    con = sqlite3.connect(world / "store.db")
    try:
        stored = con.execute("SELECT id, source, source_id, label FROM pairs ORDER BY id").fetchall()
        attached = con.execute("SELECT pair_id FROM judgments").fetchall()
    finally:
        con.close()
    assert [tuple(r[1:]) for r in stored] == rows
    assert len(attached) == judgments
    assert {pid for (pid,) in attached} <= {r[0] for r in stored[:2]}  # every judgment on one of the file's rows
