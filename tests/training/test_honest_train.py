"""How a training run ends, told honestly: a cancelled `train` exits 130 (never 0 like a finished one) and says at
which step and how to resume; a spent time budget is a planned stop (exit 0, recorded as such); a full disk fails
the run in one line, removes the half-written checkpoint and leaves the last whole one to resume from.

Real parts: the shipped demo judge trained by GRPO through `reflectrm train` (the in-process `main()`), the real
run folder; a Ctrl-C and a SIGTERM are real signals, sent when the first step ends."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys

import pytest

from reflectrm.demo import DEMO_MODEL_DIR
from reflectrm.training.runs import last_checkpoint, list_checkpoints, read_progress
from tests.training.test_grpo_demo import snapshot  # noqa: F401 - the fixture: a small demo snapshot

pytestmark = pytest.mark.slow

FAST = ["--lr", "5e-5", "--batch-size", "2", "--num-generations", "4", "--per-device-batch-size", "8",
        "--max-completion-length", "48", "--device", "cpu", "--no-gradient-checkpointing",
        "--completions-to-record", "0", "--threads", "1", "--save-steps", "1"]


def _train(capsys, snapshot, run, *flags: str) -> tuple[int, str, dict]:  # noqa: ANN001
    from reflectrm_app.cli import main

    capsys.readouterr()
    code = main(["train", "--data", str(snapshot), "--model", str(DEMO_MODEL_DIR), "--output", str(run), *FAST,
                 *flags])
    out, err = capsys.readouterr()
    start = out.rfind('{\n  "state"')  # the command's JSON, after what the trainer itself prints
    return code, err, (json.loads(out[start:]) if start >= 0 else {})


def _when_step_1_ends(monkeypatch, act) -> None:  # noqa: ANN001
    """Call `act(run_files)` as the first optimizer step ends, before the callback decides whether to stop."""
    from reflectrm.training.callbacks import RunCallback

    original = RunCallback.on_step_end

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN202
        if state.global_step == 1:
            act(self.files)
        return original(self, args, state, control, **kwargs)

    monkeypatch.setattr(RunCallback, "on_step_end", on_step_end)


# How the run is ended as step 1 ends, and what the command must then say and record. The trap in each: a
# cancelled run that exits 0 (a script's `train && deploy` ships a model that never finished), or a stop that
# does not say which it was.
ENDINGS = [
    pytest.param(lambda files: files.cancel.touch(), [], 130, "cancelled", "cancel",
                 "cancelled at step 1: rerun the same command to resume from", id="cancel-file-as-the-app"),
    pytest.param(lambda files: os.kill(os.getpid(), signal.SIGINT), [], 130, "cancelled", "cancel",
                 "cancelled at step 1: rerun the same command to resume from", id="ctrl-c"),
    pytest.param(lambda files: os.kill(os.getpid(), signal.SIGTERM), [], 130, "cancelled", "cancel",
                 "cancelled at step 1", id="sigterm"),
    pytest.param(lambda files: None, ["--max-time-s", "0.001"], 0, "completed", "time budget",
                 "completed at step 1: the time budget of 0.001s was spent (a planned stop)", id="time-budget"),
    pytest.param(lambda files: None, ["--max-steps", "1"], 0, "completed", "steps", "completed at step 1: the model is",
                 id="steps-done"),
]


@pytest.mark.parametrize(("act", "flags", "code", "state", "ended_by", "line"), ENDINGS)
def test_train_exits_and_records_how_the_run_ended(snapshot, tmp_path, capsys, monkeypatch, act, flags, code, state,
                                                    ended_by, line):
    _when_step_1_ends(monkeypatch, act)
    run = tmp_path / "run"
    got, err, printed = _train(capsys, snapshot, run, *(flags or ["--max-steps", "5"]))
    assert got == code, err
    assert line in err and "Traceback" not in err, err
    assert (printed["state"], printed["step"], printed["ended_by"]) == (state, 1, ended_by)
    status = json.loads((run / "status.json").read_text())
    assert (status["state"], status["step"], status["ended_by"]) == (state, 1, ended_by)
    assert read_progress(run).state == state
    assert last_checkpoint(run).step == 1  # a cancel and a planned stop both leave a checkpoint to resume
    assert (run / "final").exists() == (state == "completed")  # a cancelled run is not passed off as a model


def test_a_full_disk_fails_the_run_in_one_line_and_leaves_no_torn_checkpoint(snapshot, tmp_path, capsys,
                                                                             monkeypatch):
    """The disk fills while step 2's checkpoint is half written (its weights saved, its optimizer state not)."""
    from transformers import Trainer

    original = Trainer._save_optimizer_and_scheduler

    def save(self, output_dir):  # noqa: ANN001, ANN202
        if self.state.global_step == 2:
            raise OSError(errno.ENOSPC, "No space left on device", os.path.join(output_dir, "optimizer.pt"))
        return original(self, output_dir)

    monkeypatch.setattr(Trainer, "_save_optimizer_and_scheduler", save)
    run = tmp_path / "run"
    code, err, _ = _train(capsys, snapshot, run, "--max-steps", "3")
    lines = err.strip().splitlines()
    assert code == 2 and lines[-1].startswith("error: the disk holding") and "Traceback" not in err, err
    assert "is full (no space left on device) while saving checkpoint-2, removed" in lines[-1]
    assert "rerun the same command to resume from checkpoint-1" in lines[-1]
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "failed" and status["error"].startswith("the disk holding")  # not left "running"
    assert read_progress(run).state == "failed"
    assert [c.step for c in list_checkpoints(run)] == [1] and not (run / "checkpoint-2").exists()
    assert not (run / "final").exists()


def test_a_worker_cancelled_while_it_starts_exits_130(snapshot, tmp_path):
    """The app's Cancel before the first step: the detached worker (a real process) says cancelled, not done."""
    from reflectrm.training.grpo import TrainConfig

    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"data": str(snapshot), "model": str(DEMO_MODEL_DIR),
                                              "config": TrainConfig(device="cpu").to_dict()}))
    (run / "cancel").touch()
    done = subprocess.run([sys.executable, "-m", "reflectrm.training.worker", str(run)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 130, done.stderr
    status = json.loads((run / "status.json").read_text())
    assert (status["state"], status["ended_by"]) == ("cancelled", "cancel")
