"""GRPO on two CPU processes (gloo), launched as a user launches it: `torchrun` and `accelerate launch --multi_gpu`.

Rank 0 alone writes the run folder and prints the result; every process stops after the same step on a spent time
budget or a cancel; the run records how many processes trained it, and a resume on another count is refused in one
line before any training work. The launch refusals and the process-count check run as fast tables."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reflectrm.demo import DEMO_MODEL_DIR
from reflectrm.errors import InputError
from reflectrm.training.data import BuildReport, TrainingSet, write_snapshot
from reflectrm.training.launch import Processes, launched
from reflectrm.training.runs import Checkpoint, check_processes, checkpoint_processes, read_jsonl
from tests.test_architecture import ROOT
from tests.training.test_grpo_demo import demo_examples

BIN = Path(sys.executable).parent  # torchrun and accelerate, installed beside this Python
LAUNCH_TIMEOUT_S = 900  # a hung collective (ranks stopping at different steps) ends here, as a failure

# Tiny: 2 prompts x 4 completions a step, split over the processes; short completions; one thread a process.
TINY = ["--device", "cpu", "--batch-size", "2", "--num-generations", "4", "--per-device-batch-size", "4",
        "--max-completion-length", "32", "--no-gradient-checkpointing", "--threads", "1", "--save-steps", "1",
        "--lr", "5e-5", "--completions-to-record", "2"]
TRAIN = ["-m", "reflectrm_app.commands.train", "train"]
CANCELLING = "tests.training.test_processes:cancel_on_first_reward"


def cancel_on_first_reward(completions, **kwargs):  # noqa: ANN001, ANN003, ANN201
    """A reward plugin that asks for a cancel from inside step 1 (rank 0 only): a cancel mid-run with no sleep."""
    if launched().main:
        (Path(os.environ["CANCEL_RUN_DIR"]) / "cancel").touch()
    return [0.0] * len(completions)


def env(**extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "MASTER_", "RANK", "WORLD_SIZE",
                                                                      "LOCAL_RANK"))}
    return {**keep, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH", ""), str(ROOT)) if p),
            **extra}


def launch(launcher: list[str], run: Path, data: Path, *extra: str, **environ: str) -> subprocess.CompletedProcess[str]:
    command = [*launcher, *TRAIN, "--data", str(data), "--model", str(DEMO_MODEL_DIR), "--output", str(run), *TINY,
               *extra]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env(**environ),
                          timeout=LAUNCH_TIMEOUT_S)


def torchrun(processes: int) -> list[str]:
    return [str(BIN / "torchrun"), "--standalone", "--nproc_per_node", str(processes)]


ACCELERATE_MULTI = [str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                    "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0"]


def results(stdout: str) -> list[dict]:
    """The result objects `train` printed (the trainer's own log lines are Python dicts, not JSON: skipped)."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (at := stdout.find("{\n", at)) != -1:
        obj, end = decoder.raw_decode(stdout, at)
        found.append(obj)
        at = end
    return found


def recorded(checkpoint: Path) -> int | None:
    return checkpoint_processes(Checkpoint(path=checkpoint, step=0, lora=False))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    built = TrainingSet(examples=tuple(demo_examples()), report=BuildReport())
    return write_snapshot(built, tmp_path_factory.mktemp("data"), name="demo").path


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory, data):
    """A 2-step run on 2 processes under torchrun, and what the launch printed (each test copies the folder)."""
    run = tmp_path_factory.mktemp("runs") / "r2"
    done = launch(torchrun(2), run, data, "--max-steps", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    return run, done


@pytest.mark.slow
def test_two_processes_write_the_run_folder_once_and_report_once(two_process_run):
    run, done = two_process_run
    [result] = results(done.stdout)  # one result, not one per process (the other used to say "final_model": null)
    assert (result["state"], result["step"], result["processes"]) == ("completed", 2, 2)
    assert result["final_model"] == str(run / "final")
    assert done.stderr.count("completed at step 2") == 1

    status = json.loads((run / "status.json").read_text())
    assert (status["state"], status["step"], status["processes"]) == ("completed", 2, 2)
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == [1, 2]  # one line a step, not one a process
    assert [c["step"] for c in read_jsonl(run / "completions.jsonl")] == [1, 1, 2, 2]  # --completions-to-record 2
    for step in (1, 2):  # the trainer saved each checkpoint once, each process its own random state into it
        checkpoint = run / f"checkpoint-{step}"
        assert sorted(p.name for p in checkpoint.glob("rng_state*")) == ["rng_state_0.pth", "rng_state_1.pth"]
        assert recorded(checkpoint) == 2
    assert json.loads((run / "final" / "training_card.json").read_text())["processes"] == 2


@pytest.mark.slow
def test_a_spent_time_budget_stops_both_processes_after_the_same_step(two_process_run, data, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(two_process_run[0], run)
    # resumed on the same 2 processes; a budget spent by the first step: rank 0's clock decides for both
    done = launch(torchrun(2), run, data, "--max-steps", "4", "--max-time-s", "0.001")
    assert done.returncode == 0, done.stderr[-3000:]
    [result] = results(done.stdout)
    assert (result["state"], result["step"], result["ended_by"]) == ("completed", 3, "time budget")
    # both processes stopped after step 3 and saved their state there (a process that went on would have hung
    # the other in its next step's collectives until the timeout)
    assert sorted(p.name for p in (run / "checkpoint-3").glob("rng_state*")) == ["rng_state_0.pth", "rng_state_1.pth"]
    assert not (run / "checkpoint-4").exists()
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == [1, 2, 3]


@pytest.mark.slow
@pytest.mark.parametrize("launcher, code", [
    pytest.param(torchrun(1), 1, id="torchrun-one-process"),  # torchrun exits 1 when its process exits 2
    pytest.param([sys.executable], 2, id="no-launcher"),  # trap: no launcher at all is one process too
])
def test_resuming_a_two_process_run_on_one_is_refused_in_one_line(two_process_run, data, tmp_path, launcher, code):
    run = tmp_path / "run"
    shutil.copytree(two_process_run[0], run)
    before = (run / "status.json").read_bytes()
    done = launch(launcher, run, data, "--max-steps", "4")
    assert done.returncode == code
    refusals = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert refusals == [f"error: cannot resume from {run / 'checkpoint-2'}: it was trained by 2 processes and this "
                        "launch has 1 (each process resumes its own share of the data and its own random state): "
                        "resume with 2 (`torchrun --nproc_per_node 2 ...`), or start over on 1 (`train --fresh`, or "
                        "a new run folder)"]
    assert "Traceback" not in done.stderr.split("error:")[0]  # refused before any training work
    assert (run / "status.json").read_bytes() == before and not (run / "checkpoint-3").exists()


@pytest.mark.slow
def test_accelerate_multi_gpu_form_trains_on_two_cpu_processes_and_a_cancel_stops_both(data, tmp_path):
    run = tmp_path / "run"
    done = launch(ACCELERATE_MULTI, run, data, "--max-steps", "2", "--reward-weights", f"accuracy=1,{CANCELLING}=1",
                  CANCEL_RUN_DIR=str(run))
    assert done.returncode != 0  # every process exits 130, as a cancelled `train` does; the launcher says it failed
    [result] = results(done.stdout)
    assert (result["state"], result["step"], result["ended_by"], result["processes"]) == ("cancelled", 1, "cancel", 2)
    assert result["final_model"] is None
    assert done.stderr.count("cancelled at step 1: rerun the same command to resume") == 1
    status = json.loads((run / "status.json").read_text())
    assert (status["state"], status["step"], status["processes"]) == ("cancelled", 1, 2)
    assert sorted(p.name for p in (run / "checkpoint-1").glob("rng_state*")) == ["rng_state_0.pth", "rng_state_1.pth"]
    assert not (run / "checkpoint-2").exists() and not (run / "final").exists()


@pytest.mark.slow
def test_accelerate_cpu_launch_that_starts_one_process_is_refused(data, tmp_path):
    run = tmp_path / "run"
    command = [str(BIN / "accelerate"), "launch", "--cpu", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no"]
    done = launch(command, run, data, "--max-steps", "2")
    assert done.returncode != 0
    refusals = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(refusals) == 1 and "`accelerate launch --cpu` started one process" in refusals[0]
    assert "torchrun --nproc_per_node N" in refusals[0]
    assert not run.exists()  # refused before the run folder was made


# --- fast tables: where a process stands, and what a checkpoint says -------------------------------------------------

@pytest.mark.parametrize("environ, want", [
    pytest.param({}, Processes(0, 1), id="no-launcher"),
    pytest.param({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}, Processes(1, 2), id="torchrun"),
    pytest.param({"WORLD_SIZE": "4"}, Processes(0, 4), id="size-without-rank"),
    pytest.param({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4"}, Processes(3, 4), id="open-mpi"),
    pytest.param({"PMI_RANK": "2", "PMI_SIZE": "3"}, Processes(2, 3), id="intel-mpi"),
    # trap: a single-process accelerate launch sets ACCELERATE_USE_CPU but no MASTER_ADDR; it is one process
    pytest.param({"ACCELERATE_USE_CPU": "True"}, Processes(0, 1), id="accelerate-cpu-one-process"),
    pytest.param({"ACCELERATE_USE_CPU": "True", "MASTER_ADDR": "127.0.0.1", "OMPI_COMM_WORLD_RANK": "1",
                  "OMPI_COMM_WORLD_SIZE": "2"}, Processes(1, 2), id="accelerate-cpu-under-mpi"),
])
def test_a_process_knows_its_rank_and_the_process_count(environ, want):
    assert launched(environ) == want
    assert want.main == (want.rank == 0)


@pytest.mark.parametrize("environ, message", [
    # trap: accelerate's CPU launcher asked for 2 processes without MPI starts 1, which used to train alone
    pytest.param({"ACCELERATE_USE_CPU": "True", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"},
                 "started one process", id="accelerate-cpu-without-mpi"),
    pytest.param({"WORLD_SIZE": "two"}, "WORLD_SIZE='two' is not a whole number from 1", id="size-not-a-number"),
    pytest.param({"WORLD_SIZE": "0"}, "WORLD_SIZE='0' is not a whole number from 1", id="size-zero"),
    pytest.param({"WORLD_SIZE": "2", "RANK": "2"}, "RANK='2' is not a whole number from 0 to 1", id="rank-past-size"),
    pytest.param({"WORLD_SIZE": "2", "RANK": "-1"}, "RANK='-1'", id="rank-negative"),
    pytest.param({"WORLD_SIZE": "٢"}, "WORLD_SIZE=", id="size-non-ascii-digit"),  # trap: str.isdigit takes it
])
def test_a_launch_that_cannot_be_trained_on_is_refused_in_one_line(environ, message):
    with pytest.raises(InputError, match=message) as refused:
        launched(environ)
    assert "\n" not in str(refused.value)


def _checkpoint(folder: Path, *, record: int | None = None, rng: tuple[str, ...] = ()) -> Checkpoint:
    folder.mkdir()
    state = {"global_step": 2, "log_history": []}
    if record is not None:
        state["stateful_callbacks"] = {"ProcessCount": {"args": {"processes": record}, "attributes": {}}}
    (folder / "trainer_state.json").write_text(json.dumps(state))
    for name in rng:
        (folder / name).write_bytes(b"")
    return Checkpoint(path=folder, step=2, lora=False)


@pytest.mark.parametrize("record, rng, trained", [
    pytest.param(2, ("rng_state_0.pth", "rng_state_1.pth"), 2, id="recorded"),
    pytest.param(4, (), 4, id="record-wins"),  # the record is saved with the trainer state; rng files may lag it
    # a checkpoint from before the record: transformers' random states, one per process
    pytest.param(None, ("rng_state_0.pth", "rng_state_1.pth", "rng_state_2.pth"), 3, id="rng-per-process"),
    pytest.param(None, ("rng_state.pth",), 1, id="rng-one-process"),
    pytest.param(None, (), None, id="nothing-says"),
    pytest.param("2", ("rng_state.pth",), 1, id="damaged-record"),  # trap: a string is no count; the files say
])
def test_a_checkpoint_says_how_many_processes_trained_it(tmp_path, record, rng, trained):
    assert checkpoint_processes(_checkpoint(tmp_path / "c", record=record, rng=rng)) == trained


@pytest.mark.parametrize("trained, processes, refused", [
    pytest.param(2, 2, False, id="same-count"),
    pytest.param(2, 1, True, id="fewer"),
    pytest.param(1, 2, True, id="more"),
    pytest.param(None, 2, False, id="unknown"),  # nothing to compare: resumed as before the record existed
])
def test_a_resume_on_another_process_count_is_refused(tmp_path, trained, processes, refused):
    checkpoint = _checkpoint(tmp_path / "c", record=trained)
    if not refused:
        check_processes(checkpoint, processes=processes)
        return
    with pytest.raises(InputError, match=f"trained by {trained} process.* this launch has {processes}"):
        check_processes(checkpoint, processes=processes)


@pytest.mark.parametrize("environ, flags, message", [
    pytest.param({"ACCELERATE_USE_CPU": "True", "MASTER_ADDR": "127.0.0.1"}, [], "started one process",
                 id="accelerate-cpu-without-mpi"),
    pytest.param({"WORLD_SIZE": "2", "RANK": "0"}, ["--detach"], "--detach starts one background process",
                 id="detach-under-a-launch"),  # trap: every process would start a background run of its own
    pytest.param({"WORLD_SIZE": "2", "RANK": "0"}, ["--per-device-batch-size", "3"],
                 "per_device_batch_size x processes = 6", id="batch-not-split-by-processes"),
])
def test_the_train_command_refuses_a_launch_it_cannot_train_before_writing(data, tmp_path, capsys, monkeypatch,
                                                                          environ, flags, message):
    from reflectrm_app.cli import main

    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    run = tmp_path / "run"
    code = main(["train", "--data", str(data), "--output", str(run), "--device", "cpu", "--max-steps", "2",
                 "--batch-size", "2", "--num-generations", "4", "--per-device-batch-size", "4", *flags])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1
    assert not run.exists()
