"""The promotion gate behind the Train tab's "Use as judge": a checkpoint significantly worse than the active judge
on the same held-out pairs is refused unless a named reviewer overrides, and every promotion is recorded.

Real SQLite stores holding real evaluation runs (scripted judges: always right, always wrong), and the repo's
real demo judge as the checkpoint that is made the judge."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from reflectrm.backends.scripted import ScriptedBackend
from reflectrm.core.config import JudgeConfig
from reflectrm.demo import DEMO_MODEL_DIR
from reflectrm.errors import InputError
from reflectrm.eval.runner import EvalPlan
from reflectrm_app.services.evaluation import EvalRequest, NeedsOverride
from tests.app.conftest import make_services
from tests.conftest import critique_output, response_output

CONFIG = JudgeConfig(n=4, matched_compute_n=6, max_new_tokens=8, reflection_max_new_tokens=8)
CHECKPOINT = str(DEMO_MODEL_DIR)  # a real model folder: promoting it really loads it


def _picks(word: str) -> Callable[[str, int, object], str]:
    """A judge that picks the response holding `word` (GOOD: always right; BAD: always wrong)."""
    other = "BAD" if word == "GOOD" else "GOOD"

    def respond(text: str, seed: int, params: object) -> str:
        if "Critique 1" in text:
            return critique_output(1)
        return response_output(1 if text.find(word) < text.find(other) else 2)
    return respond


RIGHT, WRONG = _picks("GOOD"), _picks("BAD")


def _request(root: Path) -> EvalRequest:
    rows = []
    for k in range(8):
        good, bad, first = f"GOOD answer {k}", f"BAD answer {k}", k % 2 == 0
        rows.append({"id": f"p{k}", "query": f"question {k}", "response_1": good if first else bad,
                     "response_2": bad if first else good, "label": 1 if first else 2})
    data = root / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return EvalRequest(benchmark="file", data=data, plan=EvalPlan(strategies=("greedy",), both_orders=True,
                                                                  batch_size=4))


# judge's and checkpoint's scripted judges (None: no runs), how the checkpoint run ends, the override and name;
# then what happens: the error class and words, or the recorded verdict, overridden, who and a line of the gate's
CASES = [
    pytest.param(RIGHT, WRONG, False, False, "ana", NeedsOverride,
                 "significantly worse than the active judge on greedy / overall, greedy / both orders",
                 id="worse-refused"),
    pytest.param(RIGHT, WRONG, False, True, " ana  b ", None,
                 ("worse", True, "ana b", "gate: worse on greedy / overall"), id="worse-overridden-and-recorded"),
    pytest.param(WRONG, RIGHT, False, False, "", None, ("better", False, "unnamed", "greedy / overall: better"),
                 id="better-promoted"),
    pytest.param(RIGHT, RIGHT, False, False, "bo", None, ("no difference", False, "bo", "gate: no difference"),
                 id="no-difference-promoted"),
    pytest.param(None, None, False, False, "bo", None, ("not gated", False, "bo", "never evaluated against the active"),
                 id="never-evaluated-promoted-and-noted"),
    pytest.param(RIGHT, WRONG, False, True, "   ", InputError, "an override needs the reviewer's name",
                 id="empty-override-name-refused"),
    pytest.param(RIGHT, WRONG, True, False, "ana", InputError,
                 "the comparison with the active judge did not finish (run 2 (stopped))",
                 id="unfinished-comparison-refused"),
]


@pytest.mark.parametrize(("judge", "checkpoint", "stop", "override", "by", "error", "expected"), CASES)
def test_the_promotion_gate(tmp_path: Path, judge, checkpoint, stop, override, by, error, expected) -> None:
    services = make_services(f"sqlite:///{tmp_path / 'app.db'}", ScriptedBackend(RIGHT, model_id="judge"))
    try:
        evals = services.evaluation.evals
        if judge is not None:
            request = _request(tmp_path)
            evals.run(request, backend=ScriptedBackend(judge, model_id="judge"), config=CONFIG)
            evals.run(request, backend=ScriptedBackend(checkpoint, model_id=CHECKPOINT), config=CONFIG,
                      should_stop=lambda: stop)
        if error is not None:
            with pytest.raises(error) as caught:
                services.evaluation.promote(CHECKPOINT, by=by, override=override)
            said = str(caught.value)
            assert expected in said and "\n" not in said
            assert services.runtime.store.promotions() == []  # nothing recorded
            assert services.runtime.model.name != CHECKPOINT  # and the judge unchanged
            return
        promoted = services.evaluation.promote(CHECKPOINT, by=by, override=override)
        verdict, overridden, who, line = expected
        [record] = services.runtime.store.promotions()
        assert record == promoted.record
        assert (record.verdict, record.overridden, record.promoted_by, record.model) == (verdict, overridden, who,
                                                                                           CHECKPOINT)
        assert record.previous == "judge" and services.runtime.model.name == CHECKPOINT
        assert any(line in x for x in record.lines), record.lines
        assert (record.judge_run_id, record.checkpoint_run_id) == ((None, None) if judge is None else (1, 2))
        [row] = services.evaluation.promotions_table()
        assert row[1:] == [who, "demo judge", "judge", verdict, overridden]
    finally:
        services.close()


def test_the_latest_comparison_decides(tmp_path: Path) -> None:
    """An old comparison that found the checkpoint worse does not block it once a newer one finds no difference."""
    services = make_services(f"sqlite:///{tmp_path / 'app.db'}", ScriptedBackend(RIGHT, model_id="judge"))
    try:
        evals = services.evaluation.evals
        old = _request(tmp_path)
        evals.run(old, backend=ScriptedBackend(RIGHT, model_id="judge"), config=CONFIG)
        evals.run(old, backend=ScriptedBackend(WRONG, model_id=CHECKPOINT), config=CONFIG)
        new = EvalRequest(benchmark=old.benchmark, data=old.data, plan=old.plan, limit=6, seed=1)
        evals.run(new, backend=ScriptedBackend(RIGHT, model_id="judge"), config=CONFIG)
        evals.run(new, backend=ScriptedBackend(RIGHT, model_id=CHECKPOINT), config=CONFIG)
        promoted = services.evaluation.promote(CHECKPOINT, by="ana")
        assert (promoted.record.verdict, promoted.record.judge_run_id, promoted.record.checkpoint_run_id) == \
            ("no difference", 3, 4)
    finally:
        services.close()
