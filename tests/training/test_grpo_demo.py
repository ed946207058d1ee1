"""GRPO on the real demo judge: a three-step run changes the weights and leaves loadable checkpoints; a worker
that fails records why. The job lifecycle (cancel, resume, a killed worker, a half-saved checkpoint) runs once, under
the app's Train service: tests/app/test_training.py."""

from __future__ import annotations

import json
import logging
import os
import random

import pytest

from reflectrm.core.parsing import parse_output
from reflectrm.core.prompts import Task, reflection_prompt
from reflectrm.demo import DEMO_MODEL_DIR, demo_domain, steps, tasks
from reflectrm.demo.domains import RUNNING_SUMS
from reflectrm.training import jobs
from reflectrm.training.data import (
    BuildReport,
    DataConfig,
    TrainingExample,
    TrainingSet,
    preference_example,
    write_snapshot,
)
from reflectrm.training.grpo import TrainConfig, train
from reflectrm.training.runs import list_checkpoints, read_jsonl, read_progress

pytestmark = pytest.mark.slow

DOMAIN = demo_domain()  # the shipped judge's own domain: GRPO needs rewards that differ within a group

# Tiny and fast: 2 prompts x 4 completions per step, short completions, no gradient checkpointing.
FAST = TrainConfig(learning_rate=5e-5, batch_size=2, num_generations=4, per_device_batch_size=8,
                   max_completion_length=DOMAIN.output_tokens, max_steps=3, save_steps=50, device="cpu",
                   gradient_checkpointing=False, completions_to_record=2, threads=1)


def demo_examples(n: int = 12) -> list[TrainingExample]:
    rng = random.Random(0)
    pairs = DOMAIN.make_pairs(n, seed=4242, source="test-train")
    out = [preference_example(p, config=DataConfig()) for p in pairs]
    for p in pairs[: n // 4]:
        c1, c2, target = _reflection_example(rng, p)
        label = parse_output(target, task=Task.ANALYSIS).choice
        out.append(TrainingExample(prompt=tuple(reflection_prompt(p, c1, c2)), label=label, task=Task.ANALYSIS,
                                   origin="reflection", pair_id=p.id))
    return out


def _reflection_example(rng: random.Random, pair) -> tuple[str, str, str]:  # noqa: ANN001
    """(critique 1, critique 2, target) in the domain's reflection format (running sums balance the chosen side)."""
    if DOMAIN is RUNNING_SUMS:
        return steps.reflection_example(rng, pair, steps.Balance())[:3]
    return tasks.reflection_example(rng, pair)


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory):
    built = TrainingSet(examples=tuple(demo_examples()), report=BuildReport())
    return write_snapshot(built, tmp_path_factory.mktemp("data"), name="demo").path


def _weights(path):
    from safetensors.torch import load_file

    return {k: v.float() for k, v in load_file(str(path / "model.safetensors")).items()}


def test_three_grpo_steps_change_the_weights_and_leave_a_checkpoint_judge_loads(snapshot, tmp_path, capsys):
    run = tmp_path / "run"
    result = train(snapshot, model=str(DEMO_MODEL_DIR), output_dir=run, config=FAST)
    assert (result.state, result.step) == ("completed", 3)

    before, after = _weights(DEMO_MODEL_DIR), _weights(result.final_model)
    assert before.keys() <= after.keys() | {"lm_head.weight"}
    changed = [k for k in before if k in after and (before[k] - after[k]).abs().max() > 1e-6]
    assert len(changed) > len(before) // 2  # GRPO moved most tensors, not just one

    metrics = read_jsonl(run / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert all("loss" in m and 0.0 <= m["reward"] <= 1.0 for m in metrics)
    completions = read_jsonl(run / "completions.jsonl")
    assert completions and {c["task"] for c in completions} <= {"response", "analysis"}
    assert all(c["reward"] in (0.0, 1.0) for c in completions)

    p = read_progress(run)
    assert (p.state, p.step, p.total_steps) == ("completed", 3, 3)
    assert [(c.step, c.final) for c in p.checkpoints] == [(3, False), (3, True)]

    from reflectrm_app.cli import main
    from reflectrm.backends import BackendConfig, load_backend

    checkpoint = run / "checkpoint-3"
    capsys.readouterr()
    code = main(["judge", "--model", str(checkpoint), "--query", "What is 12 + 30?", "--response-1", "42",
                 "--response-2", "41", "--strategy", "greedy", "--max-new-tokens", "96", "--json"])
    assert code == 0
    judged = json.loads(capsys.readouterr().out)
    assert judged["model"] == str(checkpoint) and len(judged["rollouts"]) == 1
    assert judged["rollouts"][0]["num_tokens"] > 0
    assert _weights(checkpoint).keys() == after.keys()  # the checkpoint holds the same trained weights
    assert load_backend(BackendConfig(model=str(result.final_model), device="cpu")).model_revision.startswith("sha256:")


def test_lora_run_merges_into_final_and_its_adapter_checkpoint_loads(snapshot, tmp_path):
    from reflectrm.backends import BackendConfig, load_backend

    run = tmp_path / "lora"
    result = train(snapshot, model=str(DEMO_MODEL_DIR), output_dir=run,
                   config=FAST.with_(max_steps=2, lora=True, lora_r=8, learning_rate=1e-3))
    (adapter, final) = list_checkpoints(run)
    assert (adapter.step, adapter.lora, final.final, final.lora) == (2, True, True, False)
    before, after = _weights(DEMO_MODEL_DIR), _weights(result.final_model)
    assert not any("lora" in k for k in after)  # merged: a plain model judge --model loads
    assert max((before[k] - after[k]).abs().max().item() for k in before if k in after) > 1e-6
    backend = load_backend(BackendConfig(model=str(adapter.path), device="cpu"))  # transformers attaches the adapter via peft
    assert backend.model_id == str(adapter.path)


def test_a_worker_that_fails_records_why(snapshot, tmp_path):
    job = jobs.start_run(tmp_path / "run", data=snapshot, model=str(tmp_path / "no-such-model"), config=FAST)
    p = job.wait(120)
    assert p.state == "failed"
    assert "does not exist" in p.error and "Traceback" in p.log_tail
    assert list_checkpoints(job.run_dir) == []



@pytest.mark.parametrize("inherited", ["error", "critical", None])
def test_the_workers_log_keeps_the_libraries_warnings_whatever_the_launcher_quieted(monkeypatch, inherited):
    # `reflectrm` without -v quiets transformers through the environment, which a worker it launches inherits
    from reflectrm.training import worker

    if inherited is None:
        monkeypatch.delenv("TRANSFORMERS_VERBOSITY", raising=False)
    else:
        monkeypatch.setenv("TRANSFORMERS_VERBOSITY", inherited)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", list(root.handlers))  # basicConfig(force=True) replaces them: restore
    monkeypatch.setattr(root, "level", root.level)
    worker.log_policy()
    assert os.environ["TRANSFORMERS_VERBOSITY"] == "warning"
    assert root.level == logging.INFO
