"""Run folders read by watchers, and TrainConfig: pure tests (no training)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from reflectrm.errors import ConfigError, InputError
from reflectrm.training import jobs
from reflectrm.training.grpo import TrainConfig, grpo_args
from reflectrm.training.runs import (
    RunFiles,
    last_checkpoint,
    list_checkpoints,
    pid_alive,
    process_start,
    read_jsonl,
    read_progress,
)


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def write_run(root, *, state="running", pid=None, **status):
    files = RunFiles(root)
    root.mkdir(parents=True, exist_ok=True)
    files.run.write_text('{"config": {}, "model": "m", "data": "d"}')  # what `reflectrm train` writes, in short
    files.update_status(state=state, pid=os.getpid() if pid is None else pid, **status)
    return files


def test_progress_reads_curves_eta_and_recent_completions(tmp_path):
    now = time.time()
    files = write_run(tmp_path / "r", step=4, total_steps=10, first_step=2, started_unix=now - 50,
                      pace_since_unix=now - 20, step_unix=now)
    for step, loss, reward in [(1, 0.5, 0.1), (2, 0.4, 0.2), (3, 0.3, 0.4), (4, 0.2, 0.5)]:
        files.append(files.metrics, {"step": step, "loss": loss, "reward": reward})
    files.append(files.metrics, {"step": 2, "loss": 0.45, "reward": 0.25})  # a resumed run logs step 2 again
    for i in range(30):
        files.append(files.completions, {"step": 4, "text": f"c{i}", "reward": 1.0})
    files.log.write_text("x" * 10_000 + "the end")
    with files.metrics.open("a") as fh:
        fh.write('{"step": 5, "loss"')  # torn: being written right now
    p = read_progress(files.root, completions=5, log_chars=100)
    assert p.state == "running" and (p.step, p.total_steps) == (4, 10)
    assert p.loss == ((1, 0.5), (2, 0.45), (3, 0.3), (4, 0.2))
    assert p.reward[-1] == (4, 0.5)
    assert p.eta_s == pytest.approx(6 * 10.0, rel=0.01)  # 2 steps in 20 s since the pace mark, 6 left
    assert [c["text"] for c in p.completions] == [f"c{i}" for i in range(25, 30)]
    assert p.log_tail.endswith("the end") and len(p.log_tail) == 100
    assert p.fraction == 0.4 and not p.finished


def test_a_time_budget_caps_the_eta(tmp_path):
    """Steps alone would take 60 s more; the budget ends the run after the step that passes it (in 15 s)."""
    now = time.time()
    capped = write_run(tmp_path / "capped", step=4, total_steps=10, first_step=2, pace_since_unix=now - 20,
                       step_unix=now, deadline_unix=now + 15)
    assert read_progress(capped.root).eta_s == pytest.approx(15 + 10.0, abs=0.5)
    roomy = write_run(tmp_path / "roomy", step=4, total_steps=10, first_step=2, pace_since_unix=now - 20,
                      step_unix=now, deadline_unix=now + 600)
    assert read_progress(roomy.root).eta_s == pytest.approx(60.0, rel=0.01)


def test_a_running_status_whose_process_is_gone_reads_interrupted(tmp_path):
    files = write_run(tmp_path / "r", pid=dead_pid(), step=3)
    assert read_progress(files.root).state == "interrupted"
    assert files.read_status()["state"] == "running"  # reading changes nothing
    assert jobs.reconcile(files.root) == "interrupted"
    assert files.read_status()["state"] == "interrupted"
    assert jobs.reconcile(files.root) == "interrupted"


def test_a_recycled_pid_is_not_the_run(tmp_path):
    # trap: after a reboot the run's pid may belong to another process; its start time tells them apart
    files = write_run(tmp_path / "r", pid=os.getpid(), pid_start="1")
    if process_start(os.getpid()) is None:
        pytest.skip("no /proc on this system")
    assert not pid_alive(os.getpid(), "1")
    assert pid_alive(os.getpid(), process_start(os.getpid()))
    assert read_progress(files.root).state == "interrupted"


def test_checkpoints_are_listed_by_step_then_final(tmp_path):
    root = tmp_path / "r"
    for step, marker in [(10, "config.json"), (2, "config.json"), (5, "adapter_config.json"), (7, "config.json")]:
        (root / f"checkpoint-{step}").mkdir(parents=True)
        (root / f"checkpoint-{step}" / marker).write_text("{}")
        if step != 7:  # checkpoint-7 is being written (or a kill cut it off): no trainer_state.json yet
            (root / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    (root / "checkpoint-8").mkdir()  # no weights yet
    (root / "checkpoint-x").mkdir()
    (root / "final").mkdir()
    (root / "final" / "config.json").write_text("{}")
    RunFiles(root).update_status(step=12)
    found = list_checkpoints(root)
    assert [(c.step, c.lora, c.final) for c in found] == [(2, False, False), (5, True, False), (10, False, False),
                                                          (12, False, True)]
    assert last_checkpoint(root).step == 10  # the newest complete trainer checkpoint, never final/
    assert last_checkpoint(tmp_path / "empty") is None


def test_read_jsonl_of_a_missing_file_is_empty(tmp_path):
    assert read_jsonl(tmp_path / "none.jsonl") == []


def test_start_run_refuses_a_folder_with_a_run_and_a_missing_dataset(tmp_path):
    write_run(tmp_path / "r", state="completed")
    (tmp_path / "data").mkdir()
    with pytest.raises(InputError, match="already holds a run"):
        jobs.start_run(tmp_path / "r", data=tmp_path / "data", model="m", config=TrainConfig())
    with pytest.raises(InputError, match="does not exist"):
        jobs.start_run(tmp_path / "new", data=tmp_path / "nothing", model="m", config=TrainConfig())
    with pytest.raises(InputError, match="has completed: pass max_steps"):
        jobs.resume_run(tmp_path / "r")
    with pytest.raises(InputError, match="no run to resume"):
        jobs.resume_run(tmp_path / "new")


def test_cancelling_a_run_whose_process_is_gone_marks_it_cancelled(tmp_path):
    files = write_run(tmp_path / "r", pid=dead_pid())
    jobs.cancel_run(files.root)
    assert files.cancel.exists() and files.read_status()["state"] == "cancelled"


def test_a_job_reads_a_failed_run_only_after_its_worker_has_written_its_last_words(tmp_path):
    # the worker records `failed` first and prints the traceback after: the handle that started it waits for its exit
    files = write_run(tmp_path / "r", state="starting")
    script = ("import sys, time; from pathlib import Path; from reflectrm.training.runs import RunFiles; "
              f"RunFiles(Path({str(files.root)!r})).update_status(state='failed', error='boom'); "
              "time.sleep(1); print('Traceback (most recent call last): boom', flush=True)")
    with files.log.open("ab") as log:
        process = subprocess.Popen([sys.executable, "-c", script], stdout=log, stderr=subprocess.STDOUT)
    job = jobs.TrainJob(files.root, process)
    deadline = time.monotonic() + 60
    while not (p := job.progress()).finished and time.monotonic() < deadline:
        time.sleep(0.05)
    assert p.state == "failed" and "Traceback" in p.log_tail and process.returncode == 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param({"num_generations": 1}, "num_generations must be a whole number from 2", id="group-of-one"),
        pytest.param({"learning_rate": 0.0}, "learning_rate must be a finite number > 0", id="lr"),
        pytest.param({"batch_size": 0}, "batch_size must be a whole number from 1", id="batch"),
        pytest.param({"temperature": 0.0}, "temperature must be a finite number > 0", id="greedy-group"),
        pytest.param({"reward_weights": {"accuracy": 1.0, "lenght": 0.1}}, "reward_weights names", id="typo-reward"),
        pytest.param({"reward_weights": {}}, "reward_weights names", id="no-reward"),
        pytest.param({"scale_rewards": "yes"}, "scale_rewards", id="scale"),
        # trap: TRL checks loss_type only when the first loss is computed, after the model has loaded
        pytest.param({"loss_type": "GRPO"}, "loss_type must be one of grpo, dr_grpo", id="loss-type-case"),
        pytest.param({"loss_type": "luspo"}, "loss_type must be one of", id="loss-type-needs-other-settings"),
        pytest.param({"beta": -0.01}, "beta .* must be a finite number >= 0", id="negative-kl"),
        pytest.param({"beta": float("nan")}, "beta .* must be a finite number >= 0", id="nan-kl"),
        pytest.param({"beta": True}, "beta .* must be a finite number >= 0", id="bool-kl"),
        pytest.param({"device": "tpu"}, "device must be", id="device"),
        pytest.param({"epochs": 0, "max_steps": -1}, "epochs must be > 0", id="no-length"),
        pytest.param({"lr_scheduler": "linear-time"}, "decays over the time budget: set max_time_s",
                     id="decay-no-budget"),
    ],
)
def test_train_config_validation(change, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(**change)


def test_train_config_defaults_are_the_papers_and_round_trip():
    c = TrainConfig()
    assert (c.learning_rate, c.batch_size, c.epochs, c.max_completion_length, c.num_generations, c.temperature) == (
        1e-6, 64, 3.0, 1024, 8, 1.0)
    assert c.completions_per_step == 512 and c.accumulation_steps(1) == 64 and c.accumulation_steps(8) == 8
    assert TrainConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    with pytest.raises(ConfigError, match="unknown TrainConfig field 'lr'"):
        TrainConfig.from_dict({"lr": 1})


def test_a_batch_that_does_not_split_over_devices_says_what_to_change():
    with pytest.raises(ConfigError, match="change per_device_batch_size or batch_size"):
        TrainConfig(batch_size=3, num_generations=2, per_device_batch_size=4).accumulation_steps(1)


def test_grpo_args_map_the_config():
    args = grpo_args(
        TrainConfig(batch_size=4, num_generations=4, per_device_batch_size=8, device="cpu",
                    reward_weights={"accuracy": 1.0, "format": 0.2}), "/tmp/unused")
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (8, 2)
    assert args.generation_batch_size == 16 and args.num_generations == 4
    assert args.use_cpu and not args.bf16 and args.report_to == []
    assert args.reward_weights == [1.0, 0.2] and args.remove_unused_columns is False
    assert (args.top_k, args.top_p, args.temperature) == (0, 1.0, 1.0)


def test_grpo_args_on_a_cpu_keep_fp32_weights_under_bf16_autocast():
    args = grpo_args(TrainConfig(device="cpu", bf16=True, max_time_s=60, lr_scheduler="linear-time"), "/tmp/unused")
    assert args.bf16 and args.model_init_kwargs == {"dtype": "float32"}  # a tiny model's updates vanish in bf16
    assert args.lr_scheduler_type == "constant"  # the run callback decays the rate, not the trainer
    assert grpo_args(TrainConfig(device="cpu"), "/tmp/unused").model_init_kwargs == {"dtype": "float32"}


def test_the_time_decay_sets_the_rate_each_step_from_the_budget_left(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from reflectrm.training import callbacks

    clock = [1000.0]
    monkeypatch.setattr(callbacks.time, "monotonic", lambda: clock[0])
    cb = callbacks.RunCallback(RunFiles(tmp_path), threading.Event(), max_time_s=100.0, decay_over_time=True)
    args = SimpleNamespace(learning_rate=2e-4, device="cpu")
    state = SimpleNamespace(is_world_process_zero=True, global_step=0, max_steps=10)
    optimizer = SimpleNamespace(param_groups=[{"lr": 2e-4}, {"lr": 2e-4}])
    cb.on_train_begin(args, state, None)
    status = RunFiles(tmp_path).read_status()
    assert status["deadline_unix"] == pytest.approx(status["started_unix"] + 100.0)  # the eta counts the budget
    seen = []
    for elapsed in (0.0, 25.0, 90.0, 150.0):
        clock[0] = 1000.0 + elapsed
        cb.on_step_begin(args, state, None, optimizer=optimizer)
        seen.append([round(g["lr"], 9) for g in optimizer.param_groups])
    assert seen == [[2e-4] * 2, [1.5e-4] * 2, [2e-5] * 2, [0.0] * 2]
    logs = {"loss": 0.1, "learning_rate": 2e-4}
    cb.on_log(args, state, None, logs=logs)
    assert read_jsonl(tmp_path / "metrics.jsonl")[-1]["learning_rate"] == 0.0  # the rate used, not the scheduler's

    plain = callbacks.RunCallback(RunFiles(tmp_path), threading.Event(), max_time_s=100.0)
    fresh = SimpleNamespace(param_groups=[{"lr": 2e-4}])
    clock[0] = 1000.0
    plain.on_train_begin(args, state, None)
    clock[0] = 1050.0  # half the budget gone: the decay would have halved the rate
    plain.on_step_begin(args, state, None, optimizer=fresh)
    assert fresh.param_groups[0]["lr"] == 2e-4  # without the decay, the callback leaves the rate alone


def test_the_original_grpo_loss_and_a_kl_term_reach_trl():
    """TRL's defaults (beta 0, "dapo") are the defaults here; a user can pick the original GRPO loss and a KL term."""
    default = grpo_args(TrainConfig(batch_size=4, num_generations=4, per_device_batch_size=8, device="cpu"), "/tmp/x")
    assert (default.loss_type, default.beta) == ("dapo", 0.0)
    chosen = grpo_args(TrainConfig(batch_size=4, num_generations=4, per_device_batch_size=8, device="cpu",
                                   loss_type="grpo", beta=0.04), "/tmp/x")
    assert (chosen.loss_type, chosen.beta) == ("grpo", 0.04)
