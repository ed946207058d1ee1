"""Engine fixtures: one real vLLM engine and one real vLLM OpenAI server per test session (vllm-cpu here).

Both are skipped, with the reason, when vllm is not importable (install `.[vllm]` and see ENVIRONMENT.md).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reflectrm.demo import DEMO_MODEL_DIR

VLLM_MISSING = importlib.util.find_spec("vllm") is None
SKIP_REASON = "vllm is not importable: pip install '.[vllm]' (then uninstall torchvision torchaudio torchcodec triton)"
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1", "VLLM_LOGGING_LEVEL": "WARNING"}


def pytest_configure(config):
    config.addinivalue_line("markers", "engine: starts a real vLLM engine or server; skipped without vllm")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if VLLM_MISSING and item.get_closest_marker("engine"):
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))


@pytest.fixture(scope="session")
def vllm_backend():
    """The demo judge on an in-process vLLM engine (fp32 so it matches the transformers backend)."""
    for k, v in ENV.items():
        os.environ.setdefault(k, v)
    from reflectrm.backends import BackendConfig, EngineConfig, load_backend

    backend = load_backend(BackendConfig(backend="vllm"), EngineConfig(enforce_eager=True, dtype="float32"))
    yield backend
    backend.close()  # now, not at interpreter exit after pytest closed its streams


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VLLMServer:
    """`python -m vllm.entrypoints.openai.api_server` on the demo judge, on 127.0.0.1; kill() and start() again."""

    def __init__(self, log_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.log_dir = log_dir
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self, timeout_s: float = 240) -> None:
        import httpx

        self.starts += 1
        log = (self.log_dir / f"vllm-server-{self.starts}.log").open("w")
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(DEMO_MODEL_DIR),
               "--host", "127.0.0.1", "--port", str(self.port), "--enforce-eager", "--dtype", "float32",
               "--served-model-name", "demo-judge",
               # vllm-cpu 0.32 dies when a seeded request's prompt is split over two steps (see vllm_backend)
               "--no-enable-chunked-prefill", "--max-num-batched-tokens", "8192"]
        self.proc = subprocess.Popen(cmd, env={**os.environ, **ENV}, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            assert self.proc.poll() is None, f"the vLLM server exited: see {log.name}"
            try:
                if httpx.get(f"{self.url}/models", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(1)
        raise TimeoutError(f"the vLLM server did not start in {timeout_s}s: see {log.name}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the server and its engine process, as a crash would
            self.proc.wait(30)


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):
    server = VLLMServer(tmp_path_factory.mktemp("vllm-server"))
    server.start()
    yield server
    server.kill()
