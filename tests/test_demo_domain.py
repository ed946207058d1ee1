"""The demo judge's task domain follows its card: swapping the model folder is all it takes to ship another."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import reflectrm.demo
from reflectrm.core.types import PreferencePair
from reflectrm.demo import DEMO_MODEL_DIR, DOMAINS, Domain, demo_domain, domain_of, judge_domain
from reflectrm.demo.domains import ARITHMETIC, RUNNING_SUMS
from reflectrm.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def card_dir(tmp_path: Path, card: object | None, *, raw: str | None = None) -> Path:
    """A model folder whose demo_card.json holds `card` (as JSON) or `raw` text; neither: no card at all."""
    folder = tmp_path / "judge"
    folder.mkdir()
    if raw is not None or card is not None:
        (folder / "demo_card.json").write_text(raw if raw is not None else json.dumps(card), encoding="utf-8")
    return folder


@pytest.mark.parametrize("card, domain", [
    pytest.param(None, ARITHMETIC, id="no-card"),
    pytest.param({"what": "the first demo judge", "eval": {}}, ARITHMETIC, id="card-without-domain"),
    pytest.param({"domain": "arithmetic"}, ARITHMETIC, id="arithmetic"),
    pytest.param({"domain": "running-sums"}, RUNNING_SUMS, id="running-sums"),
    # cards written before the registry name the module; replayed build stages still write these
    pytest.param({"domain": "reflectrm.demo.tasks"}, ARITHMETIC, id="legacy-tasks"),
    pytest.param({"domain": "reflectrm.demo.steps"}, RUNNING_SUMS, id="legacy-steps"),
])
def test_the_card_names_the_domain(tmp_path, card, domain):
    assert domain_of(card_dir(tmp_path, card)) is domain


@pytest.mark.parametrize("value", [
    pytest.param("os", id="a-module-name"),  # a card never makes us import what it names
    pytest.param("research.demojudge.build", id="a-demo-module-not-a-domain"),
    pytest.param("steps", id="a-short-module-name"),
    pytest.param("Arithmetic", id="keys-are-exact"),
    pytest.param("", id="empty"), pytest.param(None, id="null"), pytest.param(7, id="a-number"),
    pytest.param(["arithmetic"], id="a-list"),  # unhashable: no TypeError from a dict lookup
])
def test_an_unknown_domain_is_a_config_error_naming_it_and_the_keys(tmp_path, value):
    folder = card_dir(tmp_path, {"domain": value})
    with pytest.raises(ConfigError, match="unknown demo domain") as caught:
        domain_of(folder)
    message = str(caught.value)
    assert repr(value) in message and "\n" not in message and "running-sums" in message  # the value and the fix


@pytest.mark.parametrize("raw", ["{not json", "[1, 2]", "\xff"])
def test_an_unreadable_card_is_a_config_error(tmp_path, raw):
    with pytest.raises(ConfigError, match="demo_card.json"):
        domain_of(card_dir(tmp_path, None, raw=raw))


def test_judge_domain_is_none_for_a_model_that_is_not_a_demo_judge(tmp_path):
    assert judge_domain(card_dir(tmp_path, None)) is None  # a user's own model folder: no card
    assert judge_domain("Qwen/Qwen3-8B") is None  # a Hugging Face id
    assert judge_domain(str(DEMO_MODEL_DIR)) is demo_domain()


def test_judge_domain_reads_a_demo_judges_card(tmp_path):
    assert judge_domain(card_dir(tmp_path, {"domain": "running-sums"})) is RUNNING_SUMS


def test_the_shipped_judge_names_a_registered_domain():
    assert demo_domain() in DOMAINS.values()
    assert demo_domain() is domain_of(DEMO_MODEL_DIR)


def test_demo_domain_follows_the_model_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(reflectrm.demo, "DEMO_MODEL_DIR", card_dir(tmp_path, {"domain": "running-sums"}))
    assert demo_domain() is RUNNING_SUMS


def test_the_registry_holds_each_domain_once_under_its_own_key():
    assert dict(DOMAINS) == {"arithmetic": ARITHMETIC, "running-sums": RUNNING_SUMS}
    assert all(isinstance(d, Domain) and key == d.key for key, d in DOMAINS.items())
    assert len({d.source for d in DOMAINS.values()}) == len(DOMAINS)  # stored data sets never mix domains
    assert (ARITHMETIC.source, RUNNING_SUMS.source) == ("demo-arith", "demo-steps")  # the names stored rows carry
    with pytest.raises(TypeError):
        DOMAINS["other"] = ARITHMETIC  # type: ignore[index]  # registered once, read-only after


@pytest.mark.parametrize("domain", DOMAINS.values(), ids=DOMAINS.keys())
def test_every_domain_makes_pairs_of_its_kinds_under_its_data_set(domain):
    pairs = domain.make_pairs(6, seed=3, source=domain.source)
    assert {p.source for p in pairs} == {domain.source} and {p.subset for p in pairs} <= set(domain.kinds)
    fresh = domain.fresh_pairs(pairs, seed=4)
    assert {domain.problem_of(p) for p in fresh} <= {domain.problem_of(p) for p in pairs}  # the same problems
    assert not {p.query for p in fresh} & {p.query for p in pairs}  # reworded
    assert domain.other_problems(pairs, pairs[:2]) == [p for p in pairs if domain.problem_of(p) not in
                                                       {domain.problem_of(q) for q in pairs[:2]}]


@pytest.mark.parametrize("domain", DOMAINS.values(), ids=DOMAINS.keys())
def test_every_example_asks_a_problem_of_its_domain_with_one_right_answer(domain):
    assert 2 <= len(domain.examples) <= 5
    for query, r1, r2 in domain.examples:
        problem = domain.problem_of(PreferencePair.from_query(query, r1, r2))
        stated = [domain.stated_value(r, problem) for r in (r1, r2)]
        assert stated.count(problem.answer) == 1, (query, stated, problem.answer)


def test_each_domain_has_an_output_budget_and_a_reward_training_knows():
    from reflectrm.training.rewards import REWARDS

    assert ARITHMETIC.output_tokens == 96 and RUNNING_SUMS.output_tokens == 256  # a six-step walk: 207
    assert all(d.reward in REWARDS for d in DOMAINS.values())


@pytest.mark.parametrize("domain", DOMAINS.values(), ids=DOMAINS.keys())
def test_every_domains_held_out_pairs_skip_what_its_build_trained_on(domain):
    card = {"domain": domain.key, "build_args": {"pairs": 200, "seed": 1234}}
    pairs = domain.heldout_pairs(card, 20, seed=7, source="test-heldout")
    assert len(pairs) == 20 and {p.source for p in pairs} == {"test-heldout"}
    if domain is RUNNING_SUMS:
        from reflectrm.demo.heldout import trained_problems

        assert not {domain.problem_of(p) for p in pairs} & trained_problems(card)


def test_no_code_asks_which_module_a_domain_came_from():
    """Product code and benches ask the registry; a domain's module name appears only where the registry maps
    older cards (and in docstrings)."""
    offenders = []
    for path in [*ROOT.glob("reflectrm/**/*.py"), *ROOT.glob("app/**/*.py"), *ROOT.glob("bench/*.py")]:
        if path.name == "domains.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in ("reflectrm.demo.tasks", "reflectrm.demo.steps"):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.Compare) and any(isinstance(n, ast.Attribute) and n.attr == "__name__"
                                                     for n in ast.walk(node)):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} (compares a __name__)")
    assert offenders == []


def _eval(**change: object) -> dict:
    """A card's "eval" as `research/demo_reflection.py --card` writes it, with `change` replacing keys (dotted paths)."""
    ev = {"heldout_pairs": 600, "accuracy": {"reflectrm": 0.887, "greedy": 0.82},
          "reflectrm_minus": {"greedy": {"diff": 0.067, "lo": 0.045, "hi": 0.088}},
          "reflection": {"decisive_reflections": 820, "picks_right": 0.938, "picks_right_interval": [0.919, 0.952],
                         "same_pick_both_orders": 0.887, "same_pick_interval": [0.863, 0.907]}}
    for path, value in change.items():
        *up, last = path.split("__")
        node = ev
        for key in up:
            node = node[key]
        if value is KeyError:
            del node[last]
        else:
            node[last] = value
    return ev


def test_the_shipped_card_records_its_measured_stage_2():
    m = reflectrm.demo.measured_stage2(DEMO_MODEL_DIR)
    assert m is not None and m.pairs >= 600 and m.gain[1] > 0 and m.two_stage > m.greedy
    assert m.picks_right[1] <= m.picks_right[0] <= m.picks_right[2]


@pytest.mark.parametrize("card", [
    pytest.param(None, id="no-card"),
    pytest.param({"domain": "running-sums"}, id="no-eval"),
    pytest.param({"eval": "600 pairs"}, id="eval-not-an-object"),
    pytest.param({"eval": _eval(heldout_pairs=KeyError)}, id="no-pair-count"),
    pytest.param({"eval": _eval(heldout_pairs="600")}, id="count-as-text"),
    pytest.param({"eval": _eval(heldout_pairs=-1)}, id="negative-count"),
    pytest.param({"eval": _eval(heldout_pairs=600.5)}, id="fractional-count"),
    pytest.param({"eval": _eval(heldout_pairs=True)}, id="count-as-bool"),
    pytest.param({"eval": _eval(accuracy__reflectrm="<b>88 %</b>")}, id="markup-for-a-share"),
    pytest.param({"eval": _eval(accuracy__greedy=1.5)}, id="share-over-1"),
    pytest.param({"eval": _eval(accuracy__greedy=None)}, id="share-null"),
    pytest.param({"eval": _eval(reflection__picks_right_interval=[0.9])}, id="interval-of-one"),
    pytest.param({"eval": _eval(reflection__same_pick_interval="[0.8, 0.9]")}, id="interval-as-text"),
    pytest.param({"eval": _eval(reflectrm_minus__greedy=[0.06, 0.04, 0.08])}, id="gain-as-list"),
    pytest.param({"eval": _eval(reflection=KeyError)}, id="no-reflection-audit"),
])
def test_a_card_without_sound_stage_2_figures_shows_none(tmp_path, card):
    assert reflectrm.demo.measured_stage2(card_dir(tmp_path, card)) is None


def test_nan_in_a_card_shows_none(tmp_path):
    raw = json.dumps({"eval": _eval()}).replace("0.82", "NaN")
    assert reflectrm.demo.measured_stage2(card_dir(tmp_path, None, raw=raw)) is None


def test_a_sound_card_reads_and_a_hugging_face_id_has_none(tmp_path):
    m = reflectrm.demo.measured_stage2(card_dir(tmp_path, {"eval": _eval()}))
    assert m is not None and m.pairs == 600 and m.gain == (0.067, 0.045, 0.088) and m.decisive == 820
    assert reflectrm.demo.measured_stage2("Qwen/Qwen3-4B") is None
