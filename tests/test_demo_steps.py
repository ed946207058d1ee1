"""The multi-step demo domain: every judgment verifiable, no position shortcut in the reflections."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from reflectrm.core.parsing import parse_output
from reflectrm.core.prompts import Task
from reflectrm.errors import InputError
from reflectrm.demo import steps
from reflectrm.demo.steps import (
    Balance,
    analysis,
    chain_of,
    difference_kind,
    first_difference,
    make_pairs,
    parse_analysis,
    reflection_analysis,
    reflection_example,
)

PAIRS = make_pairs(600, seed=7)


def test_pairs_have_exactly_one_right_answer_and_balanced_labels():
    labels = Counter(p.label for p in PAIRS)
    assert abs(labels[1] - labels[2]) < 80
    assert set(Counter(p.subset for p in PAIRS)) == set(steps.KINDS)
    for p in PAIRS:
        chain = chain_of(p)
        values = steps.stated(p)
        right = values[p.label - 1]
        assert right == chain.answer and values[2 - p.label] != chain.answer
        assert p.subset == chain.kind
        low, high = steps.DEFAULT_RANGES.values
        assert all(low <= e.z <= high for e in steps.steps_of(chain))


@pytest.mark.parametrize("name", sorted(steps.RANGES))
def test_every_problem_stays_in_its_ranges(name):
    ranges = steps.RANGES[name]
    assert ranges.name == name
    for p in make_pairs(400, seed=5, ranges=ranges):
        chain = chain_of(p)
        assert ranges.starts[0] <= chain.start <= ranges.starts[1]
        assert all(ranges.operands[0] <= b <= ranges.operands[1] for _, b in chain.ops)
        assert all(ranges.values[0] <= e.z <= ranges.values[1] for e in steps.steps_of(chain))
        assert steps.stated(p)[2 - p.label] != chain.answer
    assert make_pairs(50, seed=5) == make_pairs(50, seed=5, ranges=steps.RANGES["narrow"])  # the default stream


def test_right_analysis_is_right_picks_the_label_and_reads_back():
    for p in PAIRS:
        a = analysis(p)
        assert all(e.right for e in a.steps) and [c.right for c in a.checks] == [p.label == 1, p.label == 2]
        assert a.verdict == p.label
        parsed = parse_output(steps.response_example(p), task=Task.RESPONSE)
        assert parsed.choice == p.label and parsed.analysis == a.text
        assert parse_analysis(a.text) == a


def test_a_slip_propagates_and_later_steps_follow_it():
    p = PAIRS[1]
    chain = chain_of(p)
    a = analysis(p, slips={0: steps.steps_of(chain)[0].z + 1})
    assert not a.steps[0].right and all(e.right for e in a.steps[1:])
    assert a.result == chain.answer + 1  # +/- only: an off-by-one at step 1 ends off by one
    assert first_difference(analysis(p), a) == ("step", 0)
    assert difference_kind(analysis(p), a) == "step 1"


def test_an_analysis_whose_result_matches_neither_response_picks_response_1():
    p = next(p for p in PAIRS if p.label == 2)
    chain = chain_of(p)
    a = analysis(p, slips={len(chain.ops) - 1: 99})
    assert not any(c.right for c in a.checks) and a.verdict == 1


@pytest.mark.parametrize("op, x, y", [("+", 9, 8), ("-", 34, 5)])
def test_inverse_check_passes_exactly_for_the_right_value(op, x, y):
    right = steps.apply(x, op, y)
    for z in range(right - 12, right + 13):
        text, ok = steps.inverse_check(steps.Eq(3, x, op, y, z))
        assert ok == (z == right)
        back = z - y if op == "+" else z + y
        assert text == f"Check {z} {'-' if op == '+' else '+'} {y} = {back}, {back} - {x} = {back - x}"


def test_reflection_walks_to_the_first_difference_checks_it_and_picks_the_critique_right_there():
    rng, balance = random.Random(3), Balance()
    seen = Counter()
    for p in PAIRS:
        c1, c2, target, kind = reflection_example(rng, p, balance)
        parsed = parse_output(target, task=Task.ANALYSIS)
        a, b = parse_analysis(c1), parse_analysis(c2)
        assert parsed.choice in (1, 2) and a is not None and b is not None
        seen[kind] += 1
        if kind == "agree":
            assert c1 == c2 and "The critiques agree" in parsed.analysis
            continue
        assert difference_kind(a, b, chain_of(p)) == kind and c1 != c2
        where, i = first_difference(a, b)
        chosen, other = (a, b)[parsed.choice - 1], (a, b)[2 - parsed.choice]
        if where == "step":  # the chosen critique is the one right at the first difference
            assert steps.step_right(chosen.steps[i], chain_of(p)) and not steps.step_right(other.steps[i], chain_of(p))
            assert parsed.analysis.count("Step ") == i + 1 and f"Step {i + 1}: " in parsed.analysis
            op, b = chain_of(p).ops[i]
            assert f"The question says {'add' if op == '+' else 'subtract'} {b}" in parsed.analysis
            # a check of Critique 1's arithmetic, unless Critique 1 misread the step (then Critique 2 at once)
            assert ("Check " in parsed.analysis) == ((a.steps[i].op, a.steps[i].y) == (op, b))
        else:
            c = chosen.checks[i]
            assert c.d == c.stated - c.computed and f"= {c.d}, Critique" in parsed.analysis
        if all(steps.step_right(e, chain_of(p)) for e in chosen.steps):  # a right analysis beats a wrong one
            assert chosen == analysis(p)
    assert {"agree", "step 1", "step 4", "step 2 misread", "Response 1", "Response 2"} <= set(seen)


def test_two_wrong_critiques_the_one_that_slipped_later_wins():
    p = next(p for p in PAIRS if p.subset == "steps5")
    chain = chain_of(p)
    early = analysis(p, slips={1: steps.steps_of(chain)[1].z + 2})
    late = analysis(p, slips={3: steps.steps_of(chain)[3].z - 1})
    for c1, c2, want in ((early, late, 2), (late, early, 1)):
        text, choice = reflection_analysis(c1, c2, tie_choice=1, chain=chain)
        assert choice == want and text.count("Step ") == 2


def test_the_walk_subtracts_the_critiques_values_and_stops_at_the_first_nonzero_difference():
    p = next(p for p in PAIRS if p.subset == "steps5")
    chain = chain_of(p)
    z = steps.steps_of(chain)[2].z
    right, wrong = analysis(p), analysis(p, slips={2: z + 1})
    text, choice = reflection_analysis(right, wrong, tie_choice=1, chain=chain)
    walked = re.findall(r"; (-?\d+) - (-?\d+) = (-?\d+)\.", text)
    assert [int(d) for *_, d in walked] == [0, 0, -1] and walked[-1][:2] == (str(z), str(z + 1))
    assert choice == 1 and steps.analysis_true(text, chain, task=Task.ANALYSIS)
    false_walk = text.replace(f"{z} - {z + 1} = -1.", f"{z} - {z + 1} = 0.")
    assert not steps.analysis_true(false_walk, chain, task=Task.ANALYSIS)  # a walk's subtraction is checked too
    agree, _ = reflection_analysis(right, right, tie_choice=2, chain=chain)
    assert agree.count(" = 0.") == len(chain.ops) and "The critiques agree, Critique 2 is right." in agree


def test_a_misread_step_is_caught_by_reading_the_question_again_in_either_order():
    p = next(p for p in PAIRS if p.subset == "steps5")
    chain = chain_of(p)
    read = steps.misread(random.Random(0), chain, 2)
    assert read is not None and read != chain.ops[2]
    right, wrong = analysis(p), analysis(p, misreads={2: read})
    assert wrong.steps[2].right and not steps.step_right(wrong.steps[2], chain)  # true arithmetic on a wrong step
    for c1, c2, want in ((right, wrong, 1), (wrong, right, 2)):
        text, choice = reflection_analysis(c1, c2, tie_choice=1, chain=chain)
        assert choice == want and text.count("Step ") == 3 and "The question says" in text
    assert difference_kind(right, wrong, chain) == "step 3 misread" and difference_kind(right, wrong) == "step 3"


def test_no_position_shortcut_per_kind_of_disagreement():
    rng, balance = random.Random(11), Balance()
    picks: dict[str, Counter] = {}
    for p in make_pairs(3000, seed=12):
        *_, target, kind = reflection_example(rng, p, balance)
        picks.setdefault(kind, Counter())[parse_output(target, task=Task.ANALYSIS).choice] += 1
    assert {"agree", "step 1", "step 6", "step 6 misread", "Response 1", "Response 2"} <= set(picks)
    for kind, c in picks.items():
        assert abs(c[1] - c[2]) <= 1, (kind, c)


def test_chain_is_read_back_from_every_question_form():
    for p in PAIRS[:20]:
        assert chain_of(p).expression in p.query
    with pytest.raises(ValueError, match="not a demo running-sum query"):
        chain_of(steps.PreferencePair.from_query("What is 3 + 4?", "7", "8", label=1))


def test_parse_analysis_refuses_text_not_in_the_format():
    assert parse_analysis("Response 1 is right.") is None
    assert parse_analysis("") is None


def test_build_spans_refactor_keeps_the_arithmetic_domains_loss_weights():
    """build.train's default spans (the shipped judge's build) are what they were before `spans=` existed."""
    from reflectrm.demo.build import Example, _arith_spans

    target = "<Analysis>7 + 5 = 12. Response 1: 13 - 12 = 1, wrong. Response 2: 12 - 12 = 0, right.</Analysis>\n" \
             "<Result>Response 2 is better than Response 1</Result>"
    result = (target.index("12"), target.index("12") + 2)
    taught, untaught = _arith_spans(Example("p", target, True))
    assert result in taught and untaught == []
    taught, untaught = _arith_spans(Example("p", target, False))
    assert result not in taught and untaught == [result]
    assert {target[a:b] for a, b in taught} == {"1", "0", "wrong", "right", "2"}


def test_build_step_examples_leave_the_slipped_result_out_of_the_loss():
    from reflectrm.demo.steps_build import spans, training_examples

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
    _, again = training_examples(60, seed=2, render=False)
    assert again == pairs  # a benchmark can leave the build's problems out without rendering


def test_build_weighs_the_reflections_decisions():
    from reflectrm.demo.steps_build import StepExample, spans

    target = ("<Analysis>Step 1: add 8, 9 + 8 = 17; add 8, 9 + 8 = 16; 17 - 16 = 1. The question says add 8. "
              "Check 17 - 8 = 9, 9 - 9 = 0, Critique 1 is right.</Analysis>\n"
              "<Result>Critique 1 is better than Critique 2</Result>")
    taught, _ = spans(StepExample("p", target))
    words = Counter(target[a:b] for a, b in taught)
    assert words["The question"] == 1 and words["Step"] == 1 and words["0"] == 1 and words["."] == 1
    assert words["17"] == 3 and words["16"] == 2 and words["9"] >= 4 and words["add"] == 3
    assert words["1"] == 3  # the walk's difference, the decision, the verdict


def test_arithmetic_reward_checks_running_sums_step_by_step():
    from reflectrm.core.prompts import reflection_prompt, response_prompt
    from reflectrm.core.types import messages_to_dicts
    from reflectrm.demo.rewards import arithmetic_reward

    p = next(p for p in PAIRS if p.subset == "steps5")
    chain = chain_of(p)
    right, slip = analysis(p), analysis(p, slips={2: steps.steps_of(chain)[2].z + 1})
    copied_wrong = right.text.replace(f"= {right.steps[1].z}.", f"= {right.steps[1].z + 10}.", 1)
    prompt = messages_to_dicts(response_prompt(p))
    texts = [steps.response_example(p), f"<Analysis>{slip.text}</Analysis>\n<Result>Response 1 is better</Result>",
             f"<Analysis>{copied_wrong}</Analysis>\n<Result>Response 1 is better</Result>",
             f"<Analysis>{analysis(p, wrong_diff={1: 5}).text}</Analysis>\n<Result>Response 1 is better</Result>"]
    assert arithmetic_reward([prompt] * 4, texts, ["response"] * 4) == [1.0, 0.0, 0.0, 0.0]
    refl_prompt = messages_to_dicts(reflection_prompt(p, right.text, slip.text))
    good, _ = reflection_analysis(right, slip, tie_choice=1, chain=chain)
    bad = good.replace(" = 0, Critique", " = 1, Critique")
    outs = [f"<Analysis>{t}</Analysis>\n<Result>Critique 1 is better than Critique 2</Result>" for t in (good, bad)]
    assert arithmetic_reward([refl_prompt] * 2, outs, ["analysis"] * 2) == [1.0, 0.0]


def test_misread_frac_zero_builds_slips_only_and_the_card_names_the_stream():
    """--misread-frac 0 is the earlier builds' data (slips only); a card's build_args say which stream it trained on."""
    from reflectrm.demo.steps_build import trained_problems, training_examples

    examples, pairs = training_examples(200, seed=5, misread_frac=0.0)
    assert all(len(ex.untaught) <= 1 for ex in examples)
    assert not any("The question says" in ex.target and ", Critique 2 is right" in ex.target
                   and "Check " not in ex.target for ex in examples)
    rng, balance = random.Random(4), Balance()
    kinds = {reflection_example(rng, p, balance, misread_frac=0.0)[3] for p in PAIRS[:300]}
    assert kinds and not any("misread" in k for k in kinds)
    card = {"build_args": {"pairs": 200, "seed": 5, "misread_frac": 0.0}}
    assert trained_problems(card) == {chain_of(p) for p in pairs}
    _, other = training_examples(200, seed=5, misread_frac=0.5, render=False)
    card = {"build_args": {"pairs": 200, "seed": 5, "misread_frac": 0.5}}
    assert trained_problems(card) == {chain_of(p) for p in other}


def test_a_card_names_each_stage_s_ranges_and_the_held_out_pairs_follow_the_last():
    """A wide stage on a narrow one: the held-out pairs are wide, and leave out both stages' problems."""
    from reflectrm.demo.steps_build import heldout_pairs, trained_problems, training_examples

    _, narrow = training_examples(100, seed=5, misread_frac=0.0, render=False)
    _, wide = training_examples(100, seed=6, misread_frac=0.0, render=False, ranges=steps.RANGES["wide"])
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
    from reflectrm.demo.steps_build import main

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


def test_checking_a_build_s_out_folder_creates_nothing(tmp_path, monkeypatch):
    """The folder appears only when a model is saved: a build stopped before that leaves no empty folder."""
    from reflectrm.demo import build

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


def test_a_build_refuses_to_replace_a_folder_that_is_not_a_model_s(tmp_path):
    """A build replaces its --out whole: a folder of other files (the current directory, a project) is refused."""
    from reflectrm.demo.build import writable_folder

    (tmp_path / "notes.txt").write_text("keep")
    assert "holds files that are not a model's" in writable_folder(tmp_path)
    (tmp_path / "judge").mkdir()
    (tmp_path / "judge" / "demo_card.json").write_text("{}")
    assert writable_folder(tmp_path / "judge") is None  # a judge's folder: rebuilt in place
    assert (tmp_path / "notes.txt").read_text() == "keep" and not [p for p in tmp_path.iterdir() if
                                                                    p.name.startswith(".")]


def test_a_save_stopped_half_way_leaves_the_previous_model_whole(tmp_path):
    from reflectrm.demo.build import save_atomically

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


def test_a_careless_judge_drops_the_carry_only_at_its_blind_spots_and_continues_from_what_it_wrote():
    assert steps.blind_spot(27, "+", 8) and steps.blind_spot(19, "+", 9)
    assert not steps.blind_spot(21, "+", 8)  # no carry
    assert not steps.blind_spot(27, "+", 7) and not steps.blind_spot(27, "-", 8)  # not 8 or 9 added
    chain = steps.Chain(27, (("+", 8), ("-", 3), ("+", 9)))  # 35, 32, 41: blind spots at steps 1 and 3
    assert steps.careless_slips(random.Random(0), chain, 0.0) == {}
    assert steps.careless_slips(random.Random(0), chain, 1.0) == {0: 25, 2: 21}  # 25 - 3 = 22; 22 + 9 = 31, dropped to 21
    chain = steps.Chain(27, (("+", 8), ("+", 4)))  # 35, 39; dropped: 25, then 29 (no carry left to drop)
    assert steps.careless_slips(random.Random(0), chain, 1.0) == {0: 25}
    rng = random.Random(1)
    drops = [steps.careless_slips(rng, steps.Chain(27, (("+", 8),)), 0.65) for _ in range(4000)]
    assert 0.62 < sum(bool(d) for d in drops) / 4000 < 0.68


def test_a_careless_build_teaches_the_dropped_carry_and_reflections_that_catch_it_in_either_order():
    from reflectrm.demo.steps_build import trained_problems, training_examples

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
    from reflectrm.demo.steps_build import training_examples

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


def test_drops_a_carry_finds_the_careless_habit_in_an_analysis_and_nothing_else():
    p = next(p for p in PAIRS if any(steps.blind_spot(e.x, e.op, e.y) for e in steps.steps_of(chain_of(p))))
    i, e = next((i, e) for i, e in enumerate(steps.steps_of(chain_of(p))) if steps.blind_spot(e.x, e.op, e.y))
    assert not steps.drops_a_carry(analysis(p))
    assert steps.drops_a_carry(analysis(p, slips={i: e.z - 10}))
    assert not steps.drops_a_carry(analysis(p, slips={i: e.z - 1}))  # another slip there is not the habit


def test_a_recipe_builds_its_stages_in_one_command_each_continuing_the_last(tmp_path, monkeypatch):
    from reflectrm.demo import read_card, steps_build

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
    stage_problems = [steps_build.trained_problems(c) for c in (first, last)]
    assert stage_problems[0] < stage_problems[1] and len(stage_problems[1]) > len(stage_problems[0])
