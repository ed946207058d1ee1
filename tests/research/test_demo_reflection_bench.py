"""The demo reflection bench's ceiling (`research/demo_reflection.py`): the accuracy a perfect reflection
would reach on a judgment's own samples, which separates what the sampler offers from what the
reflection makes of it."""

from pathlib import Path

import pytest

from reflectrm.core.types import Judgment, ParseStatus, Rollout
from reflectrm.demo import steps
from tests.conftest import load_bench

pytestmark = pytest.mark.research


@pytest.fixture(scope="module")
def bench():
    return load_bench("demo_reflection", folder="research")


PAIR = next(p for p in steps.make_pairs(20, seed=5) if p.subset == "steps4")
CHAIN = steps.chain_of(PAIR)
RIGHT = steps.analysis(PAIR)
SLIPPED = steps.analysis(PAIR, slips={1: steps.steps_of(CHAIN)[1].z + 1})


def _rollout(i: int, a: steps.Analysis, *, verdict: int | None = None) -> Rollout:
    return Rollout(index=i, text=a.text, analysis=a.text, prediction=verdict or a.verdict, status=ParseStatus.OK,
                   confidence=-0.1 * (i + 1), num_tokens=90)


def _judgment(rollouts: list[Rollout], anchor: int) -> Judgment:
    return Judgment(pair=PAIR, strategy="reflectrm", rollouts=tuple(rollouts), verdict=None, anchor=anchor)


def test_an_unsound_anchor_is_overturnable_only_when_a_sample_worked_the_problem_rightly(bench):
    wrong_verdict = 3 - PAIR.label
    overturnable = _judgment([_rollout(0, SLIPPED, verdict=wrong_verdict), _rollout(1, RIGHT)], anchor=0)
    stuck = _judgment([_rollout(0, SLIPPED, verdict=wrong_verdict), _rollout(1, SLIPPED, verdict=PAIR.label)], 0)
    lucky = _judgment([_rollout(0, SLIPPED, verdict=PAIR.label), _rollout(1, SLIPPED, verdict=wrong_verdict)], 0)
    sound_anchor = _judgment([_rollout(0, RIGHT), _rollout(1, SLIPPED, verdict=wrong_verdict)], 0)
    ceiling, counts = bench.reflection_ceiling([overturnable, stuck, lucky, sound_anchor])
    # a right verdict from a wrong analysis (`stuck`'s second sample) is luck no reflection can see
    assert ceiling == [True, False, True, True]
    assert counts == {"anchor_unsound": 3, "anchor_unsound_with_a_sound_sample": 1, "no_sound_sample": 2}


def test_a_faultless_first_difference_reflection_lets_a_later_mistake_win_and_vote(bench):
    """The anchor slips at step 2; a sound sample and one that slips only at step 3 both fix step 2 and win.
    Two winners with different verdicts tie, so the anchor joins and its wrong verdict decides."""
    early = steps.analysis(PAIR, slips={1: steps.steps_of(CHAIN)[1].z + 1})
    late = steps.analysis(PAIR, slips={2: steps.steps_of(CHAIN)[2].z + 1})
    wrong_verdict = 3 - PAIR.label
    js = [_judgment([_rollout(0, early, verdict=wrong_verdict), _rollout(1, RIGHT)], anchor=0),
          _judgment([_rollout(0, early, verdict=wrong_verdict), _rollout(1, RIGHT),
                     _rollout(2, late, verdict=wrong_verdict)], anchor=0),
          _judgment([_rollout(0, late, verdict=wrong_verdict), _rollout(1, early, verdict=PAIR.label)], anchor=0)]
    assert bench.first_difference_oracle(js) == [True, False, False]


def test_samples_only_prints_greedy_majority_and_the_ceiling_with_its_interval(bench, capsys, tmp_path):
    import argparse
    import json

    wrong_verdict = 3 - PAIR.label
    greedy = [_judgment([_rollout(0, SLIPPED, verdict=wrong_verdict)], anchor=0)] * 2
    sampled = [_judgment([_rollout(0, SLIPPED, verdict=wrong_verdict), _rollout(1, RIGHT)], anchor=0),
               _judgment([_rollout(0, SLIPPED, verdict=wrong_verdict), _rollout(1, SLIPPED)], anchor=0)]
    out = tmp_path / "f.json"
    args = argparse.Namespace(model=Path("m"), out=out)
    assert bench.samples_only(args, [PAIR, PAIR], greedy, sampled) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("greedy 0.0 %, majority@8 0.0 %, a perfect reflection 50.0 % (greedy +50.0 [")
    assert json.loads(out.read_text())["reflection_ceiling"]["anchor_unsound_with_a_sound_sample"] == 1


def test_the_anchor_rollout_is_the_sample_never_a_greedy_decode_at_the_same_index():
    greedy = Rollout(index=0, text="g", analysis="g", prediction=1, status=ParseStatus.OK, confidence=0.0,
                     num_tokens=1, greedy=True)
    sample = _rollout(0, RIGHT)
    assert _judgment([greedy, sample], anchor=0).anchor_rollout is sample
    assert _judgment([greedy], anchor=0).anchor_rollout is None
    assert Judgment(pair=PAIR, strategy="majority", rollouts=(sample,), verdict=1).anchor_rollout is None


@pytest.mark.parametrize(("argv", "message"), [
    (["--model", "{tmp}"], "not a running-sum demo judge"),
    (["--model", "{arithmetic}"], "not a running-sum demo judge"),
    (["--model", "{tmp}", "--pairs", "0"], "'0' is not a whole number of at least 1"),
    (["--model", "{tmp}", "--max-new-tokens", "-3"], "'-3' is not a whole number of at least 1"),
])
def test_the_demo_reflection_bench_refuses_what_cannot_run_in_one_line(tmp_path, capsys, argv, message):
    bench = load_bench("demo_reflection", folder="research")
    arithmetic = tmp_path / "arithmetic"  # a demo judge of another domain (the shipped one may be either)
    arithmetic.mkdir()
    (arithmetic / "demo_card.json").write_text('{"domain": "arithmetic"}')
    with pytest.raises(SystemExit) as exc:
        bench.main([a.format(tmp=tmp_path, arithmetic=arithmetic) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and message in err[-1] and "Traceback" not in "\n".join(err)


def test_the_demo_reflection_bench_refuses_too_many_pairs_and_an_unwritable_out_before_judging(tmp_path, capsys):
    import json

    from reflectrm.demo.heldout import MAX_HELDOUT_PAIRS

    bench = load_bench("demo_reflection", folder="research")
    (tmp_path / "demo_card.json").write_text(json.dumps({"domain": "reflectrm.demo.steps"}))
    (tmp_path / "a-file").write_text("keep")
    for extra, message in ((["--pairs", str(MAX_HELDOUT_PAIRS + 1)], "ask for fewer"),
                           (["--out", str(tmp_path / "a-file" / "x.json")], "cannot create its folder")):
        with pytest.raises(SystemExit) as exc:
            bench.main(["--model", str(tmp_path), *extra])
        assert exc.value.code == 2 and message in capsys.readouterr().err.strip().splitlines()[-1]
    assert (tmp_path / "a-file").read_text() == "keep"


def test_card_gets_the_figures_and_keeps_its_build_stages(bench, tmp_path):
    import json

    stages = [{"stage": 1, "sha256": "ab" * 32}]
    (tmp_path / "demo_card.json").write_text(json.dumps({"domain": "running-sums", "stages": stages}))
    keys = ("heldout_pairs", "backend", "accuracy", "accuracy_by_kind", "reflectrm_minus", "sample_parse_rate",
            "reflection_parse_rate", "greedy_parse_rate", "sample_accuracy", "anchor_accuracy", "load")
    figures = {k: k for k in keys} | {"heldout_pairs": 600, "reflection": {
        "decisive_reflections": 10, "picks_right": 0.9, "picks_right_interval": [0.6, 0.98],
        "same_pick_both_orders": 0.8, "same_pick_interval": [0.49, 0.94], "checks_the_first_difference": 1.0}}
    bench.write_card(tmp_path, figures, ["--model", str(tmp_path), "--pairs", "600", "--card"])
    card = json.loads((tmp_path / "demo_card.json").read_text())
    assert card["stages"] == stages and card["domain"] == "running-sums"
    assert card["eval"]["command"] == f"python research/demo_reflection.py --model {tmp_path} --pairs 600"
    assert card["eval"]["heldout_pairs"] == 600 and card["eval"]["reflection"]["picks_right_interval"] == [0.6, 0.98]
    assert "checks_the_first_difference" not in card["eval"]["reflection"] and card["eval"]["date"]
