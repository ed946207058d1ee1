"""Training runs as background jobs: start one in its own process, watch it, cancel it, resume it.

    job = start_run("runs/r1", data="data/demo-1a2b3c4d5e6f", model="reflectrm/demo/model",
                    config=TrainConfig(max_steps=100, ...))
    p = job.progress()            # RunProgress: state, step / total_steps, eta_s, loss and reward curves,
                                  # recent completions, log tail, checkpoints
    job.cancel()                  # stops at the next step with a checkpoint; job.cancel(force=True) kills
    job = resume_run("runs/r1")   # continues from the last checkpoint, same data, model and config
    job = attach("runs/r1")       # a handle on a run started by an earlier process (after an app restart)

Everything a job knows lives in its run folder (`reflectrm.training.runs`), so any process can
watch any run; nothing here keeps module-level state. The worker is `python -m
reflectrm.training.worker RUN_DIR`, which trains with `reflectrm.training.grpo.train`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reflectrm.errors import InputError
from reflectrm.files.locks import exclusive
from reflectrm.training.grpo import TrainConfig
from reflectrm.training.runs import (
    Checkpoint,
    RunFiles,
    RunProgress,
    check_checkpoint,
    check_processes,
    last_checkpoint,
    list_checkpoints,
    now_iso,
    pid_alive,
    process_start,
    read_progress,
)


@dataclass
class TrainJob:
    """A handle on one run. `process` is set when this process started it (and reaps it)."""

    run_dir: Path
    process: subprocess.Popen[bytes] | None = None
    _waited_for_exit: bool = field(default=False, repr=False)  # once only: a worker that hangs after its outcome

    def _reap(self) -> None:
        if self.process is not None:
            self.process.poll()

    def progress(self, *, completions: int = 16) -> RunProgress:
        self._reap()
        p = read_progress(self.run_dir, completions=completions)
        if p.finished and self.process is not None and self.process.returncode is None and not self._waited_for_exit:
            # the worker records its outcome before its last words (a traceback) reach the log:
            # let the process this handle started exit, then read again
            self._waited_for_exit = True
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                return p
            p = read_progress(self.run_dir, completions=completions)
        return p

    @property
    def alive(self) -> bool:
        self._reap()
        status = RunFiles(self.run_dir).read_status()
        return pid_alive(status.get("pid"), status.get("pid_start"))

    def cancel(self, *, force: bool = False) -> None:
        cancel_run(self.run_dir, force=force)
        self._reap()

    def wait(self, timeout_s: float | None = None, *, poll_s: float = 0.5) -> RunProgress:
        """Block until the run finishes (or `timeout_s` passes); returns its progress."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            p = self.progress()
            if p.finished or (deadline is not None and time.monotonic() >= deadline):
                return p
            time.sleep(poll_s)

    def checkpoints(self) -> list[Checkpoint]:
        return list_checkpoints(self.run_dir)


def start_run(
    run_dir: str | Path,
    *,
    data: str | Path,
    model: str,
    config: TrainConfig,
    env: Mapping[str, str] | None = None,
) -> TrainJob:
    """Start a new run in its own process and return at once.

    Refuses a folder that already holds a run (resume it with `resume_run`, or pick a new folder).
    `env` adds environment variables for the worker (CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS, ...).
    """
    files = RunFiles(Path(run_dir))
    if files.run.exists() or list_checkpoints(files.root):
        raise InputError(f"{files.root} already holds a run: resume it, or pass a new run folder")
    if not Path(data).is_dir():
        raise InputError(f"dataset {str(data)!r} does not exist: build data first (`reflectrm build-data`)")
    _check_free(files)
    files.root.mkdir(parents=True, exist_ok=True)
    spec = {"data": str(Path(data).resolve()), "model": model, "config": config.to_dict(), "created_at": now_iso()}
    files.run.write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
    return _launch(files, resume=False, env=env)


def resume_run(run_dir: str | Path, *, max_steps: int | None = None, env: Mapping[str, str] | None = None) -> TrainJob:
    """Continue a run from its last checkpoint, with the data, model and config it started with.

    `max_steps` changes how long it runs in all (to train a finished run further, or stop sooner).
    """
    files = RunFiles(Path(run_dir))
    if not files.run.exists():
        raise InputError(f"{files.root} holds no run to resume: start one with start_run")
    run_spec(files.root)  # a damaged run.json refused here, not in the worker's log
    _check_free(files)
    if (resumable := last_checkpoint(files.root)) is not None:  # refused here, before a write, not in the worker's log
        check_checkpoint(resumable)
        check_processes(resumable, processes=1)  # the worker is one process
    if max_steps is not None:
        spec = run_spec(files.root)
        spec["config"] = TrainConfig.from_dict(spec["config"]).with_(max_steps=max_steps).to_dict()
        files.run.write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
    status = files.read_status()
    if pid_alive(status.get("pid"), status.get("pid_start")) and status.get("state") in ("starting", "running"):
        raise InputError(f"the run in {files.root} is still running (pid {status['pid']}): cancel it first")
    if status.get("state") == "completed" and max_steps is None:
        raise InputError(f"the run in {files.root} has completed: pass max_steps to train it further")
    return _launch(files, resume=True, env=env)


def attach(run_dir: str | Path) -> TrainJob:
    """A handle on an existing run folder (started by this or another process)."""
    files = RunFiles(Path(run_dir))
    if not files.run.exists() and not files.status.exists():
        raise InputError(f"{files.root} holds no run")
    return TrainJob(files.root)


def _check_free(files: RunFiles) -> None:
    """Refuse (`OutputBusy`) a folder a run trains in now, before anything in it is written.

    The worker takes the folder's lock itself (`grpo.train`): this only makes the refusal come from the launcher."""
    with exclusive(files.root, flag="the run folder", folder=True):
        pass


def _launch(files: RunFiles, *, resume: bool, env: Mapping[str, str] | None) -> TrainJob:
    files.cancel.unlink(missing_ok=True)
    files.update_status(state="starting", step=files.read_status().get("step", 0), error="", pid=None,
                        finished_at=None, finished_unix=None, started_unix=time.time())
    command = [sys.executable, "-m", "reflectrm.training.worker", str(files.root)] + (["--resume"] if resume else [])
    with files.log.open("ab") as log:
        log.write(f"\n=== {now_iso()} {'resume' if resume else 'start'}: {' '.join(command)}\n".encode())
        log.flush()
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "TOKENIZERS_PARALLELISM": "false", **(env or {})},
            start_new_session=True,  # Ctrl-C in the launching terminal or app does not reach the worker
        )
    files.update_status(pid=process.pid, pid_start=process_start(process.pid))
    return TrainJob(files.root, process)


def cancel_run(run_dir: str | Path, *, force: bool = False) -> None:
    """Ask a run to stop: it finishes its step, saves a checkpoint and exits (`cancelled`).

    `force` kills it at once instead (its last checkpoint stays; the step in progress is lost).
    """
    files = RunFiles(Path(run_dir))
    files.cancel.touch()
    status = files.read_status()
    pid = status.get("pid")
    if not pid_alive(pid, status.get("pid_start")):
        if status.get("state") in ("starting", "running"):
            files.update_status(state="cancelled", finished_at=now_iso(), finished_unix=time.time())
        return
    if force:
        pid = int(pid)
        if os.getpgid(pid) == pid:  # a worker leads its own session: take any children (data loaders) with it
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
        files.update_status(state="cancelled", error="killed on request", finished_at=now_iso(),
                            finished_unix=time.time())
    else:
        os.kill(int(pid), signal.SIGTERM)  # the worker turns it into a stop at the next step boundary


def reconcile(run_dir: str | Path) -> str:
    """Record a run whose process is gone while its status says running as `interrupted`; returns the state.

    The app calls this for every run at start-up: runs that were going when it (or the machine)
    stopped become resumable `interrupted` runs.
    """
    files = RunFiles(Path(run_dir))
    status = files.read_status()
    state = status.get("state", "")
    if state in ("starting", "running") and not pid_alive(status.get("pid"), status.get("pid_start")):
        files.update_status(state="interrupted", finished_at=now_iso(), finished_unix=time.time())
        return "interrupted"
    return state


def run_spec(run_dir: str | Path) -> dict[str, Any]:
    """What a run trains: {data, model, config (a TrainConfig dict), created_at}."""
    files = RunFiles(Path(run_dir))
    try:
        spec = json.loads(files.run.read_bytes())
    except FileNotFoundError:
        raise InputError(f"{files.root} holds no run (no run.json)") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        spec = None
    if not (isinstance(spec, dict) and isinstance(spec.get("config"), dict) and isinstance(spec.get("model"), str)
            and isinstance(spec.get("data"), str)):
        raise InputError(f"{files.run} is damaged (not the JSON object `reflectrm train` wrote): start the run again "
                         "in a new folder")
    return spec
