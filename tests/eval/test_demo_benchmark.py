"""The `demo` benchmark holds out pairs of the shipped judge's own domain (its card's), never problems it trained on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import reflectrm.demo
import reflectrm.demo.heldout
from reflectrm.demo import steps, tasks
from reflectrm.demo.heldout import EVAL_SEED
from reflectrm.errors import InputError
from reflectrm.eval.benchmarks import DEMO_HELDOUT_PAIRS, load_demo


def ship(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, card: dict) -> Path:
    """Make a folder with `card` the shipped demo judge for this test."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "demo_card.json").write_text(json.dumps(card))
    monkeypatch.setattr(reflectrm.demo, "DEMO_MODEL_DIR", folder)
    return folder


def test_an_arithmetic_judge_keeps_todays_held_out_stream(tmp_path, monkeypatch):
    ship(tmp_path, monkeypatch, {"what": "no domain key: arithmetic"})
    bench = load_demo(None)
    assert list(bench.pairs) == tasks.make_pairs(DEMO_HELDOUT_PAIRS, seed=EVAL_SEED, source="demo-heldout")
    assert bench.source == f"demo arithmetic seed {EVAL_SEED}"


def test_a_running_sum_judge_holds_out_its_domain_minus_the_problems_it_trained_on(tmp_path, monkeypatch):
    card = {"domain": "reflectrm.demo.steps", "build_args": {"pairs": 100, "seed": 1}}  # an older card's module name
    ship(tmp_path, monkeypatch, card)
    stream = steps.make_pairs(40, seed=EVAL_SEED, source="demo-heldout")
    trained = {steps.problem_of(p) for p in stream[::3]}  # a third of the stream's first problems were trained on
    seen_cards = []
    monkeypatch.setattr(reflectrm.demo.heldout, "trained_problems", lambda c: seen_cards.append(c) or trained)
    bench = load_demo(None)
    assert seen_cards == [card]  # the shipped card says what its build trained on
    assert len(bench.pairs) == DEMO_HELDOUT_PAIRS and bench.source == f"demo running-sums seed {EVAL_SEED}"
    assert not {steps.problem_of(p) for p in bench.pairs} & trained
    assert list(bench.pairs[:10]) == [p for p in stream if steps.problem_of(p) not in trained][:10]  # stream order


def test_a_running_sum_judge_with_a_real_small_build_card(tmp_path, monkeypatch):
    ship(tmp_path, monkeypatch, {"domain": "running-sums", "build_args": {"pairs": 300, "seed": 1234}})
    trained = reflectrm.demo.heldout.trained_problems({"build_args": {"pairs": 300, "seed": 1234}})
    bench = load_demo(None)
    assert len(bench.pairs) == DEMO_HELDOUT_PAIRS and not {steps.problem_of(p) for p in bench.pairs} & trained


def test_the_demo_benchmark_is_not_read_from_a_file(tmp_path):
    with pytest.raises(InputError, match="drop --data"):
        load_demo(tmp_path)
