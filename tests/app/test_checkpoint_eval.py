"""The Train tab's "evaluate this checkpoint against the active judge": two stored runs on the same pairs,
compared item by item."""

from __future__ import annotations

import threading

import pytest

from reflectrm.defaults import default_model
from reflectrm.errors import Cancelled
from reflectrm_app.services import Services


@pytest.mark.slow
def test_a_checkpoint_is_evaluated_against_the_active_judge_on_the_same_pairs(biased_services: Services) -> None:
    # the active judge always picks the first response; the "checkpoint" is the real demo judge's folder
    evals = biased_services.evaluation
    result = evals.checkpoint_against_judge(default_model(None), benchmark="demo", limit=6,
                                            cancel=threading.Event())
    judge_run, checkpoint_run = evals.evals.get(result.judge_run), evals.evals.get(result.checkpoint_run)
    assert judge_run.id != checkpoint_run.id and {judge_run.status, checkpoint_run.status} == {"completed"}
    assert judge_run.model != checkpoint_run.model and checkpoint_run.model.endswith("model")
    judge_items = {(i.item_id, i.strategy) for i in evals.evals.items(judge_run.id)}
    assert judge_items == {(i.item_id, i.strategy) for i in evals.evals.items(checkpoint_run.id)}  # same pairs
    assert {s for _, s in judge_items} == {"reflectrm", "greedy"}
    assert f"Run {checkpoint_run.id} against run {judge_run.id}" in result.markdown
    assert "| reflectrm | overall | 6 |" in result.markdown and "| greedy | overall | 6 |" in result.markdown


def test_stop_before_the_checkpoint_run_keeps_the_judge_run(biased_services: Services) -> None:
    evals = biased_services.evaluation
    cancel = threading.Event()
    loaded = []
    biased_services.runtime.model_backend = lambda model, c=None: loaded.append(model)  # type: ignore[method-assign]

    def stop_at_the_end(done: int, total: int) -> None:
        if done == total:
            cancel.set()

    with pytest.raises(Cancelled):
        evals.checkpoint_against_judge("/no/checkpoint", benchmark="demo", limit=2, cancel=cancel,
                                       progress=stop_at_the_end)
    assert loaded == []  # the checkpoint was never loaded
    [kept] = evals.evals.runs()  # Stop pressed as its last pair finished: all kept, marked stopped, resumable
    assert (kept.status, kept.items_done, kept.items_total) == ("stopped", 2, 2)
