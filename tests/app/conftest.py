"""Fixtures for the app's tests: services over a temp SQLite store with a scripted judge."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reflectrm_app.resources import ModelHolder
from reflectrm_app.services import Services
from reflectrm_app.services.runtime import Runtime
from reflectrm_app.settings import AppSettings
from reflectrm_db.services import JudgmentStore
from reflectrm.backends import ScriptedBackend
from reflectrm.backends.base import Completion, SamplingParams
from reflectrm.core.types import PreferencePair
from tests.conftest import critique_output, response_output
from tests.db.helpers import scripted_output


def first_position_output(prompt: str, seed: int, params: SamplingParams) -> Completion:
    """A judge with total positional bias: always the first response (and the first critique)."""
    if "## Critiques for Judgment" in prompt:
        return Completion(critique_output(1), (), 5)
    return Completion(response_output(1, f"analysis {seed % 97}"), tuple(-0.01 * (seed % 13 + 1) for _ in range(8)), 8)


def make_services(url: str, backend: ScriptedBackend, **settings: object) -> Services:
    config = AppSettings(warm_up=False, max_new_tokens=64, audit_batch_size=2, **settings)
    return Services.over(Runtime(store=JudgmentStore.open(url), settings=config, model=ModelHolder(lambda: backend)))


@pytest.fixture
def scripted_backend() -> ScriptedBackend:
    """A varied, deterministic judge: both verdicts, unparseable and empty outputs, varied confidence."""
    return ScriptedBackend(scripted_output)


@pytest.fixture
def services(tmp_path: Path, scripted_backend: ScriptedBackend) -> Iterator[Services]:
    s = make_services(f"sqlite:///{tmp_path / 'app.db'}", scripted_backend)
    yield s
    s.close()


@pytest.fixture
def biased_services(tmp_path: Path) -> Iterator[Services]:
    s = make_services(f"sqlite:///{tmp_path / 'biased.db'}", ScriptedBackend(first_position_output))
    yield s
    s.close()


@pytest.fixture
def pair() -> PreferencePair:
    return PreferencePair.from_query("What is 47 + 38?", "47 + 38 = 85.", "The answer is 75.", label=1,
                                     id="t:1", source="tests", subset="add")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """One Chromium per test module of the browser tests (Playwright is imported only where one is asked for)."""
    from playwright.sync_api import sync_playwright

    from tests.app.browser import launch_chromium

    with sync_playwright() as p:
        b = launch_chromium(p)
        yield b
        b.close()
