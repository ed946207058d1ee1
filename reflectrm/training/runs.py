"""A training run's folder: what the trainer writes and what a watcher (CLI, app) reads.

    RUN_DIR/
      run.json            what to train: data, model, TrainConfig (written before start)
      status.json         state, pid, step / total, times, error (rewritten atomically)
      metrics.jsonl       one line per logged step: loss, reward, learning rate, ... (append-only)
      completions.jsonl   recent sampled completions with their reward (append-only)
      train.log           the worker's stdout and stderr (detached runs)
      cancel              present = a cancel was asked for; the trainer stops at the next step
      checkpoint-N/       trainer checkpoints (model + tokenizer + optimizer state): resumable and
                          loadable by `reflectrm judge --model` (LoRA ones hold the adapter)
      final/              the finished model (LoRA merged), loadable by `reflectrm judge --model`

Only the standard library: the app reads progress without importing torch.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from reflectrm.errors import InputError

STATES = ("starting", "running", "completed", "cancelled", "failed", "interrupted")
"""`interrupted`: the status says starting/running but its process is gone (killed, machine restarted)."""
FINISHED = ("completed", "cancelled", "failed", "interrupted")
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True, slots=True)
class RunFiles:
    """The paths of one run folder, and the small writes the trainer makes to it."""

    root: Path

    @property
    def run(self) -> Path:
        return self.root / "run.json"

    @property
    def status(self) -> Path:
        return self.root / "status.json"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def completions(self) -> Path:
        return self.root / "completions.jsonl"

    @property
    def log(self) -> Path:
        return self.root / "train.log"

    @property
    def cancel(self) -> Path:
        return self.root / "cancel"

    @property
    def final(self) -> Path:
        return self.root / "final"

    def read_status(self) -> dict[str, Any]:
        """status.json, its known fields of the wrong type left out (a damaged file reads as a run that says little)."""
        status = _read_json(self.status)
        return {k: v for k, v in status.items() if k not in STATUS_TYPES or _typed(v, STATUS_TYPES[k])}

    def update_status(self, **changes: Any) -> dict[str, Any]:
        """Merge `changes` into status.json (written to a temporary file, then renamed: never torn)."""
        status = {**self.read_status(), **changes, "updated_at": now_iso()}
        _write_json(self.status, status)
        return status

    def append(self, path: Path, row: Mapping[str, Any]) -> None:
        with path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row, ensure_ascii=False, default=_finite) + "\n")


def _finite(value: Any) -> Any:
    return float(value) if hasattr(value, "__float__") else str(value)


STATUS_TYPES: Mapping[str, str] = {
    "state": "str", "error": "str", "pid_start": "str", "pid": "count", "step": "count", "first_step": "count",
    "total_steps": "count", "started_unix": "time", "finished_unix": "time", "updated_unix": "time",
    "step_unix": "time", "pace_since_unix": "time", "deadline_unix": "time", "processes": "count",
}
"""The status fields a watcher computes with, by kind: a count is a whole number from 0 to 2**63-1, a time a finite
number (a status.json edited by hand or damaged on disk must not crash `train-status`, the app or a resume)."""


def _typed(value: Any, kind: str) -> bool:
    if value is None:
        return True
    if kind == "str":
        return isinstance(value, str)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if kind == "count":
        return isinstance(value, int) and 0 <= value < 1 << 63
    return math.isfinite(value)


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object file; {} when it is missing or damaged (not JSON, not UTF-8, not an object)."""
    try:
        raw = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return {}
    return _json_object(raw) or {}


def _write_json(path: Path, obj: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


MAX_LINE_BYTES = 1 << 20
"""A run file's line past this is damage, not a metrics row: skipped, never held in memory whole."""


@dataclass(frozen=True, slots=True)
class Rows:
    """The rows of a JSONL run file, and how many of its lines could not be read (torn, damaged, not objects)."""

    rows: list[dict[str, Any]]
    skipped: int = 0


def read_rows(path: Path, *, last: int | None = None) -> Rows:
    """The JSON-object lines of a run file that may be mid-write or damaged, in bounded memory.

    A torn last line (what a killed run leaves), a line that is not UTF-8 or not JSON, and one past
    `MAX_LINE_BYTES` are skipped and counted. `last`: only the last N lines are kept and read."""
    try:
        fh = path.open("rb")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return Rows([])
    with fh:
        lines: deque[bytes | None] = deque(maxlen=last or None)
        while raw := fh.readline(MAX_LINE_BYTES + 1):
            if len(raw) > MAX_LINE_BYTES:  # the rest of an overlong line is read past, a block at a time
                while not raw.endswith(b"\n") and (raw := fh.readline(MAX_LINE_BYTES + 1)):
                    pass
                lines.append(None)
            elif raw.strip():
                lines.append(raw)
    rows, skipped = [], 0
    for raw in lines:
        row = _json_object(raw)
        if row is None:
            skipped += 1
        else:
            rows.append(row)
    return Rows(rows, skipped)


def _json_object(raw: bytes | None) -> dict[str, Any] | None:
    """The JSON object in `raw`; None for nothing, or for bytes that are not UTF-8, not JSON or not an object."""
    if raw is None:
        return None
    try:
        row = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    return row if isinstance(row, dict) else None


def read_jsonl(path: Path, *, last: int | None = None) -> list[dict[str, Any]]:
    """Rows of a JSONL file that may be mid-write: a torn last line (or a damaged one) is skipped."""
    return read_rows(path, last=last).rows


def process_start(pid: int) -> str | None:
    """When process `pid` started, in clock ticks since boot (Linux); None where /proc is absent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22, counted after the parenthesised command name


def pid_alive(pid: int | None, started: str | None = None) -> bool:
    """Whether process `pid` still runs; with `started` (from `process_start`), also that it is the same one.

    The start time guards against a recycled pid after a reboot or a long time. A zombie counts as
    alive until its parent reaps it (`TrainJob` does).
    """
    if not pid or not isinstance(pid, int) or isinstance(pid, bool) or pid >= 1 << 31:  # a damaged status's pid
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return started is None or process_start(int(pid)) in (None, started)


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint:
    """A saved checkpoint: `reflectrm judge --model PATH` loads it; training resumes from the last one."""

    path: Path
    step: int
    lora: bool  # holds a LoRA adapter (loads with peft installed and the base model at its recorded path)
    final: bool = False


def list_checkpoints(run_dir: str | Path) -> list[Checkpoint]:
    """The run's complete checkpoints by step, then its final model if it has one.

    The trainer writes a checkpoint's `trainer_state.json` last, so a folder without one is being
    written or was cut off by a kill mid-save: it is neither listed nor resumed from.
    """
    root = Path(run_dir)
    found = []
    for p in root.glob("checkpoint-*"):
        m = _CHECKPOINT.match(p.name)
        if (m and p.is_dir() and (p / "trainer_state.json").exists()
                and ((p / "config.json").exists() or (p / "adapter_config.json").exists())):
            found.append(Checkpoint(path=p, step=int(m.group(1)), lora=(p / "adapter_config.json").exists()))
    found.sort(key=lambda c: c.step)
    final = root / "final"
    if (final / "config.json").exists():
        step = RunFiles(root).read_status().get("step") or (found[-1].step if found else 0)
        found.append(Checkpoint(path=final, step=step, lora=False, final=True))
    return found


def last_checkpoint(run_dir: str | Path) -> Checkpoint | None:
    """The newest complete trainer checkpoint (not the final model): where a resume starts."""
    checkpoints = [c for c in list_checkpoints(run_dir) if not c.final]
    return checkpoints[-1] if checkpoints else None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunProgress:
    """Everything a watcher shows about a run, read from its folder.

    Attributes:
        run_dir: the run folder.
        state: one of STATES.
        step: optimizer steps done.
        total_steps: steps the run will take (None until the trainer has started).
        elapsed_s: seconds since this (re)start.
        eta_s: estimated seconds left (None until a step of this start has finished).
        loss: (step, loss) points.
        reward: (step, mean reward) points.
        metrics: every logged row (loss, reward, reward_std, learning_rate, completions/mean_length, ...).
        completions: the most recent sampled completions: step, task, label, reward, text.
        log_tail: the end of the worker's log.
        error: why a failed run failed.
        checkpoints: saved checkpoints, then the final model.
        pid: the training process.
        skipped_metrics: metrics.jsonl lines that could not be read and are left out.
    """

    run_dir: Path
    state: str
    step: int = 0
    total_steps: int | None = None
    elapsed_s: float = 0.0
    eta_s: float | None = None
    loss: tuple[tuple[int, float], ...] = ()
    reward: tuple[tuple[int, float], ...] = ()
    metrics: tuple[dict[str, Any], ...] = ()
    completions: tuple[dict[str, Any], ...] = ()
    log_tail: str = ""
    error: str = ""
    checkpoints: tuple[Checkpoint, ...] = field(default_factory=tuple)
    pid: int | None = None
    skipped_metrics: int = 0  # metrics.jsonl lines that could not be read (a torn last line, damage): left out

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    @property
    def fraction(self) -> float:
        return min(1.0, self.step / self.total_steps) if self.total_steps else 0.0


def check_checkpoint(checkpoint: Checkpoint) -> None:
    """Refuse to resume from a checkpoint whose trainer_state.json is damaged (the trainer's traceback came after the
    model loaded), naming the checkpoint and what to do."""
    problem = _trainer_state_problem(checkpoint.path / "trainer_state.json")
    if problem:
        raise InputError(f"cannot resume from {checkpoint.path}: its trainer_state.json {problem}; delete that "
                         "checkpoint folder to resume from the one before it, or start over (`train --fresh`, or a new run)")


PROCESS_COUNT = "ProcessCount"
"""The key of trainer_state.json's `stateful_callbacks` under which a checkpoint records how many processes trained
it (`reflectrm.training.callbacks.ProcessCount`: saved with the trainer's state, so never apart from it)."""


def checkpoint_processes(checkpoint: Checkpoint) -> int | None:
    """How many processes trained `checkpoint`: its own record, else its random-number states (transformers saves
    one per process, `rng_state_K.pth`, or `rng_state.pth` for one); None when neither says."""
    state = _read_json(checkpoint.path / "trainer_state.json")
    record = state.get("stateful_callbacks")
    record = record.get(PROCESS_COUNT) if isinstance(record, dict) else None
    processes = record.get("args", {}).get("processes") if isinstance(record, dict) and isinstance(
        record.get("args"), dict) else None
    if _typed(processes, "count") and processes:
        return processes
    ranks = [m.group(1) for p in checkpoint.path.glob("rng_state*.pth") if (m := _RNG_STATE.match(p.name))]
    if not ranks:
        return None
    return max(int(r) for r in ranks if r) + 1 if any(ranks) else 1


_RNG_STATE = re.compile(r"^rng_state(?:_(\d{1,7}))?\.pth$")


def check_processes(checkpoint: Checkpoint, *, processes: int) -> None:
    """Refuse to resume a checkpoint on another number of processes than trained it, before any training work.

    Each process resumes its own data position and random state, and a step's batch is split across the
    processes: on another count the run would silently go on as a different one."""
    trained = checkpoint_processes(checkpoint)
    if trained is not None and trained != processes:
        raise InputError(
            f"cannot resume from {checkpoint.path}: it was trained by {trained} process{'es' * (trained != 1)} and "
            f"this launch has {processes} (each process resumes its own share of the data and its own random state): "
            f"resume with {trained} (`torchrun --nproc_per_node {trained} ...`"
            f"{'' if trained > 1 else ', or no launcher'}), or start over on {processes} (`train --fresh`, or a new "
            "run folder)")


def _trainer_state_problem(path: Path) -> str | None:
    try:
        state = json.loads(path.read_bytes())
    except OSError as exc:
        return f"cannot be read ({exc.strerror or type(exc).__name__})"
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return "is not valid JSON (cut off by a kill mid-save, or damaged)"
    if not isinstance(state, dict):
        return "is not a JSON object"
    if not (_typed(state.get("global_step"), "count") and state.get("global_step") is not None):
        return "has no step count (global_step)"
    if not isinstance(state.get("log_history", []), list):
        return "has a log_history that is not a list"
    return None


def check_run_dir(run_dir: str | Path) -> None:
    """Refuse a path that holds no training run (a typo would otherwise read as an "interrupted" run)."""
    files = RunFiles(Path(run_dir))
    if not files.root.exists():
        raise InputError(f"run folder {str(files.root)!r} does not exist: pass the --output of `reflectrm train`")
    if not files.root.is_dir():
        raise InputError(f"{str(files.root)!r} is a file, not a run folder: pass the --output of `reflectrm train`")
    if not (files.run.exists() or files.status.exists() or list_checkpoints(files.root)):
        raise InputError(f"{str(files.root)!r} holds no training run: pass the --output of `reflectrm train`")


def read_progress(run_dir: str | Path, *, completions: int = 16, log_chars: int = 4000) -> RunProgress:
    """A run's progress from its files (cheap: call it every second)."""
    files = RunFiles(Path(run_dir))
    status = files.read_status()
    state = status.get("state") or ("starting" if files.run.exists() else "interrupted")
    if state not in STATES or (state in ("starting", "running")
                               and not pid_alive(status.get("pid"), status.get("pid_start"))):
        state = "interrupted"
    logged = read_rows(files.metrics)
    metrics = _last_per_step(logged.rows)
    return RunProgress(
        run_dir=files.root, state=state, step=int(status.get("step") or 0), total_steps=status.get("total_steps"),
        elapsed_s=_elapsed(status, state), eta_s=_eta(status, state),
        loss=_curve(metrics, "loss"), reward=_curve(metrics, "reward"), metrics=tuple(metrics),
        completions=tuple(read_jsonl(files.completions, last=completions)), log_tail=_tail(files.log, log_chars),
        error=str(status.get("error") or ""), checkpoints=tuple(list_checkpoints(files.root)), pid=status.get("pid"),
        skipped_metrics=logged.skipped,
    )


def _last_per_step(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # A resumed run logs again from its checkpoint's step: the later line for a step wins.
    by_step: dict[int, dict[str, Any]] = {}
    for row in rows:
        if _typed(row.get("step"), "count") and row.get("step") is not None:  # a step that is not a count: no point
            by_step[row["step"]] = row
    return [by_step[s] for s in sorted(by_step)]


def _curve(rows: list[dict[str, Any]], key: str) -> tuple[tuple[int, float], ...]:
    return tuple((int(r["step"]), float(r[key])) for r in rows if r.get(key) is not None and _typed(r[key], "time"))


def _elapsed(status: Mapping[str, Any], state: str) -> float:
    started = status.get("started_unix")
    if not started:
        return 0.0
    end = status.get("finished_unix") or (time.time() if state in ("starting", "running") else status.get("updated_unix"))
    return max(0.0, float(end or started) - float(started))


def _eta(status: Mapping[str, Any], state: str) -> float | None:
    # From this start's pace only: a resumed run's earlier steps took no time in this process.
    if state != "running":
        return 0.0 if state == "completed" else None
    done = int(status.get("step") or 0) - int(status.get("first_step") or 0)
    total, pace_since = status.get("total_steps"), status.get("pace_since_unix")
    if not total or done <= 0 or not pace_since:
        return None
    per_step = (float(status.get("step_unix") or time.time()) - float(pace_since)) / done
    eta = max(0.0, (int(total) - int(status["step"])) * per_step)
    deadline = status.get("deadline_unix")  # a time budget ends the run sooner, after the step that passes it
    return min(eta, max(0.0, float(deadline) - time.time()) + per_step) if deadline else eta


def _tail(path: Path, chars: int) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, path.stat().st_size - chars))
            return fh.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
