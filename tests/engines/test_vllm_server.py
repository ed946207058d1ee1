"""The OpenAI backend against a real vLLM OpenAI server on 127.0.0.1 with the demo judge, killed and restarted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from reflectrm.backends import BackendConfig, EngineConfig, load_backend
from reflectrm.core import JudgeConfig
from reflectrm.demo import demo_domain
from reflectrm.pipeline import judge_many

pytestmark = [pytest.mark.engine, pytest.mark.slow]

PAIRS = demo_domain().make_pairs(4, seed=77, source="engine-test")
CONFIG = JudgeConfig(max_new_tokens=80, reflection_max_new_tokens=80)


def test_full_anatomy_and_greedy_verdicts_through_the_server(vllm_server, demo_backend):
    backend = load_backend(BackendConfig(backend="openai"), EngineConfig(base_urls=(vllm_server.url,)))
    assert backend.model_id == "demo-judge"  # the server's only model
    [j] = judge_many(PAIRS[:1], backend, CONFIG)
    assert j.backend == "openai" and len(j.rollouts) == 8
    assert all(r.confidence is not None and r.num_tokens > 0 for r in j.rollouts)
    parseable = [r for r in j.rollouts if r.parseable]
    if len(parseable) >= 2:
        assert j.anchor is not None and len(j.reflections) == len(parseable) - 1
    greedy = CONFIG.with_(strategy="greedy")
    on_server = list(judge_many(PAIRS, backend, greedy))
    on_hf = list(judge_many(PAIRS, demo_backend, greedy))
    assert [x.verdict for x in on_server] == [x.verdict for x in on_hf]
    assert [x.rollouts[0].text for x in on_server] == [x.rollouts[0].text for x in on_hf]
    # token counts exclude the stop token on both backends
    assert [x.rollouts[0].num_tokens for x in on_server] == [x.rollouts[0].num_tokens for x in on_hf]


def _judge_cli(vllm_server, pairs_file, out_file):
    cmd = [sys.executable, "-m", "reflectrm_app.cli", "judge", "--backend", "openai", "--base-url", vllm_server.url,
           "--input", str(pairs_file), "--output", str(out_file), "--batch-size", "1", "--n", "4",
           "--max-new-tokens", "80", "--max-retries", "1"]
    return subprocess.Popen(cmd, env=os.environ.copy(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _ids(path):
    return [json.loads(line)["id"] for line in path.read_text().splitlines() if line.strip()]


def test_killing_the_server_mid_run_then_rerunning_loses_and_repeats_nothing(vllm_server, tmp_path):
    pairs = demo_domain().make_pairs(10, seed=99, source="kill-test")
    pairs_file, out_file = tmp_path / "pairs.jsonl", tmp_path / "out.jsonl"
    pairs_file.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in pairs))
    run = _judge_cli(vllm_server, pairs_file, out_file)
    deadline = time.time() + 300
    while not (out_file.exists() and len(_ids(out_file)) >= 2):
        assert run.poll() is None and time.time() < deadline, run.stderr.read() if run.poll() is not None else "slow"
        time.sleep(0.2)
    vllm_server.kill()
    _, err = run.communicate(timeout=120)
    # one error line (the fleet's warnings about the dead server may come before or after it)
    errors = [line for line in err.strip().splitlines() if line.startswith("error:")]
    assert run.returncode == 2 and len(errors) == 1 and errors[0].startswith("error: cannot reach server"), err
    partial = _ids(out_file)
    assert 2 <= len(partial) < len(pairs)

    vllm_server.start()
    rerun = _judge_cli(vllm_server, pairs_file, out_file)
    _, err = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, err
    ids = _ids(out_file)
    assert sorted(ids) == sorted(p.id for p in pairs) and len(ids) == len(set(ids))  # nothing lost, none twice
    assert ids[: len(partial)] == partial
