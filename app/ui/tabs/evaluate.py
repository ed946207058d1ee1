"""The Evaluate tab: run a benchmark or a data set with the active judge (progress, Stop), see a run's
figures with the paper's beside them, compare two runs with the paired test, open wrong or flipped
items in the Judge view.

    with gr.Tab("Evaluate"):
        evaluate.build(services, open_in_judge=hook)   # hook(button, judgment_id_box) wires the Judge view

`TAB` puts it in the workbench (`reflectrm_app.ui.TABS`), its drill-down wired into the Judge tab.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr

from reflectrm_app.evaluation import ITEM_COLUMNS, RUN_COLUMNS, EvaluationService, both_orders_by_default
from reflectrm_app.ui.tabs import judge as judge_tab
from reflectrm_app.ui.tabs.common import TabSpec, Workbench, failure_text, judgment_number, unchanged
from reflectrm.errors import InputError, ReflectRMError
from reflectrm.eval.runner import DEFAULT_STRATEGIES

OpenHook = Callable[[gr.Button, gr.Textbox, gr.Textbox], None]
RUN_KEY = "app:evaluate"  # runs belong to the app, not to a browser session: any session's Stop stops them


def build(services: Any, *, open_in_judge: OpenHook | None = None, tab: Any = None) -> None:
    """Lay out the tab and wire its events (called inside `with gr.Tab(...)`)."""
    evals = EvaluationService(services)
    interrupted = evals.mark_interrupted()  # built once, as the app starts: what a restart cut off says so
    with gr.Row():
        benchmark = gr.Dropdown(evals.choices(), value="demo", label="Benchmark or data set", allow_custom_value=False,
                                elem_id="eval-benchmark")
        data = gr.Textbox(label="Local file or folder (in the app's data folder)", placeholder="e.g. judgebench",
                          elem_id="eval-data")
        subset = gr.Textbox(label="Subset", elem_id="eval-subset")
        limit = gr.Number(20, label="Pairs at most (empty: every pair)", elem_id="eval-limit")
    with gr.Row():
        strategies = gr.CheckboxGroup(list(DEFAULT_STRATEGIES), value=["reflectrm"], label="Strategies",
                                      elem_id="eval-strategies")
        both = gr.Checkbox(False, label="Both orders", elem_id="eval-both")
        run_btn = gr.Button("Run evaluation", variant="primary", elem_id="eval-run")
        stop_btn = gr.Button("Stop", elem_id="eval-stop")
    status = gr.Textbox(_interrupted_text(interrupted), label="Status", interactive=False, elem_id="eval-status")
    runs = gr.Dataframe(evals.runs_table(), headers=list(RUN_COLUMNS), label="Runs", interactive=False,
                        elem_id="eval-runs")
    with gr.Row():
        refresh_btn = gr.Button("Refresh runs", elem_id="eval-refresh")
        # Textboxes, not gr.Number: an empty Number shows 0, which reads as a run or judgment that does not exist
        run_id = gr.Textbox(label="Run", placeholder="click a run above", elem_id="eval-run-id")
        show_btn = gr.Button("Show report", elem_id="eval-show")
        resume_btn = gr.Button("Resume run", elem_id="eval-resume")
        run_a = gr.Textbox(label="Compare run A", elem_id="eval-run-a")
        run_b = gr.Textbox(label="with run B", elem_id="eval-run-b")
        compare_btn = gr.Button("Compare", elem_id="eval-compare")
    report = gr.Markdown(elem_id="eval-report")
    plot = gr.HTML(elem_id="eval-plot")
    comparison = gr.Markdown(elem_id="eval-comparison")
    items = gr.Dataframe(headers=list(ITEM_COLUMNS), label="Wrong, abstained or flipped items", interactive=False,
                         elem_id="eval-items")
    with gr.Row():
        judgment_id = gr.Textbox(label="Judgment #", placeholder="click an item above", elem_id="eval-judgment-id")
        open_btn = gr.Button("Open in Judge view", elem_id="eval-open")
        open_status = gr.Textbox(label="Status", interactive=False, elem_id="eval-open-status", scale=3)

    # JudgeBench's protocol judges both orders: picking it ticks the box (the user may untick it)
    benchmark.change(lambda name: gr.update(value=both_orders_by_default(name)), benchmark, both,
                     show_progress="hidden", api_visibility="private")

    def launch(name, path, sub, lim, strats, orders, progress=gr.Progress()):  # noqa: B008
        return execute(lambda cancel, report: evals.run(
            evals.request(name, data=path or "", subset=sub or "", limit=lim, strategies=strats,
                          both_orders=bool(orders)), cancel=cancel, progress=report), progress)

    def resume(rid, progress=gr.Progress()):  # noqa: B008
        try:
            number = run_number(rid, "Run")
        except ReflectRMError as exc:
            return f"error: {exc}", evals.runs_table(), gr.update(), "", "", gr.update()
        return execute(lambda cancel, report: evals.resume(number, cancel=cancel, progress=report), progress)

    def execute(work, progress):
        if services.cancels.running(RUN_KEY):
            return ("an evaluation is already running: wait for it, or Stop it (from any browser)",
                    evals.runs_table(), gr.update(), "", "", gr.update())
        cancel = services.cancels.start(RUN_KEY)
        try:
            progress(0, desc="loading the pairs")
            run = work(cancel, lambda done, total: progress(done / max(1, total), desc=f"{done}/{total} pairs"))
        except ReflectRMError as exc:
            return (failure_text(exc, stopped="stopped: the pairs judged so far are kept; Resume goes on"),
                    evals.runs_table(), gr.update(), "", "", gr.update())
        finally:
            services.cancels.finish(RUN_KEY, cancel)
        view = evals.view(run.id)
        return (f"run {run.id} {run.status}: {run.items_done}/{run.items_total} pair-orders judged",
                evals.runs_table(), run.id, view.markdown, view.plot_svg, evals.items_to_check(run.id))

    def stop():
        return "stopping after the current generation" if services.cancels.cancel(RUN_KEY) else "nothing is running"

    def show(rid):
        try:
            number = run_number(rid, "Run")
            view = evals.view(number)
            return view.markdown, view.plot_svg, evals.items_to_check(number), ""
        except ReflectRMError as exc:
            return "", "", [], f"error: {exc}"

    def compare(a, b):
        try:
            return evals.compare(run_number(a, "Compare run A"), run_number(b, "with run B"))
        except ReflectRMError as exc:
            return f"error: {exc}"

    def first_cell(evt: gr.SelectData):
        return str(evt.row_value[0]) if evt.row_value else ""

    run_outputs = [status, runs, run_id, report, plot, items]  # the items with the report: no Show report needed
    run_btn.click(launch, [benchmark, data, subset, limit, strategies, both], run_outputs, api_visibility="private",
                  show_progress_on=status)
    resume_btn.click(resume, run_id, run_outputs, api_visibility="private", show_progress_on=status)
    stop_btn.click(stop, None, status, api_visibility="private")
    refresh_btn.click(evals.runs_table, None, runs, api_visibility="private")
    show_btn.click(show, run_id, [report, plot, items, status], api_visibility="private")
    compare_btn.click(compare, [run_a, run_b], comparison, api_visibility="private")
    items.select(first_cell, None, judgment_id, api_visibility="private")
    runs.select(first_cell, None, run_id, api_visibility="private")
    if open_in_judge is not None:
        open_in_judge(open_btn, judgment_id, open_status)
    benchmark.focus(lambda: gr.update(choices=evals.choices()), None, benchmark, api_visibility="private")
    if tab is not None:  # the table as built is the runs as the app started: read them whenever the tab is opened
        tab.select(evals.runs_table, None, runs, api_visibility="private", show_progress="hidden")


def _open_in_judge(wb: Workbench, button: gr.Button, judgment_id: gr.Textbox, status: gr.Textbox) -> None:
    """The drill-down: `button` opens judgment `judgment_id` in the Judge tab, as recorded; a failure is said
    in `status`, beside the button (not on the Judge tab, where nobody is looking)."""
    judge = wb.views["judge"]
    outs = [*judge.outputs, *judge.form, judge.base, wb.tabs, status]

    def open_it(typed: Any) -> Any:
        try:
            number = judgment_number(typed)
            if number is None:
                raise InputError("no item is chosen: click a row of the wrong or flipped items first")
            return [*judge_tab.opened_outputs(wb.services, number), gr.Tabs(selected="judge"), ""]
        except ReflectRMError as exc:
            return {**unchanged(outs), status: f"error: {exc}"}

    button.click(open_it, judgment_id, outs, api_visibility="private")


def run_number(value: Any, field: str) -> int:
    """A run id typed or clicked into a form field (named in the error when it is empty or not a number)."""
    text = "" if value is None else str(value).strip()
    if not text:
        raise InputError(f'"{field}" is empty: click a run in Runs (or type its number)')
    if not text.isdigit() or int(text) < 1:
        raise InputError(f'"{field}" must be a run number like 3, got {text!r}')
    return int(text)


def _interrupted_text(run_ids: list[int]) -> str:
    if not run_ids:
        return ""
    names = ", ".join(str(r) for r in run_ids)
    return (f"run(s) {names} interrupted: the app stopped while they ran. Pick one in Runs and press Resume run "
            "to go on from the pairs already judged")


TAB = TabSpec(label="Evaluate", id="evaluate",
              build=lambda wb, tab: build(wb.services, open_in_judge=lambda b, j, s: _open_in_judge(wb, b, j, s),
                                          tab=tab))
