"""The running-sum judge's build tool (`research/demojudge/steps_build.py`, with build.py's machinery): the
lessons it renders, the loss weights, its arguments, its output folder and its recipes."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from reflectrm.core.parsing import parse_output
from reflectrm.core.prompts import Task
from reflectrm.demo.heldout import lessons
from reflectrm.errors import InputError
from reflectrm.demo import steps
from reflectrm.demo.steps import (
    Balance,
    chain_of,
    reflection_example,
)

pytestmark = pytest.mark.research

PAIRS = steps.make_pairs(600, seed=7)


def test_build_spans_refactor_keeps_the_arithmetic_domains_loss_weights():
    """build.train's default spans (the shipped judge's build) are what they were before `spans=` existed."""
    from research.demojudge.build import Example, _arith_spans

    target = "<Analysis>7 + 5 = 12. Response 1: 13 - 12 = 1, wrong. Response 2: 12 - 12 = 0, right.</Analysis>\n" \
             "<Result>Response 2 is better than Response 1</Result>"
    result = (target.index("12"), target.index("12") + 2)
    taught, untaught = _arith_spans(Example("p", target, True))
    assert result in taught and untaught == []
    taught, untaught = _arith_spans(Example("p", target, False))
    assert result not in taught and untaught == [result]
    assert {target[a:b] for a, b in taught} == {"1", "0", "wrong", "right", "2"}


def test_build_step_examples_leave_the_slipped_result_out_of_the_loss():
    from research.demojudge.steps_build import spans, training_examples

    examples, pairs = training_examples(60, seed=2)
    assert len(pairs) == 60 and len(examples) == 120  # a preference and a reflection example per pair
    mistaken = [ex for ex in examples if ex.untaught]
    slipped = [ex for ex in mistaken if len(ex.untaught) == 1]
    misread = [ex for ex in mistaken if len(ex.untaught) == 2]
    assert slipped and misread and len(slipped) + len(misread) == len(mistaken)
    for ex in slipped:
        (a, b), = ex.untaught
        taught, untaught = spans(ex)
        assert untaught == [(a, b)] and (a, b) not in taught and ex.target[a:b].lstrip("-").isdigit()
    for ex in misread:  # the misread operation and operand; the equation that follows them stays taught
        (a, b), (c, d) = ex.untaught
        taught, untaught = spans(ex)
        assert ex.target[a:b] in ("add", "subtract") and ex.target[c:d].isdigit() and not set(untaught) & set(taught)
    _, again = lessons(60, seed=2)
    assert again == pairs  # a benchmark can leave the build's problems out without rendering


def test_build_weighs_the_reflections_decisions():
    from research.demojudge.steps_build import StepExample, spans

    target = ("<Analysis>Step 1: add 8, 9 + 8 = 17; add 8, 9 + 8 = 16; 17 - 16 = 1. The question says add 8. "
              "Check 17 - 8 = 9, 9 - 9 = 0, Critique 1 is right.</Analysis>\n"
              "<Result>Critique 1 is better than Critique 2</Result>")
    taught, _ = spans(StepExample("p", target))
    words = Counter(target[a:b] for a, b in taught)
    assert words["The question"] == 1 and words["Step"] == 1 and words["0"] == 1 and words["."] == 1
    assert words["17"] == 3 and words["16"] == 2 and words["9"] >= 4 and words["add"] == 3
    assert words["1"] == 3  # the walk's difference, the decision, the verdict


def test_misread_frac_zero_builds_slips_only_and_the_card_names_the_stream():
    """--misread-frac 0 is the earlier builds' data (slips only); a card's build_args say which stream it trained on."""
    from reflectrm.demo.heldout import trained_problems
    from research.demojudge.steps_build import training_examples

    examples, pairs = training_examples(200, seed=5, misread_frac=0.0)
    assert all(len(ex.untaught) <= 1 for ex in examples)
    assert not any("The question says" in ex.target and ", Critique 2 is right" in ex.target
                   and "Check " not in ex.target for ex in examples)
    rng, balance = random.Random(4), Balance()
    kinds = {reflection_example(rng, p, balance, misread_frac=0.0)[3] for p in PAIRS[:300]}
    assert kinds and not any("misread" in k for k in kinds)
    card = {"build_args": {"pairs": 200, "seed": 5, "misread_frac": 0.0}}
    assert trained_problems(card) == {chain_of(p) for p in pairs}
    _, other = lessons(200, seed=5, misread_frac=0.5)
    card = {"build_args": {"pairs": 200, "seed": 5, "misread_frac": 0.5}}
    assert trained_problems(card) == {chain_of(p) for p in other}


def test_a_card_names_each_stage_s_ranges_and_the_held_out_pairs_follow_the_last():
    """A wide stage on a narrow one: the held-out pairs are wide, and leave out both stages' problems."""
    from reflectrm.demo.heldout import heldout_pairs, trained_problems
    from research.demojudge.steps_build import training_examples

    _, narrow = lessons(100, seed=5, misread_frac=0.0)
    _, wide = lessons(100, seed=6, misread_frac=0.0, ranges=steps.RANGES["wide"])
    assert {chain_of(p) for p in narrow} != {chain_of(p) for p in wide}
    prior = {"build_args": {"pairs": 100, "seed": 5, "misread_frac": 0.0}}
    card = {"build_args": {"pairs": 100, "seed": 6, "misread_frac": 0.0, "ranges": "wide", "prior": prior}}
    assert trained_problems(card) == {chain_of(p) for p in narrow + wide}
    held = heldout_pairs(card, 40, seed=6, source="t")  # the wide stage's own stream: all its problems left out
    assert len(held) == 40 and not {chain_of(p) for p in held} & trained_problems(card)
    assert any(b > 9 for p in held for _, b in chain_of(p).ops)  # wide operands
    with pytest.raises(InputError, match="ranges 'huge'; known: narrow, medium, wide"):
        trained_problems({"build_args": {"pairs": 10, "ranges": "huge"}})


@pytest.mark.parametrize(("argv", "message"), [
    (["--steps", "0"], "'0' is not a whole number of at least 1"),
    (["--pairs", "x"], "'x' is not a whole number of at least 1"),
    (["--misread-frac", "nan"], "'nan' is not a share between 0 and 1"),
    (["--misread-frac", "1.5"], "'1.5' is not a share between 0 and 1"),
    (["--carry-drop", "-0.1"], "'-0.1' is not a share between 0 and 1"),
    (["--lr", "-1"], "--lr -1.0 must be a positive number"),
    (["--checkpoint-every", "-1"], "must be 0 (never) or more"),
    (["--init", "{tmp}/nowhere"], "is not a built demo judge"),
    (["--out", "{shipped}"], "is the shipped judge"),
    (["--out", "{tmp}/a-file"], "is a file: pass a folder"),
    (["--out", "{tmp}/a-file/model"], "is a file, so the folder cannot be created"),
    (["--recipe", "careless", "--steps", "5"], "--recipe careless sets --steps itself: drop it"),
    (["--recipe", "careless", "--lr=1", "--init", "{tmp}"], "sets --init, --lr itself: drop them"),
    (["--rec", "careless", "--carry", "0.5"], "--recipe careless sets --carry-drop itself: drop it"),
    (["--recipe", "careless", "--out", "{tmp}/a"], "writes a-stage1 beside --out: --out {tmp}/a-stage1 is a file"),
])
def test_a_build_refuses_bad_arguments_in_one_line_before_any_work(tmp_path, capsys, argv, message):
    """A build takes up to an hour: what cannot work is refused first (exit 2, one line), nothing written."""
    from reflectrm.defaults import DEMO_MODEL_DIR
    from research.demojudge.steps_build import main

    (tmp_path / "a-file").write_text("keep")
    (tmp_path / "a-stage1").write_text("keep")  # where a recipe's first stage would go
    argv = [a.format(tmp=tmp_path, shipped=DEMO_MODEL_DIR) for a in argv]
    message = message.format(tmp=tmp_path)
    out = tmp_path / "out"
    full = argv if "--out" in argv else ["--out", str(out), *argv]
    shipped_before = sorted((p.name, p.stat().st_mtime_ns) for p in DEMO_MODEL_DIR.iterdir())
    with pytest.raises(SystemExit) as exc:
        main(full)
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and message in err[-1] and "Traceback" not in "\n".join(err)
    assert not out.exists() and (tmp_path / "a-file").read_text() == "keep"
    assert sorted((p.name, p.stat().st_mtime_ns) for p in DEMO_MODEL_DIR.iterdir()) == shipped_before


def test_a_build_refuses_to_replace_a_folder_that_is_not_a_model_s(tmp_path):
    """A build replaces its --out whole: a folder of other files (the current directory, a project) is refused."""
    from research.demojudge.build import writable_folder

    (tmp_path / "notes.txt").write_text("keep")
    assert "holds files that are not a model's" in writable_folder(tmp_path)
    (tmp_path / "judge").mkdir()
    (tmp_path / "judge" / "demo_card.json").write_text("{}")
    assert writable_folder(tmp_path / "judge") is None  # a judge's folder: rebuilt in place
    assert (tmp_path / "notes.txt").read_text() == "keep" and not [p for p in tmp_path.iterdir() if
                                                                    p.name.startswith(".")]


def test_a_save_stopped_half_way_leaves_the_previous_model_whole(tmp_path):
    from research.demojudge.build import save_atomically

    judge = tmp_path / "judge"
    save_atomically(judge, lambda f: [(f / n).write_text("old " + n) for n in ("weights", "demo_card.json")])

    def interrupted(folder):
        (folder / "weights").write_text("new weights")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        save_atomically(judge, interrupted)
    assert {p.name: p.read_text() for p in judge.iterdir()} == {"weights": "old weights",
                                                                 "demo_card.json": "old demo_card.json"}
    assert [p.name for p in tmp_path.iterdir()] == ["judge"]  # no half-written sibling left
    save_atomically(judge, lambda f: (f / "weights").write_text("new weights"))
    assert {p.name: p.read_text() for p in judge.iterdir()} == {"weights": "new weights"}
    assert [p.name for p in tmp_path.iterdir()] == ["judge"]


def test_a_careless_build_teaches_the_dropped_carry_and_reflections_that_catch_it_in_either_order():
    from reflectrm.demo.heldout import trained_problems
    from research.demojudge.steps_build import training_examples

    examples, pairs = training_examples(400, seed=5, misread_frac=0.0, carry_drop=1.0)
    responses = [ex for ex in examples if "[Critique 1]" not in ex.prompt]
    dropped = [ex for ex in responses if re.search(r"(\d+) \+ ([89]) = (\d+)\.", ex.target) and any(
        int(x) % 10 + int(y) >= 10 and int(z) == int(x) + int(y) - 10
        for x, y, z in re.findall(r"(\d+) \+ ([89]) = (\d+)\.", ex.target))]
    assert sum(not ex.untaught for ex in dropped) > 100  # the habit is taught as written (untaught: a slip's)
    careful, _ = training_examples(400, seed=5, misread_frac=0.0)
    assert not any(int(x) % 10 + int(y) >= 10 and int(z) == int(x) + int(y) - 10 for ex in careful
                   if not ex.untaught and "[Critique 1]" not in ex.prompt for x, y, z in re.findall(r"(\d+) \+ ([89]) = (\d+)\.", ex.target))
    caught = Counter()
    for ex in examples:
        m = re.search(r"(\d+) \+ ([89]) = (\d+); add \2, \1 \+ \2 = (\d+); \3 - \4 = (-?10)\. .*Critique (\d) is right",
                      ex.target)
        x, y, z1, z2 = (int(v) for v in m.groups()[:4]) if m else (0, 0, 0, 0)
        if m and {z1, z2} == {x + y, x + y - 10}:  # the walk stops where one critique dropped a carry
            caught[m[6]] += 1
            assert int(m[6]) == (1 if z1 == x + y else 2)  # the careful one is chosen
    assert caught[1] + caught[2] == 0 and caught["1"] > 20 and caught["2"] > 20  # first and second alike
    card = {"build_args": {"pairs": 400, "seed": 5, "misread_frac": 0.0, "carry_drop": 1.0}}
    assert trained_problems(card) == {chain_of(p) for p in pairs}


def test_both_orders_shows_each_decisive_reflection_swapped_and_draws_the_same_pairs():
    from research.demojudge.steps_build import training_examples

    once, pairs = training_examples(300, seed=6, misread_frac=0.0, carry_drop=0.7)
    twice, same_pairs = training_examples(300, seed=6, misread_frac=0.0, carry_drop=0.7, both_orders=True)
    assert same_pairs == pairs  # the stream is untouched: trained_problems needs no new argument
    reflections = [ex for ex in once if "[Critique 1]" in ex.prompt]
    shown = [ex for ex in twice if "[Critique 1]" in ex.prompt]
    assert [ex for ex in twice if "[Critique 1]" not in ex.prompt] == [ex for ex in once if "[Critique 1]" not in ex.prompt]
    agree = sum("The critiques agree" in ex.target for ex in reflections)
    assert len(shown) == 2 * len(reflections) - agree and 0 < agree < len(reflections) / 3
    rng = random.Random(3)
    for pair in pairs[:60]:
        out = steps.reflection_examples(rng, pair, steps.Balance(), misread_frac=0.0, carry_drop=0.7, both_orders=True)
        if len(out) == 1:
            assert out[0][3] == "agree"
            continue
        (c1, c2, t1, kind), (d1, d2, t2, kind2) = out
        assert (d1, d2) == (c2, c1) and kind == kind2
        pick = lambda t, a, b: (a, b)[parse_output(t, task=Task.ANALYSIS).choice - 1]  # noqa: E731
        assert pick(t1, c1, c2) == pick(t2, d1, d2)  # the same critique is right in either place



def test_checking_a_build_s_out_folder_creates_nothing(tmp_path, monkeypatch):
    """The folder appears only when a model is saved: a build stopped before that leaves no empty folder."""
    from research.demojudge import build

    assert build.writable_folder(tmp_path / "new" / "judge") is None
    assert not (tmp_path / "new").exists()
    # the nearest folder that exists is the one tried (as root os.access says yes everywhere, so it makes one)
    tried = []

    def refuse(prefix, dir):
        tried.append(dir)
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(build.tempfile, "mkdtemp", refuse)
    assert build.writable_folder(tmp_path / "new" / "judge") == \
        f"--out {tmp_path / 'new' / 'judge'}: {tmp_path} is not writable (Permission denied): pick a writable folder"
    assert tried == [tmp_path]


def test_a_recipe_builds_its_stages_in_one_command_each_continuing_the_last(tmp_path, monkeypatch):
    from reflectrm.demo import read_card
    from reflectrm.demo.heldout import trained_problems
    from research.demojudge import steps_build

    monkeypatch.setitem(steps_build.RECIPES, "tiny", (
        {"steps": 2, "lr": 1e-3, "seed": 11, "pairs": 24},
        {"steps": 1, "lr": 1e-3, "seed": 12, "pairs": 24, "carry_drop": 0.5},
    ))
    out = tmp_path / "judge"
    assert steps_build.main(["--out", str(out), "--recipe", "tiny"]) == 0
    first, last = read_card(tmp_path / "judge-stage1"), read_card(out)
    assert first["build_args"]["recipe"] == "tiny 1/2" and first["build_args"]["init"] is None
    expected = {"recipe": "tiny 2/2", "init": str(tmp_path / "judge-stage1"), "carry_drop": 0.5, "misread_frac": 0.0,
                "seed": 12, "steps": 1}
    assert {k: last["build_args"][k] for k in expected} == expected
    assert last["build_args"]["prior"]["build_args"]["seed"] == 11
    # held-out pairs leave out both stages' problems
    stage_problems = [trained_problems(c) for c in (first, last)]
    assert stage_problems[0] < stage_problems[1] and len(stage_problems[1]) > len(stage_problems[0])

