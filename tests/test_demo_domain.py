"""The demo judge's task domain follows its card: swapping the model folder is all it takes to ship another."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import reflectrm.demo
from reflectrm.core.types import PreferencePair
from reflectrm.demo import DEMO_MODEL_DIR, DOMAINS, demo_domain, domain_name, domain_of, judge_domain, pair_source
from reflectrm.demo import steps, tasks
from reflectrm.errors import ConfigError


def card_dir(tmp_path: Path, card: object | None, *, raw: str | None = None) -> Path:
    """A model folder whose demo_card.json holds `card` (as JSON) or `raw` text; neither: no card at all."""
    folder = tmp_path / "judge"
    folder.mkdir()
    if raw is not None or card is not None:
        (folder / "demo_card.json").write_text(raw if raw is not None else json.dumps(card), encoding="utf-8")
    return folder


@pytest.mark.parametrize("card, module", [
    pytest.param(None, tasks, id="no-card"),
    pytest.param({"what": "the first demo judge", "eval": {}}, tasks, id="card-without-domain"),
    pytest.param({"domain": "reflectrm.demo.tasks"}, tasks, id="tasks"),
    pytest.param({"domain": "reflectrm.demo.steps"}, steps, id="steps"),
])
def test_the_card_names_the_domain(tmp_path, card, module):
    assert domain_of(card_dir(tmp_path, card)) is module


@pytest.mark.parametrize("value", ["os", "reflectrm.demo.build", "steps", "", None, 7])
def test_an_unknown_domain_is_a_config_error_naming_it_and_imports_nothing(tmp_path, value):
    folder = card_dir(tmp_path, {"domain": value})
    with pytest.raises(ConfigError, match="unknown demo domain") as caught:
        domain_of(folder)
    message = str(caught.value)
    assert repr(value) in message and "\n" not in message and "reflectrm.demo.steps" in message  # the value and the fix


@pytest.mark.parametrize("raw", ["{not json", "[1, 2]", "\xff"])
def test_an_unreadable_card_is_a_config_error(tmp_path, raw):
    with pytest.raises(ConfigError, match="demo_card.json"):
        domain_of(card_dir(tmp_path, None, raw=raw))


def test_judge_domain_is_none_for_a_model_that_is_not_a_demo_judge(tmp_path):
    assert judge_domain(card_dir(tmp_path, None)) is None  # a user's own model folder: no card
    assert judge_domain("Qwen/Qwen3-8B") is None  # a Hugging Face id
    assert judge_domain(str(DEMO_MODEL_DIR)) is demo_domain()


def test_judge_domain_reads_a_demo_judges_card(tmp_path):
    assert judge_domain(card_dir(tmp_path, {"domain": "reflectrm.demo.steps"})) is steps


def test_the_shipped_judge_names_a_known_domain():
    assert demo_domain().__name__ in DOMAINS
    assert demo_domain() is domain_of(DEMO_MODEL_DIR)
    assert domain_name(DEMO_MODEL_DIR) == demo_domain().__name__


def test_demo_domain_follows_the_model_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(reflectrm.demo, "DEMO_MODEL_DIR", card_dir(tmp_path, {"domain": "reflectrm.demo.steps"}))
    assert demo_domain() is steps


def test_each_domain_has_its_own_pair_source():
    assert pair_source(tasks) == "demo-arith" and pair_source(steps) == "demo-steps"
    assert set(DOMAINS) == {"reflectrm.demo.tasks", "reflectrm.demo.steps"}


@pytest.mark.parametrize("domain", [tasks, steps], ids=["tasks", "steps"])
def test_every_domain_offers_the_same_api(domain):
    for name in ("KINDS", "make_pairs", "fresh_pairs", "other_problems", "problem_of", "response_example", "EXAMPLES"):
        assert hasattr(domain, name), name
    pairs = domain.make_pairs(6, seed=3, source=pair_source(domain))
    assert {p.source for p in pairs} == {pair_source(domain)} and {p.subset for p in pairs} <= set(domain.KINDS)


@pytest.mark.parametrize("domain", [tasks, steps], ids=["tasks", "steps"])
def test_every_example_asks_a_problem_of_its_domain_with_one_right_answer(domain):
    assert 2 <= len(domain.EXAMPLES) <= 5
    for query, r1, r2 in domain.EXAMPLES:
        pair = PreferencePair.from_query(query, r1, r2)
        problem = domain.problem_of(pair)
        answer = problem.answer
        stated = [tasks.stated_value(r, problem) if domain is tasks else steps.stated_value(r) for r in (r1, r2)]
        assert stated.count(answer) == 1, (query, stated, answer)


def test_each_domain_has_an_output_budget():
    from reflectrm.demo import output_tokens

    assert output_tokens(tasks) == 96 and output_tokens(steps) == 256  # a six-step walk with its subtractions: 207

