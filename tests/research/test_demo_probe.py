"""The running-sum probe (`research/demo_probe.py`): it names the kind of token where an output first
leaves the right one, and refuses a judge that is not a running-sum one in one line."""

import random

import pytest

from reflectrm.core.prompts import Task, format_output
from reflectrm.demo import steps
from tests.conftest import load_bench

pytestmark = pytest.mark.research


@pytest.fixture(scope="module")
def probe():
    return load_bench("demo_probe", folder="research")


def _slipped_pair(at: int):
    pair = next(p for p in steps.make_pairs(50, seed=3) if p.subset == "steps5")
    chain = steps.chain_of(pair)
    right = steps.analysis(pair)
    wrong = steps.analysis(pair, slips={at: steps.steps_of(chain)[at].z + 1})
    text, choice = steps.reflection_analysis(right, wrong, tie_choice=1, chain=chain)
    return chain, right, wrong, format_output(text, choice, task=Task.ANALYSIS)


def test_a_reflection_that_walks_past_the_difference_departs_at_its_walk_or_its_subtraction(probe):
    chain, right, wrong, target = _slipped_pair(2)
    assert probe.first_departure(target, target, probe.REFLECTION_TOKENS) == "exact"
    z = steps.steps_of(chain)[2].z
    same = target.replace(f"= {z + 1}; {z} - {z + 1} = -1.", f"= {z}; {z} - {z} = 0.")  # copied the wrong value
    assert probe.first_departure(same, target, probe.REFLECTION_TOKENS) == "copy c2 value"
    blind = target.replace(f"{z} - {z + 1} = -1.", f"{z} - {z + 1} = 0.")  # subtracted wrongly: walks on
    assert probe.first_departure(blind, target, probe.REFLECTION_TOKENS) == "walk subtraction"
    assert probe.verdict(target, "Critique") == 1 and probe.verdict("no verdict", "Critique") is None


def test_a_response_whose_step_slips_departs_at_that_step_result(probe):
    pair = steps.make_pairs(1, seed=9)[0]
    target = steps.response_example(pair)
    slipped = steps.analysis(pair, slips={1: steps.steps_of(steps.chain_of(pair))[1].z + random.choice((1, 2))})
    output = format_output(slipped.text, slipped.verdict, task=Task.RESPONSE)
    assert probe.first_departure(output, target, probe.RESPONSE_TOKENS) == "step result"


@pytest.mark.parametrize(("pairs", "message"), [("4", "not a running-sum demo judge"),
                                                ("100001", "ask for fewer")])
def test_the_probe_refuses_another_domain_or_too_many_pairs_in_one_line(probe, capsys, tmp_path, pairs, message):
    # an arithmetic judge (the shipped one may be either), or a running-sum one asked too many pairs
    (tmp_path / "demo_card.json").write_text('{"domain": "arithmetic"}' if message.startswith("not")
                                             else '{"domain": "reflectrm.demo.steps"}')
    model = tmp_path  # too many pairs: refused before any work
    with pytest.raises(SystemExit) as exit_:
        probe.main(["--model", str(model), "--pairs", pairs])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and len(err.splitlines()) == 1 and message in err
