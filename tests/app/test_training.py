"""The Train tab's service: runs on a store snapshot in their own processes (the real demo judge, real SQLite).

Fast tests check the refusals and the bookkeeping with hand-made run folders; `slow` ones train the
demo judge for a few steps (2 prompts x 4 samples, short completions, one CPU thread).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

import pytest

from reflectrm_app.records import TrainingRunView, TrainRequest
from reflectrm_app.resources import ModelHolder
from reflectrm_app.services import Services
from reflectrm_app.services.runtime import default_runs_dir
from reflectrm_app.services.training import slug, train_config
from reflectrm_app.settings import AppSettings
from reflectrm.backends import ScriptedBackend
from reflectrm.demo import DEMO_MODEL_DIR
from reflectrm.demo.tasks import make_pairs
from reflectrm.errors import ConfigError, InputError, ReflectRMError
from reflectrm.training import jobs
from reflectrm.training.grpo import TrainConfig
from reflectrm.training.runs import RunFiles, list_checkpoints, process_start, read_progress
from tests.app.conftest import make_services
from tests.db.helpers import scripted_output

FAST = {"learning_rate": 5e-5, "batch_size": 2, "num_generations": 4, "max_completion_length": 96,
        "save_steps": 50, "gradient_checkpointing": False}


def request(snapshot: str = "s1", **changes: object) -> TrainRequest:
    """A request as the Train form makes it (its fields by name; `TrainConfig`'s for the run's settings)."""
    return TrainRequest.from_form(**{"snapshot": snapshot, "base_model": str(DEMO_MODEL_DIR), "max_steps": 2, **FAST,
                                     **changes})


def open_services(db: str, runs: Path) -> Services:
    """The app's services as `reflectrm app` builds them (a restart is a second call)."""
    return make_services(db, ScriptedBackend(scripted_output), runs_dir=runs, device="cpu", threads=1)


@pytest.fixture
def paths(tmp_path: Path) -> tuple[str, Path]:
    return f"sqlite:///{tmp_path / 'app.db'}", tmp_path / "runs"


@pytest.fixture
def train_services(paths: tuple[str, Path]) -> Iterator[Services]:
    """Services over a store holding snapshots "empty" (taken first) and "s1": corrected demo-arithmetic
    judgments (scripted judge)."""
    services = open_services(*paths)
    services.curation.snapshot("empty")
    for pair in make_pairs(8, seed=7, source="demo-arith"):
        result = services.judging.judge(pair)
        services.review.correct(result.judgment_id, verdict=pair.label, author="tester")
    services.curation.snapshot("s1")
    yield services
    for run in services.training.runs():  # nothing outlives a test
        if run.active:
            services.training.cancel(run.id)
            services.training.cancel(run.id)
    services.close()


def wait_for(services: Services, run_id: int, done, timeout_s: float = 300) -> TrainingRunView:  # noqa: ANN001
    """Watch a run (as the tab's timer does) until `done(view)`; returns that view."""
    deadline = time.monotonic() + timeout_s
    while True:
        view = services.training.watch(run_id)
        if done(view):
            return view
        assert time.monotonic() < deadline, f"run #{run_id} stuck at {view.progress.state}: {view.progress.log_tail}"
        time.sleep(0.5)


def finished(view: TrainingRunView) -> bool:
    return view.progress.finished


# --- pure helpers -----------------------------------------------------------------------------------------------


def test_runs_live_beside_a_sqlite_store_and_folder_names_are_safe(tmp_path: Path) -> None:
    assert default_runs_dir(f"sqlite:///{tmp_path / 'x.db'}") == tmp_path / "runs"
    assert default_runs_dir("sqlite://") == Path("runs").resolve()
    assert default_runs_dir("postgresql+psycopg://u@h/db") == Path("runs").resolve()
    assert slug("../../etc/passwd") == "etc-passwd"
    assert slug("  ") == "snapshot"


def test_the_form_maps_onto_a_valid_train_config() -> None:
    settings = AppSettings(device="cpu", threads=1)
    config = train_config(request(batch_size=3, num_generations=3), settings)
    # 9 completions per step: the pass size must divide them (TrainConfig would refuse 8)
    assert (config.per_device_batch_size, config.accumulation_steps()) == (1, 9)
    assert (config.device, config.threads, config.max_steps) == ("cpu", 1, 2)
    assert (config.max_time_s, config.lr_scheduler, config.bf16) == (None, "constant", None)
    budgeted = train_config(request(max_minutes=1.5, decay_over_time=True, precision="bf16"), settings)
    assert (budgeted.max_time_s, budgeted.lr_scheduler, budgeted.bf16) == (90.0, "linear-time", True)
    assert train_config(request(precision="fp32"), settings).bf16 is False


def test_a_request_restates_no_train_config_default() -> None:
    # the trap: a form record with its own copy of TrainConfig's fields and defaults drifts from the class
    asked = TrainRequest.from_form(snapshot="s", base_model="m", max_steps=5)
    assert asked.config == TrainConfig(max_steps=5)
    assert (asked.max_minutes, asked.decay_over_time, asked.precision, asked.mix) == (0, False, "auto", "paper")
    assert not {f.name for f in fields(TrainRequest)} & {f.name for f in fields(TrainConfig)}
    budgeted = TrainRequest.from_form(snapshot="s", base_model="m", max_steps=5, max_minutes=1.5,
                                      decay_over_time=True, precision="fp32")
    assert (budgeted.max_minutes, budgeted.decay_over_time, budgeted.precision) == (1.5, True, "fp32")
    with pytest.raises(InputError, match="max steps must be a whole number of at least 1, got -1"):
        TrainRequest(snapshot="s", base_model="m", config=TrainConfig())  # epochs: a form run is bounded by steps


def test_the_form_offers_the_paper_s_settings_for_a_model_that_is_not_the_demo_judge(tmp_path: Path) -> None:
    services = open_services(f"sqlite:///{tmp_path / 'app.db'}", tmp_path / "runs")
    try:
        services.training.active_judge = lambda: "Qwen/Qwen3-4B"
        d = services.training.defaults()
        paper = TrainConfig()
        assert (d.base_model, d.config.max_steps, d.config.gradient_checkpointing) == ("Qwen/Qwen3-4B", 100, True)
        assert (d.config.learning_rate, d.config.batch_size, d.config.num_generations, d.config.save_steps) == \
            (paper.learning_rate, paper.batch_size, paper.num_generations, paper.save_steps)
        assert d.config.max_completion_length == services.runtime.settings.judge.max_new_tokens
    finally:
        services.close()


# --- refusals: one clear line naming the problem and the fix ----------------------------------------------------


@pytest.mark.parametrize(
    "changes, error, fragment",
    [
        pytest.param({"snapshot": ""}, InputError, "choose a snapshot", id="no-snapshot"),
        pytest.param({"snapshot": "nope"}, InputError, "'nope' does not exist", id="unknown-snapshot"),
        # a snapshot taken before anyone corrected anything: nothing to train on
        pytest.param({"snapshot": "empty"}, InputError, "holds no examples", id="empty-snapshot"),
        pytest.param({"max_steps": 0}, InputError, "at least 1", id="zero-steps"),
        pytest.param({"base_model": "  "}, InputError, "give a base model", id="no-model"),
        pytest.param({"base_model": "/no/such/model"}, InputError, "outside the app's data folder",
                     id="model-path-outside-the-data-folder"),  # refused alike whether or not it exists
        # GRPO compares a group: one sample per prompt has no advantage to learn from
        pytest.param({"num_generations": 1}, ConfigError, "num_generations must be", id="group-of-one"),
        pytest.param({"learning_rate": 0.0}, ConfigError, "learning_rate must be a finite number > 0", id="zero-lr"),
        pytest.param({"decay_over_time": True}, InputError, "needs a budget", id="decay-without-budget"),
        pytest.param({"max_minutes": -1.0}, InputError, "minutes >= 0", id="negative-budget"),
        pytest.param({"precision": "fp8"}, InputError, "precision must be one of auto, bf16, fp32", id="precision"),
    ],
)
def test_bad_requests_are_refused_and_nothing_is_recorded(train_services: Services, paths, changes: dict,
                                                         error: type, fragment: str) -> None:
    with pytest.raises(error, match=fragment):
        train_services.training.start(request(**changes))
    assert train_services.runtime.store.training_runs() == []
    assert not paths[1].exists() or not any(p.name.startswith("run-") for p in paths[1].iterdir())


def _fake_run(services: Services, runs: Path, *, pid: int, state: str = "running", step: int = 3) -> int:
    """A run folder and row as a worker leaves them (no worker: `pid` says whether its process lives)."""
    run_dir = runs / f"fake-{pid}-{state}"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"data": "", "model": "demo", "config": {"max_steps": 10}}))
    RunFiles(run_dir).update_status(state=state, pid=pid, pid_start=process_start(pid), step=step, total_steps=10,
                                    started_unix=time.time())
    run = services.runtime.store.add_training_run(snapshot_id=None, base_model="demo", run_dir=str(run_dir),
                                          config={"max_steps": 10}, status=state)
    return run.id


def test_a_run_whose_process_lives_blocks_another_start(paths) -> None:
    services = open_services(*paths)
    try:
        run_id = _fake_run(services, paths[1], pid=os.getpid())  # this process: alive
        with pytest.raises(InputError, match=rf"run #{run_id} is still running \(step 3 of 10\): cancel it"):
            services.training.start(request())
        with pytest.raises(InputError, match="one run trains at a time"):
            services.training.resume(run_id)
    finally:
        services.close()


def test_restarting_the_app_marks_runs_whose_process_is_gone_interrupted(paths) -> None:
    services = open_services(*paths)
    gone = _dead_pid()
    dead = _fake_run(services, paths[1], pid=gone)
    finished_run = _fake_run(services, paths[1], pid=gone, state="completed")
    services.close()
    # (the row still says running: nobody watched the run since its process went away)
    restarted = open_services(*paths)
    try:
        run = restarted.runtime.store.training_run(dead)
        assert (run.status, run.step, run.finished_at is not None) == ("interrupted", 3, True)
        assert RunFiles(Path(run.run_dir)).read_status()["state"] == "interrupted"
        assert restarted.runtime.store.training_run(finished_run).status == "completed"
        with pytest.raises(InputError, match="is interrupted, not running"):
            restarted.training.cancel(dead)
    finally:
        restarted.close()


@pytest.mark.parametrize(("checkpoints", "said"), [
    pytest.param((), "starts again from step 0: it stopped before its first checkpoint", id="cancelled-at-step-0"),
    pytest.param((2, 4), "from its checkpoint at step 4", id="two-checkpoints"),  # the last one, not the first
])
def test_resume_says_where_it_starts(paths, checkpoints: tuple[int, ...], said: str) -> None:
    from reflectrm_app.ui import views

    services = open_services(*paths)
    try:
        run_id = _fake_run(services, paths[1], pid=_dead_pid(), state="cancelled", step=max(checkpoints, default=0))
        for step in checkpoints:
            folder = Path(services.runtime.store.training_run(run_id).run_dir) / f"checkpoint-{step}"
            folder.mkdir()
            (folder / "trainer_state.json").write_text("{}")
            (folder / "config.json").write_text("{}")
        # it used to say "resumed from its last checkpoint" when there was none
        assert said in views.resumed_text(run_id, services.training.resume_point(run_id))
    finally:
        services.close()


class _LaunchedWorker:
    """What `jobs.resume_run` was asked (the worker itself is left out: the plan is what is tested)."""

    def __init__(self) -> None:
        self.max_steps: list[int | None] = []

    def __call__(self, run_dir, *, max_steps=None, env=None):  # noqa: ANN001, ANN204
        self.max_steps.append(max_steps)
        return None


@pytest.mark.parametrize(("state", "form_steps", "asked", "planned"), [
    # the reported trap: a fresh form says 100, and an interrupted 10-step run resumed as "step 3 / 100"
    pytest.param("interrupted", 100, None, 10, id="interrupted-keeps-its-plan"),
    pytest.param("cancelled", 100, None, 10, id="cancelled-keeps-its-plan"),
    pytest.param("failed", 4, None, 10, id="failed-keeps-its-plan-under-a-smaller-form"),
    # a completed run has no plan left: the form's Max steps says how far to train it further
    pytest.param("completed", 25, 25, 25, id="completed-trains-further-to-the-form"),
    pytest.param("completed", 3, "completed all its 3 steps", 10, id="completed-and-the-form-no-further"),
])
def test_resume_from_the_form_keeps_a_stopped_runs_own_plan(
    paths, monkeypatch: pytest.MonkeyPatch, state: str, form_steps: int, asked: int | str | None, planned: int,
) -> None:
    from reflectrm_app.services import training as training_module

    launched = _LaunchedWorker()
    monkeypatch.setattr(training_module.jobs, "resume_run", launched)
    services = open_services(*paths)
    try:
        run_id = _fake_run(services, paths[1], pid=_dead_pid(), state=state)
        if isinstance(asked, str):
            with pytest.raises(InputError, match=asked):
                services.training.resume_from_form(run_id, form_steps=form_steps)
            assert launched.max_steps == []
        else:
            run = services.training.resume_from_form(run_id, form_steps=form_steps)
            assert launched.max_steps == [asked]
            assert run.config["max_steps"] == planned
        assert services.runtime.store.training_run(run_id).config["max_steps"] == planned
    finally:
        services.close()


def _dead_pid() -> int:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# --- the active judge -------------------------------------------------------------------------------------------


def test_switching_the_judge_is_atomic_and_a_failed_load_changes_nothing() -> None:
    first, second = ScriptedBackend(scripted_output), ScriptedBackend(scripted_output)
    holder = ModelHolder(lambda: first, name="first")
    assert holder.get() is first
    loading = threading.Event()
    release = threading.Event()

    def slow_loader():
        loading.set()
        release.wait(5)
        return second

    switcher = threading.Thread(target=holder.switch, args=(slow_loader,), kwargs={"name": "second"})
    switcher.start()
    loading.wait(5)
    assert holder.get() is first and holder.name == "first"  # the current judge serves while the next loads
    release.set()
    switcher.join(5)
    assert holder.get() is second and holder.name == "second"

    def broken():
        raise ReflectRMError("no weights here")

    with pytest.raises(ReflectRMError, match="no weights"):
        holder.switch(broken, name="broken")
    assert holder.get() is second and holder.name == "second"


# --- real runs ----------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_run_trains_is_recorded_and_its_checkpoint_becomes_the_judge(train_services: Services) -> None:
    services = train_services
    run = services.training.start(request())
    assert (run.status, run.snapshot_name, run.config["max_steps"]) == ("starting", "s1", 2)
    view = wait_for(services, run.id, finished)
    p = view.progress
    assert p.state == "completed", p.log_tail
    assert [s for s, _ in p.loss] == [1, 2] and all(0.0 <= r <= 1.0 for _, r in p.reward)
    assert p.completions and {c["task"] for c in p.completions} <= {"response", "analysis"}
    assert [(c.step, c.final) for c in p.checkpoints] == [(2, False), (2, True)]

    stored = services.runtime.store.training_run(run.id)
    assert (stored.status, stored.step, stored.total_steps) == ("completed", 2, 2)
    assert stored.output_model == str(Path(run.run_dir) / "final") and stored.finished_at is not None
    assert stored.metrics["logged_steps"] == 2 and stored.metrics["loss"] == p.loss[-1][1]
    assert "completed at step 2" in stored.log_tail

    checkpoint = str(p.checkpoints[0].path)
    assert services.runtime.use_judge(services.training.checkpoint(run.id, checkpoint).path) == checkpoint
    assert services.runtime.active_judge() == checkpoint == services.runtime.model.get().model_id
    judged = services.judging.judge(make_pairs(1, seed=99)[0], strategy="greedy")
    assert judged.judgment.model == checkpoint and judged.judgment.rollouts[0].num_tokens > 0
    assert services.training.defaults().base_model == checkpoint  # the next run starts from the new judge

    with pytest.raises(InputError, match="is not a checkpoint of run"):
        services.training.checkpoint(run.id, str(DEMO_MODEL_DIR))
    with pytest.raises(InputError, match="completed all its 2 steps: set max steps above 2"):
        services.training.resume(run.id, max_steps=2)


@pytest.mark.slow
def test_cancel_then_an_app_restart_then_resume_from_the_last_checkpoint(train_services: Services, paths) -> None:
    """The whole job lifecycle in real worker processes: cancel, resume, a kill nobody records, an app restart,
    and a resume past a checkpoint a kill cut off mid-save (the jobs layer's and the app's checks in one run)."""
    services = train_services
    run = services.training.start(request(max_steps=40, save_steps=1))
    view = wait_for(services, run.id, lambda v: v.progress.step >= 1 or v.progress.finished)
    assert not services.training.cancel(run.id)  # the first Cancel stops after the step, with a checkpoint
    view = wait_for(services, run.id, finished, timeout_s=120)
    assert view.progress.state == "cancelled", view.progress.log_tail
    at = view.progress.step
    assert services.runtime.store.training_run(run.id).status == "cancelled"
    assert 1 <= at < 40 and view.checkpoints[-1].step == at and not view.checkpoints[-1].final

    services.training.resume(run.id)
    view = wait_for(services, run.id, lambda v: v.progress.step > at or v.progress.finished)
    assert view.progress.state == "running", view.progress.log_tail
    pid = view.progress.pid
    os.kill(pid, signal.SIGKILL)  # the machine went down with the app: nobody records an end
    os.waitpid(pid, 0)
    services.close()
    assert services.runtime.store.training_run(run.id).status == "running"
    assert read_progress(run.run_dir).state == "interrupted"  # its folder, read: the process is gone

    restarted = open_services(*paths)
    try:
        assert restarted.runtime.store.training_run(run.id).status == "interrupted"
        assert jobs.reconcile(run.run_dir) == "interrupted"  # the restart recorded it in the folder too
        last = restarted.training.watch(run.id).checkpoints[-1].step
        assert last >= at
        # what a kill in the middle of a save leaves: a newer checkpoint without its trainer_state.json
        half_saved = Path(run.run_dir) / f"checkpoint-{last + 5}"
        shutil.copytree(Path(run.run_dir) / f"checkpoint-{last}", half_saved)
        (half_saved / "trainer_state.json").unlink()
        assert list_checkpoints(run.run_dir)[-1].step == last
        restarted.training.resume(run.id, max_steps=last + 1)
        view = wait_for(restarted, run.id, finished)
        assert view.progress.state == "completed", view.progress.log_tail
        assert view.progress.step == last + 1 and view.checkpoints[-1].final
        stored = restarted.runtime.store.training_run(run.id)
        assert (stored.status, stored.step, stored.config["max_steps"]) == ("completed", last + 1, last + 1)
        log = (Path(run.run_dir) / "train.log").read_text()
        assert log.count(f"resuming from {run.run_dir}/checkpoint-") == 2
        assert log.rsplit("resuming from ", 1)[1].split()[0] == f"{run.run_dir}/checkpoint-{last}"  # newest complete
    finally:
        restarted.close()


@pytest.mark.slow
def test_a_crashed_run_is_failed_with_its_log(train_services: Services, tmp_path: Path) -> None:
    # every file a model folder needs, so the start passes its checks, but weights that are not safetensors: the
    # worker crashes loading them (a folder without a model_type is now refused before a worker starts); a base
    # model typed as a path lies in the data folder
    not_a_model = train_services.runtime.data_root / "not-a-model"
    not_a_model.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(DEMO_MODEL_DIR, not_a_model)
    (not_a_model / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    run = train_services.training.start(request(base_model=str(not_a_model)))
    view = wait_for(train_services, run.id, finished, timeout_s=180)
    assert view.progress.state == "failed"
    stored = train_services.runtime.store.training_run(run.id)
    assert stored.status == "failed" and stored.error and stored.finished_at is not None
    assert "Traceback" in stored.log_tail and stored.output_model == ""
    assert stored.error.split(":")[0] in stored.log_tail  # the exception the log shows is the one recorded
