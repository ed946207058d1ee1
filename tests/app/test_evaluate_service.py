"""The Evaluate tab's services: the pair count it accepts, progress from the start, runs that survive a restart."""

from __future__ import annotations

import re
import threading

import pytest

from reflectrm_app.services.evaluation import EvaluationService
from reflectrm_app.services import Services
from reflectrm.errors import InputError


@pytest.mark.parametrize("limit", [
    pytest.param(0, id="zero"),  # used to mean "no limit" and silently ran every pair
    pytest.param(2.5, id="fraction"),  # used to become 2
    pytest.param(-3, id="negative"),
])
def test_a_pair_count_that_is_not_a_whole_number_of_at_least_one_is_refused(services: Services,
                                                                           limit: float) -> None:
    with pytest.raises(InputError, match=r'"Pairs at most" must be a whole number of at least 1.*empty for every'):
        services.evaluation.request("demo", limit=limit)


@pytest.mark.parametrize(("limit", "expected"), [pytest.param(None, None, id="empty-is-all"),
                                                 pytest.param(3.0, 3, id="whole-float")])
def test_an_empty_or_whole_pair_count_is_taken(services: Services, limit: float | None,
                                               expected: int | None) -> None:
    assert services.evaluation.request("demo", limit=limit).limit == expected


def test_the_file_benchmark_without_a_path_names_the_field_not_a_cli_flag(services: Services) -> None:
    with pytest.raises(InputError, match='Local file or folder') as caught:
        services.evaluation.request("file")
    assert "--data" not in str(caught.value)


def test_progress_shows_before_the_first_batch_is_judged(services: Services) -> None:
    evals, seen = services.evaluation, []
    backend = services.runtime.model.get()
    evals.run(evals.request("demo", limit=4), cancel=threading.Event(),
              progress=lambda done, total: seen.append((done, total, len(backend.calls))))
    assert seen[0] == (0, 4, 0)  # before any generation (it used to appear only after the first batch)
    assert seen[-1][:2] == (4, 4)


def _cut_off_run(services: Services, monkeypatch: pytest.MonkeyPatch) -> int:
    """A run whose process ended after its first batch, without marking it (as a killed app leaves it)."""
    evals = services.evaluation
    monkeypatch.setattr(evals.evals.kept, "finish", lambda *a, **k: None)

    def die_after_the_first_batch(done: int, total: int) -> None:
        if done:
            raise SystemExit("killed")

    with pytest.raises(SystemExit):
        evals.run(evals.request("demo", limit=4), cancel=threading.Event(), progress=die_after_the_first_batch)
    [run] = evals.evals.runs()
    assert run.status == "running" and 0 < run.items_done < 4
    return run.id


def test_after_a_restart_a_run_left_running_is_interrupted_unfinished_and_resumes(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = _cut_off_run(services, monkeypatch)
    restarted = EvaluationService(services.runtime)  # the app's start-up
    assert restarted.mark_interrupted() == [run_id]
    run = restarted.evals.get(run_id)
    assert run.status == "interrupted" and "Resume" in run.error
    shown = restarted.view(run_id).markdown
    assert shown.splitlines()[2].startswith(  # at the report's top, before any figure: not shown as finished
        f"**Incomplete: interrupted (its process ended while it ran), {run.items_done} of 4")
    resumed = restarted.resume(run_id, cancel=threading.Event())
    assert (resumed.id, resumed.status, resumed.items_done) == (run_id, "completed", 4)
    assert "Unfinished" not in restarted.view(run_id).markdown
    with pytest.raises(InputError, match="is completed: only a stopped, failed or interrupted run resumes"):
        restarted.resume(run_id, cancel=threading.Event())


@pytest.mark.parametrize(("typed", "fragment"), [
    pytest.param("", '"Run" is empty: click a run', id="empty"),  # used to be int(None): a TypeError's text
    pytest.param("2.5", "must be a run number like 3", id="fraction"),
    pytest.param("0", "must be a run number like 3", id="zero"),
])
def test_a_run_field_that_holds_no_run_number_names_the_field(typed: str, fragment: str) -> None:
    from reflectrm_app.ui.forms import run_number

    with pytest.raises(InputError, match=re.escape(fragment)):
        run_number(typed, "Run")


def test_a_run_that_does_not_exist_is_said_in_the_tabs_words(services: Services) -> None:
    evals = services.evaluation
    for action in (lambda: evals.view(42), lambda: evals.compare(42, 43),
                   lambda: evals.resume(42, cancel=threading.Event())):
        with pytest.raises(InputError, match="run 42 does not exist: click a run in Runs") as caught:
            action()
        assert "--list" not in str(caught.value)  # it named `reflectrm eval --list`


@pytest.mark.parametrize("benchmark, both", [("judgebench", True), ("demo", False), ("file", False), (None, False)])
def test_the_both_orders_box_follows_the_benchmark_s_protocol(benchmark, both) -> None:
    from reflectrm_app.services.evaluation import both_orders_by_default

    assert both_orders_by_default(benchmark) is both  # JudgeBench scores a pair right only if right in both orders
