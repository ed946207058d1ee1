"""The trainer callback that keeps a run folder current and stops a run on request (imports transformers)."""

from __future__ import annotations

import threading
import time
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from reflectrm.training.runs import PROCESS_COUNT, RunFiles

# Why a run stops, as a number every process can all-reduce: the largest wins (a cancel over a spent budget).
GO, TIME_BUDGET, CANCEL = 0, 1, 2
ENDED_BY = {TIME_BUDGET: "time budget", CANCEL: "cancel"}


class RunCallback(TrainerCallback):
    """Writes status and metrics to the run folder; stops (with a checkpoint) when asked.

    A stop is asked for by setting `stop` (in-process: Ctrl-C, a worker's SIGTERM) or by creating
    the run's `cancel` file (another process: the app). The trainer finishes the current step,
    saves a checkpoint and returns, so the run resumes from there.

    Several processes (torchrun, accelerate): rank 0 alone writes the folder, reads the cancel file and
    its clock for the time budget; its decision (or a signal any process got) is all-reduced every step,
    so every process stops after the same step.
    """

    def __init__(self, files: RunFiles, stop: threading.Event, *, max_time_s: float | None = None,
                 decay_over_time: bool = False) -> None:
        self.files = files
        self.stop = stop
        self.max_time_s = max_time_s
        self.decay_over_time = decay_over_time and max_time_s is not None
        self._lr: float | None = None  # the rate the last step used, when this callback sets it
        self._paced = False
        self._began = time.monotonic()
        self.ended_by = ""  # "cancel" or "time budget" once this callback stopped the run; "" otherwise

    def _stop_wanted(self, *, main: bool) -> int:
        """This process's view: a signal it got (`stop`), and on rank 0 the cancel file and the time budget."""
        if main and not self.stop.is_set() and self.files.cancel.exists():
            self.stop.set()
        if self.stop.is_set():
            return CANCEL
        out_of_time = self.max_time_s is not None and time.monotonic() - self._began >= self.max_time_s
        return TIME_BUDGET if main and out_of_time else GO

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._began = time.monotonic()
        if state.is_world_process_zero:
            now = time.time()
            self._paced = False
            self.files.update_status(state="running", step=state.global_step, first_step=state.global_step,
                                     total_steps=state.max_steps, started_unix=now, pace_since_unix=now,
                                     step_unix=None, deadline_unix=now + self.max_time_s if self.max_time_s else None)

    def on_step_begin(self, args: Any, state: Any, control: Any, optimizer: Any = None, **kwargs: Any) -> None:
        if not self.decay_over_time or optimizer is None:
            return
        # linear decay to 0 over the time budget; rank 0's clock decides, so every rank steps alike
        left = 1.0 - (time.monotonic() - self._began) / self.max_time_s
        factor = _from_rank0(min(1.0, max(0.0, left)), args.device)
        self._lr = args.learning_rate * factor
        for group in optimizer.param_groups:  # a "constant" scheduler leaves what is set here alone
            group["lr"] = self._lr

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if state.is_world_process_zero:
            status = {"step": state.global_step, "step_unix": time.time()}
            if not self._paced:  # the first step of a start pays for warm-up: time the pace from its end
                self._paced = True
                status.update(pace_since_unix=status["step_unix"], first_step=state.global_step)
            self.files.update_status(**status)
        reason = _largest(self._stop_wanted(main=state.is_world_process_zero), args.device)
        if reason != GO:
            # a cancel, or the time budget spent (a completed run): stop with a checkpoint
            self.ended_by = ENDED_BY[reason]
            control.should_training_stop = True
            control.should_save = True
        if state.max_steps and state.global_step >= state.max_steps:
            control.should_save = True  # the last step always leaves a checkpoint to resume or load
        return control

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if state.is_world_process_zero and logs and "train_runtime" not in logs:
            if self._lr is not None and "learning_rate" in logs:
                logs["learning_rate"] = self._lr  # the trainer reports its constant scheduler's rate
            self.files.append(self.files.metrics, {"step": state.global_step, "time": time.time(), **logs})


class ProcessCount(TrainerCallback, ExportableState):
    """Records in every checkpoint how many processes trained it (trainer_state.json's `stateful_callbacks`, under
    `runs.PROCESS_COUNT`): a resume on another count is refused (`runs.check_processes`)."""

    def __init__(self, processes: int = 1) -> None:
        self.processes = processes

    def state(self) -> dict[str, Any]:
        return {"args": {"processes": self.processes}, "attributes": {}}




def _largest(value: int, device: Any) -> int:
    """The largest `value` over the processes (one process: `value`): every rank must stop at the same step or the
    others wait forever in the next step's collectives."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return value
    import torch

    t = torch.tensor([value], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def _from_rank0(value: float, device: Any) -> float:
    """Rank 0's `value` on every process (a single process: `value`)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return value
    import torch

    t = torch.tensor([value], device=device, dtype=torch.float64)
    dist.broadcast(t, src=0)
    return float(t.item())
