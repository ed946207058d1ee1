"""The retraining benchmark's split: held-in pairs reword the held-out problems, never a held-out
conversation; "unseen" pairs ask problems that no held-in or held-out pair asks."""

import importlib.util
from pathlib import Path

from reflectrm.demo.tasks import problem_of
from reflectrm.training.data import context_key

BENCH = Path(__file__).resolve().parents[2] / "bench" / "retrain.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_retrain", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_held_in_rewords_held_out_problems_and_unseen_problems_are_untouched():
    held_out, held_in, unseen = load_bench().splits(60, 40)
    assert len(held_out) == 60 and len(unseen) == 40
    problems = {problem_of(p) for p in held_out}
    assert {problem_of(p) for p in held_in} == problems
    assert not {context_key(p) for p in held_in} & {context_key(p) for p in held_out}
    assert not {problem_of(p) for p in unseen} & problems
    assert len(held_in) >= 2 * len(problems)  # each problem in (at least two of) its other three wordings
