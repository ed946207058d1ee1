"""Shared fixtures: a scripted backend whose outputs are set per test, and the demo judge."""

from __future__ import annotations

import importlib.util
import os
import random
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def response_output(choice: int, analysis: str = "analysis") -> str:
    return f"<Analysis>{analysis}</Analysis><Result>Response {choice} is better than Response {3 - choice}</Result>"


def critique_output(choice: int) -> str:
    return f"<Analysis>meta</Analysis><Result>Critique {choice} is better than Critique {3 - choice}</Result>"


@pytest.fixture
def rng() -> random.Random:
    return random.Random(1234)


@pytest.fixture
def no_reflectrm_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No REFLECTRM_ variable set (the machine's own would change what the settings read)."""
    for name in list(os.environ):
        if name.upper().startswith("REFLECTRM_"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def demo_backend():
    """The bundled demo judge on the transformers backend (loaded once per test session)."""
    from reflectrm.backends import BackendConfig, load_backend

    return load_backend(BackendConfig(device="cpu"))


def load_bench(name: str, *, folder: str = "bench"):
    """A script under bench/ (or research/) loaded as a module (neither is a package), e.g. load_bench("eval_speed")."""
    root = Path(__file__).resolve().parents[1]
    path = root / folder / f"{name}.py"
    if str(root / "bench") not in sys.path:
        sys.path.insert(0, str(root / "bench"))  # as `python bench/NAME.py` has it: the scripts import `harness`
    spec = importlib.util.spec_from_file_location(f"{folder}_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
