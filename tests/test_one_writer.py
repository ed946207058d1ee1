"""One writer per output: every command that writes a file or folder holds its lock while it writes.

Each case runs the command twice at once, for real: the first in its own process, held in the middle of
its work (a scripted judge that waits, an export or backup or training step that waits); the second
here, against the same output. The second exits 2 with one line naming the first, and changes nothing;
the first then finishes and its output is whole; a rerun afterwards behaves as the command always did
(judge and eval resume, build-data reuses its snapshot, train resumes, export and backup never overwrite).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import reflectrm.backends
import reflectrm.training.grpo
from reflectrm.backends import ScriptedBackend
from reflectrm_app.cli import main
from reflectrm_db.services import JudgmentStore
from tests.db.helpers import scripted_output

ROOT = Path(__file__).resolve().parents[1]
PAIRS = [{"id": f"p{k}", "query": f"What is {k} + 1?", "response_1": str(k + 1), "response_2": str(k + 2), "label": 1}
         for k in range(4)]

HOLDER = r"""
import sys, time
from pathlib import Path

gate, point, argv = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]


def hold():
    (gate / "holding").write_text("")
    deadline = time.monotonic() + 240
    while not (gate / "release").exists():
        if time.monotonic() > deadline:
            raise SystemExit("never released")
        time.sleep(0.02)


def holding(real):
    def wrapper(*args, **kwargs):
        hold()
        return real(*args, **kwargs)
    return wrapper


import reflectrm.backends
from reflectrm.backends import ScriptedBackend
from tests.db.helpers import scripted_output

kind, _, text = point.partition(":")
if kind == "generate":  # hold at the first prompt holding `text` (a later pair: the file is half written)
    def responder(prompt, seed, params):
        if text in prompt and not (gate / "holding").exists():
            hold()
        return scripted_output(prompt, seed, params)
    reflectrm.backends.load_backend = lambda *a, **k: ScriptedBackend(responder)
elif kind == "export":
    import reflectrm_db.exporting as exporting
    exporting.write_rows = holding(exporting.write_rows)
elif kind == "backup":
    import reflectrm_db.services as services
    services._copy_sqlite = holding(services._copy_sqlite)
elif kind == "train":
    import reflectrm.training.grpo as grpo

    def fake_train(data, *, model, files, config, resume, stop, processes=None):
        hold()
        (files.root / "checkpoint-1").mkdir(exist_ok=True)
        return grpo.TrainResult(state="completed", step=1, final_model=None, last_checkpoint=None, metrics={})
    grpo._train = fake_train

from reflectrm_app.cli import main
raise SystemExit(main(argv))
"""


@pytest.fixture
def world(tmp_path: Path) -> Path:
    root = tmp_path / "world"
    root.mkdir()
    (root / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    (root / "data").mkdir()  # a dataset folder for train (its rows are never read: training is faked)
    with JudgmentStore.open(f"sqlite:///{root / 'store.db'}") as store:
        from reflectrm.core.types import PreferencePair

        store.add_pairs([PreferencePair.from_dict({**p, "source": "tests"}) for p in PAIRS])
    return root


@pytest.fixture(autouse=True)
def no_model_work_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """The second run (in this process) must be refused before it loads a model or trains."""
    def reached(*args: object, **kwargs: object) -> None:
        raise AssertionError("the second run reached model work")

    monkeypatch.setattr(reflectrm.backends, "load_backend", reached)
    monkeypatch.setattr(reflectrm.training.grpo, "_train", reached)


def snapshot(root: Path) -> dict[str, str]:
    """Every path under `root` -> the sha256 of its bytes (or its kind): a changed, new or lost file shows."""
    def kind(p: Path) -> str:
        if p.is_symlink():
            return f"link -> {os.readlink(p)}"
        return "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()

    return {str(p.relative_to(root)): kind(p) for p in sorted(root.rglob("*"))}


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _judged_whole(w: Path) -> None:
    assert [x["id"] for x in _lines(w / "out.jsonl")] == ["p0", "p1", "p2", "p3"]  # every line whole, in order


def _report_whole(w: Path) -> None:
    report = json.loads((w / "report" / "report.json").read_text(encoding="utf-8"))
    assert report["items"] == 4 and (w / "report" / "report.md").read_text(encoding="utf-8").startswith("# Evaluation")


def _export_whole(w: Path) -> None:
    assert len(_lines(w / "e.jsonl")) == len(PAIRS)


def _backup_whole(w: Path) -> None:
    con = sqlite3.connect(w / "b.db")
    try:
        assert con.execute("SELECT count(*) FROM pairs").fetchone() == (4,)
    finally:
        con.close()


def _snapshot_whole(w: Path) -> None:
    (folder,) = [p for p in (w / "snap").iterdir() if not p.name.startswith(".")]
    assert json.loads((folder / "snapshot.json").read_text(encoding="utf-8"))["rows"] > 0


def _run_whole(w: Path) -> None:
    assert json.loads((w / "run" / "status.json").read_text(encoding="utf-8"))["state"] == "completed"


@dataclass(frozen=True)
class Case:
    first: list[str]  # the command held in the middle of its work ({w}: the world folder)
    point: str  # where it is held (see HOLDER)
    whole: Callable[[Path], None]  # the first run's output, checked once it has finished
    second: list[str] | None = None  # the command that must be refused (default: the first again)
    rerun: int = 0  # the exit code of the same command run again afterwards (exports never overwrite: 2)


JUDGE = ["judge", "--input", "{w}/pairs.jsonl", "--output", "{w}/out.jsonl", "--batch-size", "1"]
TRAIN = ["train", "--data", "{w}/data", "--output", "{w}/run", "--max-steps", "1"]

CASES = [
    # two judges appending to one file: torn lines with mixed settings; held with one line written
    pytest.param(Case(JUDGE, "generate:What is 1 + 1?", _judged_whole), id="judge-output"),
    # the same file by another name: a symbolic link, and a relative path from the file's folder
    pytest.param(Case(JUDGE, "generate:What is 1 + 1?", _judged_whole,
                      second=[*JUDGE[:3], "--output", "{w}/alias.jsonl"]), id="judge-output-via-symlink"),
    pytest.param(Case(JUDGE, "generate:What is 1 + 1?", _judged_whole,
                      second=[*JUDGE[:3], "--output", "./out.jsonl"]), id="judge-output-relative"),
    # another run's options on the same file (--n 2): refused for the lock, before the file is even read
    pytest.param(Case(JUDGE, "generate:What is 1 + 1?", _judged_whole, second=[*JUDGE, "--n", "2"]),
                 id="judge-output-other-options"),
    # two evaluations writing one report folder (and the second would add a run to the store)
    pytest.param(Case(["eval", "--benchmark", "file", "--data", "{w}/pairs.jsonl", "--strategies", "greedy",
                       "--db", "{w}/store.db", "--out", "{w}/report"], "generate:", _report_whole), id="eval-out"),
    pytest.param(Case(["export", "pairs", "--out", "{w}/e.jsonl", "--db", "{w}/store.db"], "export", _export_whole,
                      rerun=2), id="export-out"),
    pytest.param(Case(["db", "backup", "{w}/b.db", "--db", "{w}/store.db"], "backup", _backup_whole, rerun=2),
                 id="db-backup"),
    pytest.param(Case(["build-data", "--pairs", "{w}/pairs.jsonl", "--out", "{w}/snap", "--batch-size", "1"],
                      "generate:", _snapshot_whole), id="build-data-out"),
    pytest.param(Case(TRAIN, "train", _run_whole), id="train-run-folder"),
    # a detached start on the folder a foreground run trains in: refused before its status is written over
    pytest.param(Case(TRAIN, "train", _run_whole, second=[*TRAIN, "--detach"]), id="train-detach-on-a-running-run"),
]


def _fill(args: list[str], w: Path) -> list[str]:
    return [a.replace("{w}", str(w)) for a in args]


@pytest.fixture
def hold(tmp_path: Path) -> Iterator[Callable[[list[str], str, Path], subprocess.Popen[str]]]:
    """Start a command in its own process, held at `point`; it is released (or killed) when the test ends."""
    gate = tmp_path / "gate"
    gate.mkdir()
    started: list[subprocess.Popen[str]] = []

    def start(argv: list[str], point: str, cwd: Path) -> subprocess.Popen[str]:
        env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1",
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(gate), point, *argv], cwd=cwd, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        started.append(proc)
        deadline = time.monotonic() + 240
        while not (gate / "holding").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"the first run never reached its hold point: {proc.communicate()[1][-3000:]}")
            time.sleep(0.05)
        return proc

    start.release = lambda: (gate / "release").write_text("")  # type: ignore[attr-defined]
    yield start
    (gate / "release").write_text("")
    for proc in started:
        if proc.poll() is None:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.mark.parametrize("case", CASES)
def test_a_second_writer_is_refused_in_one_line_and_the_first_finishes_whole(
    case: Case, world: Path, hold, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (world / "alias.jsonl").symlink_to("out.jsonl")  # dangling until the first run writes out.jsonl
    first = hold(_fill(case.first, world), case.point, world)
    monkeypatch.chdir(world)
    before = snapshot(world)
    code = _exit_code(_fill(case.second or case.first, world))
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err, err
    assert "is being written by another run" in err and f"pid {first.pid}," in err, err
    assert snapshot(world) == before  # the second changed nothing, created nothing

    hold.release()
    out, errors = first.communicate(timeout=240)
    assert first.returncode == 0, errors[-3000:]
    case.whole(world)
    assert not [p for p in world.rglob("*.lock")], "a lock file outlived its run"

    monkeypatch.setattr(reflectrm.backends, "load_backend", lambda *a, **k: ScriptedBackend(scripted_output))
    monkeypatch.setattr(reflectrm.training.grpo, "_train", _trained)
    assert _exit_code(_fill(case.first, world)) == case.rerun, capsys.readouterr().err
    case.whole(world)  # the rerun resumed (or refused to overwrite): the output is as whole as before


def _trained(data: object, *, files: object, **kwargs: object) -> reflectrm.training.grpo.TrainResult:
    return reflectrm.training.grpo.TrainResult(state="completed", step=1, final_model=None, last_checkpoint=None,
                                               metrics={})


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def test_a_killed_writer_leaves_no_lock_behind_and_the_rerun_resumes(
    world: Path, hold, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`kill -9` in the middle of a judging run: the kernel drops the lock with the process; the stale lock file
    it leaves neither blocks the rerun nor changes what it resumes."""
    first = hold(_fill(JUDGE, world), "generate:What is 2 + 1?", world)  # two lines written
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)
    assert (world / "out.jsonl.lock").exists()  # stale: nobody holds it
    monkeypatch.setattr(reflectrm.backends, "load_backend", lambda *a, **k: ScriptedBackend(scripted_output))
    assert _exit_code(_fill(JUDGE, world)) == 0, capsys.readouterr().err
    assert "judged 2 pair(s), skipped 2" in capsys.readouterr().err
    _judged_whole(world)
    assert not (world / "out.jsonl.lock").exists()
