"""The Judge tab's examples and demo pairs follow the app's judge: a demo judge's own domain, none for other models."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from reflectrm_app.resources import ModelHolder
from reflectrm_app.services import Services
from reflectrm_app.services.runtime import Runtime
from reflectrm_app.settings import AppSettings
from reflectrm_app.ui.tabs.judge import example_values
from reflectrm_db.services import JudgmentStore
from reflectrm.backends import ScriptedBackend
from reflectrm.demo import DEMO_MODEL_DIR, demo_domain
from reflectrm.demo.domains import RUNNING_SUMS
from reflectrm.errors import ConfigError
from tests.db.helpers import scripted_output


def services_judging_with(tmp_path: Path, model: str) -> Services:
    """Services whose active judge is called `model` (a scripted backend answers: nothing is loaded)."""
    settings = AppSettings(warm_up=False, max_new_tokens=64)
    holder = ModelHolder(lambda: ScriptedBackend(scripted_output), name=model)
    return Services.over(Runtime(store=JudgmentStore.open(f"sqlite:///{tmp_path / 'app.db'}"), settings=settings,
                                 model=holder))


def folder(tmp_path: Path, card: dict | None) -> str:
    path = tmp_path / "judge"
    path.mkdir()
    if card is not None:
        (path / "demo_card.json").write_text(json.dumps(card))
    return str(path)


@pytest.fixture
def made(tmp_path):
    made = []

    def make(model: str) -> Services:
        made.append(services_judging_with(tmp_path, model))
        return made[-1]

    yield make
    for s in made:
        s.close()


def test_the_shipped_demo_judge_offers_its_domains_examples_and_pairs(made):
    s = made(str(DEMO_MODEL_DIR))
    assert s.judging.judge_examples() == demo_domain().examples != ()
    assert s.judging.demo_source() == demo_domain().source
    report = s.judging.add_demo_pairs(5)
    stored = [p for _, p in s.judging.pairs(s.judging.demo_source())]
    assert report.added == 5 and len(stored) == 5
    for p in stored:
        demo_domain().problem_of(p)  # each asks a problem of the shipped judge's domain


def test_a_running_sum_demo_judge_offers_running_sums(made, tmp_path):
    s = made(folder(tmp_path, {"domain": "running-sums"}))
    assert s.judging.judge_examples() == RUNNING_SUMS.examples
    assert s.judging.demo_source() == "demo-steps"
    s.judging.add_demo_pairs(4)
    assert [p.subset for _, p in s.judging.pairs("demo-steps")] and all(
        p.subset in RUNNING_SUMS.kinds for _, p in s.judging.pairs("demo-steps"))


@pytest.mark.parametrize("model", ["Qwen/Qwen3-8B", "own-folder"])
def test_a_users_own_model_gets_no_examples_and_the_shipped_domains_pairs(made, tmp_path, model):
    s = made(folder(tmp_path, None) if model == "own-folder" else model)
    assert s.judging.judge_examples() == ()
    assert s.judging.demo_source() == demo_domain().source


def test_a_card_naming_an_unknown_domain_gets_no_examples_and_says_why(made, tmp_path, caplog):
    s = made(folder(tmp_path, {"domain": "os"}))
    with caplog.at_level(logging.WARNING):
        assert s.judging.judge_examples() == ()
    assert "unknown demo domain 'os'" in caplog.text
    with pytest.raises(ConfigError, match="unknown demo domain 'os'"):
        s.judging.add_demo_pairs(3)


def test_an_example_fills_the_form_and_clears_what_would_override_it():
    rows = RUNNING_SUMS.examples
    q, a, b = rows[1]
    assert example_values(rows, 1) == [q, "", a, b, "unknown", None, "example 2 filled in: press Judge to judge it"]
    assert example_values(rows, len(rows)) is None and example_values(rows, None) is None
    assert example_values(rows, -1) is None


def _example_tables(services: Services) -> list:
    from reflectrm_app.ui.blocks import build_app

    return [b for b in build_app(services).blocks.values() if getattr(b, "elem_id", None) == "judge-examples"]


def test_the_judge_tab_shows_the_examples_only_for_a_demo_judge(made, tmp_path):
    [table] = _example_tables(made(str(DEMO_MODEL_DIR)))
    assert [tuple(row) for row in table.samples] == list(demo_domain().examples)
    assert _example_tables(made("Qwen/Qwen3-8B")) == []
