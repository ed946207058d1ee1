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


# --- what the tab shows names runs and data by name, never by the host's absolute path ---------------------------


def _run_with_model(services: AppServices, model: str) -> int:
    from reflectrm_db.evaluation import EvalStore

    run_id, _ = EvalStore(services.runtime.store).start(run_key=f"key-{model}", values={
        "model": model, "model_revision": "", "benchmark": "demo", "data": "", "partial": "",
        "config": {"strategies": ["reflectrm"]}, "items_total": 4})
    return run_id


@pytest.mark.parametrize(("model", "shown"), [
    pytest.param("{tmp}/runs/run-7/checkpoint-20", "run-7/checkpoint-20", id="checkpoint-folder"),
    # a checkpoint deleted since the run: not a folder now, still a host path (it was shown whole)
    pytest.param("{tmp}/runs/run-8/final-gone", "run-8/final-gone", id="removed-folder"),
    pytest.param("{demo}", "demo judge", id="the-demo-judge"),
    pytest.param("org/model", "org/model", id="hub-id-as-is"),  # relative, not a folder: a Hub id
])
def test_the_runs_table_and_the_report_name_the_model_not_the_hosts_path(
        services: AppServices, tmp_path, model: str, shown: str) -> None:
    from reflectrm.demo import DEMO_MODEL_DIR

    path = model.format(tmp=tmp_path, demo=DEMO_MODEL_DIR)
    if "checkpoint-20" in path:
        (tmp_path / "runs" / "run-7" / "checkpoint-20").mkdir(parents=True)
    run_id = _run_with_model(services, path)
    evals = EvaluationService(services.runtime)
    [row] = [r for r in evals.runs_table() if r[0] == run_id]
    assert row[5] == shown
    assert not any(str(cell).startswith("/") for cell in row), row
    report = evals.view(run_id).markdown
    assert f"Model: `{shown}`" in report and str(tmp_path) not in report and str(DEMO_MODEL_DIR) not in report


@pytest.mark.parametrize(("benchmark", "data", "said"), [
    # each message named the CLI's --data to a user of the tab, and the absolute path the app resolved
    pytest.param("judgebench", "", 'has no Hub copy here: pass "Local file or folder" with', id="no-hub-copy"),
    pytest.param("judgebench", "not-here", "'not-here' does not exist: pass \"Local file or folder\" with",
                 id="missing-folder"),
    pytest.param("demo", "folder", 'generated, not read: leave "Local file or folder" empty (or use the benchmark '
                 '"file")', id="demo-with-data"),
    pytest.param("rm-bench", "folder/pairs.jsonl", "'folder/pairs.jsonl' is not a rm-bench file",
                 id="another-kind-of-file"),
])
def test_data_messages_name_the_tabs_field_and_the_path_inside_the_data_folder(
        services: AppServices, benchmark: str, data: str, said: str) -> None:
    (services.runtime.data_root / "folder").mkdir(parents=True, exist_ok=True)
    (services.runtime.data_root / "folder" / "pairs.jsonl").write_text('{"query": "q", "chosen": "a", "rejected": "b"}\n')
    evals = EvaluationService(services.runtime)
    with pytest.raises(InputError) as caught:
        evals.run(evals.request(benchmark, data=data), cancel=threading.Event())
    message = str(caught.value)
    assert said in message and "--data" not in message and "--benchmark" not in message
    assert str(services.runtime.data_root) not in message
