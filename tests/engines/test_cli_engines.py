"""The engine flags of `reflectrm judge`: derived from EngineConfig, validated, and their one-line errors."""

from __future__ import annotations

import importlib.util
import json

import pytest

from reflectrm_app.cli import main
from tests.engines.fake_server import FakeServer


def test_judge_through_an_openai_server_from_the_command_line(capsys):
    server = FakeServer()
    try:
        code = main(["judge", "--backend", "openai", "--base-url", server.url, "--query", "q", "--response-1", "a",
                     "--response-2", "b", "--n", "2", "--max-new-tokens", "16", "--json"])
        out = json.loads(capsys.readouterr().out)
        assert code == 0 and out["backend"] == "openai" and len(out["rollouts"]) == 2
        assert {b["max_tokens"] for b in server.bodies} == {16}
    finally:
        server.close()


@pytest.mark.parametrize(("argv", "message"), [
    pytest.param(["--backend", "openai"], "needs --base-url", id="openai-without-url"),
    pytest.param(["--backend", "openai", "--base-url", "gpu:8000"], "must start with http", id="url-scheme"),
    pytest.param(["--backend", "vllm", "--gpu-memory-utilization", "1.5"], "gpu_memory_utilization must be in",
                 id="bad-memory-share"),
    pytest.param(["--backend", "nope"], "invalid choice: 'nope'", id="unknown-backend"),  # argparse: a usage error
    # the fleet's routing settings: a zero cool-down would re-send to a dead server at once; a cap under the first
    # cool-down would shorten it; an unknown routing would silently fall back
    pytest.param(["--backend", "openai", "--base-url", "http://a:1/v1", "--cooldown-s", "0"],
                 "cooldown_s must be a positive number", id="zero-cooldown"),
    pytest.param(["--backend", "openai", "--base-url", "http://a:1/v1", "--cooldown-max-s", "5"],
                 "raise --cooldown-max-s or lower --cooldown-s", id="cap-under-cooldown"),
    pytest.param(["--backend", "openai", "--base-url", "http://a:1/v1", "--routing", "random"],
                 "invalid choice: 'random'", id="unknown-routing"),
])
def test_bad_engine_flags_are_one_line(argv, message, capsys):
    try:
        code = main(["judge", "--query", "q", "--response-1", "a", "--response-2", "b", *argv])
    except SystemExit as exc:  # argparse's own refusals (one line through the project's parser)
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_vllm_missing_names_the_extra(capsys):
    code = main(["judge", "--backend", "vllm", "--query", "q", "--response-1", "a", "--response-2", "b"])
    err = capsys.readouterr().err
    assert code == 2 and "reflectrm[vllm]" in err and len(err.strip().splitlines()) == 1


def test_in_process_data_parallel_points_to_vllms_own_launch():
    from reflectrm.backends.engine import EngineConfig
    from reflectrm.backends.vllm_backend import engine_kwargs
    from reflectrm.errors import ConfigError

    with pytest.raises(ConfigError, match="vllm serve MODEL --data-parallel-size 2"):
        engine_kwargs(EngineConfig(data_parallel_size=2))
    kw = engine_kwargs(EngineConfig(tensor_parallel_size=4, kv_cache_gib=2, max_model_len=8192))
    assert kw["enable_prefix_caching"] and kw["logprobs_mode"] == "raw_logprobs" and kw["tensor_parallel_size"] == 4
    assert kw["kv_cache_memory_bytes"] == 2 << 30 and kw["max_model_len"] == 8192


@pytest.mark.parametrize(("dtype", "native_bf16", "want"), [
    ("auto", False, "float32"), ("auto", True, None), ("bfloat16", False, None), ("float16", False, None)])
def test_vllm_on_a_cpu_without_native_bf16_runs_auto_in_float32(monkeypatch, dtype, native_bf16, want):
    """vLLM's "auto" takes a checkpoint's bf16, which a CPU without AVX512-BF16/AMX emulates ~5x slower than fp32:
    on such a CPU "auto" means float32; a dtype the user names is kept."""
    from reflectrm.backends import vllm_backend
    from reflectrm.backends.engine import EngineConfig
    from reflectrm.defaults import DEMO_MODEL_DIR

    monkeypatch.setattr(vllm_backend, "cpu_has_bf16", lambda: native_bf16)
    kw = vllm_backend.cpu_engine_kwargs(str(DEMO_MODEL_DIR), EngineConfig(dtype=dtype))
    assert kw.get("dtype") == want and kw["enable_chunked_prefill"] is False
    assert kw["max_num_batched_tokens"] >= 8192
