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

from reflectrm_app.services.evaluation import ITEM_COLUMNS, RUN_COLUMNS, both_orders_by_default
from reflectrm_app.ui.tabs import judge as judge_tab
from reflectrm_app.ui.forms import judgment_number, run_number
from reflectrm_app.ui.tabs.common import TabSpec, Workbench, failure_text, unchanged
from reflectrm.errors import InputError, ReflectRMError
from reflectrm.eval.runner import DEFAULT_STRATEGIES

OpenHook = Callable[[gr.Button, gr.Textbox, gr.Textbox], None]
RUN_KEY = "app:evaluate"  # runs belong to the app, not to a browser session: any session's Stop stops them


def build(services: Any, *, open_in_judge: OpenHook | None = None, tab: Any = None) -> None:
    """Lay out the tab and wire its events (called inside `with gr.Tab(...)`)."""
    evals = services.evaluation
    interrupted = evals.mark_interrupted()  # built once, as the app starts: what a restart cut off says so
    c = _layout(evals, _interrupted_text(interrupted))
    _wire_running(evals, services.runtime.cancels, c)
    _wire_reports(evals, c, tab)
    if open_in_judge is not None:
        open_in_judge(c["open"], c["judgment_id"], c["open_status"])


def _layout(evals: Any, status_text: str) -> dict[str, Any]:
    c: dict[str, Any] = {}
    with gr.Row():
        c["benchmark"] = gr.Dropdown(evals.choices(), value="demo", label="Benchmark or data set",
                                     allow_custom_value=False, elem_id="eval-benchmark")
        c["data"] = gr.Textbox(label="Local file or folder (in the app's data folder)", placeholder="e.g. judgebench",
                               elem_id="eval-data")
        c["subset"] = gr.Textbox(label="Subset", elem_id="eval-subset")
        c["limit"] = gr.Number(20, label="Pairs at most (empty: every pair)", elem_id="eval-limit")
    with gr.Row():
        c["strategies"] = gr.CheckboxGroup(list(DEFAULT_STRATEGIES), value=["reflectrm"], label="Strategies",
                                           elem_id="eval-strategies")
        c["both"] = gr.Checkbox(False, label="Both orders", elem_id="eval-both")
        c["run"] = gr.Button("Run evaluation", variant="primary", elem_id="eval-run")
        c["stop"] = gr.Button("Stop", elem_id="eval-stop")
    c["status"] = gr.Textbox(status_text, label="Status", interactive=False, elem_id="eval-status")
    c["runs"] = gr.Dataframe(evals.runs_table(), headers=list(RUN_COLUMNS), label="Runs", interactive=False,
                             elem_id="eval-runs")
    with gr.Row():
        c["refresh"] = gr.Button("Refresh runs", elem_id="eval-refresh")
        # Textboxes, not gr.Number: an empty Number shows 0, which reads as a run or judgment that does not exist
        c["run_id"] = gr.Textbox(label="Run", placeholder="click a run above", elem_id="eval-run-id")
        c["show"] = gr.Button("Show report", elem_id="eval-show")
        c["resume"] = gr.Button("Resume run", elem_id="eval-resume")
        c["run_a"] = gr.Textbox(label="Compare run A", elem_id="eval-run-a")
        c["run_b"] = gr.Textbox(label="with run B", elem_id="eval-run-b")
        c["compare"] = gr.Button("Compare", elem_id="eval-compare")
    c["report"] = gr.Markdown(elem_id="eval-report")
    c["plot"] = gr.HTML(elem_id="eval-plot")
    c["comparison"] = gr.Markdown(elem_id="eval-comparison")
    c["items"] = gr.Dataframe(headers=list(ITEM_COLUMNS), label="Wrong, abstained or flipped items", interactive=False,
                              elem_id="eval-items")
    with gr.Row():
        c["judgment_id"] = gr.Textbox(label="Judgment #", placeholder="click an item above", elem_id="eval-judgment-id")
        c["open"] = gr.Button("Open in Judge view", elem_id="eval-open")
        c["open_status"] = gr.Textbox(label="Status", interactive=False, elem_id="eval-open-status", scale=3)
    return c


def _wire_running(evals: Any, cancels: Any, c: dict[str, Any]) -> None:
    """Run, Resume and Stop: one evaluation at a time for the whole app; its report and items shown when done."""

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
        if cancels.running(RUN_KEY):
            return ("an evaluation is already running: wait for it, or Stop it (from any browser)",
                    evals.runs_table(), gr.update(), "", "", gr.update())
        cancel = cancels.start(RUN_KEY)
        try:
            progress(0, desc="loading the pairs")
            run = work(cancel, lambda done, total: progress(done / max(1, total), desc=f"{done}/{total} pairs"))
        except ReflectRMError as exc:
            return (failure_text(exc, stopped="stopped: the pairs judged so far are kept; Resume goes on"),
                    evals.runs_table(), gr.update(), "", "", gr.update())
        finally:
            cancels.finish(RUN_KEY, cancel)
        view = evals.view(run.id)
        return (f"run {run.id} {run.status}: {run.items_done}/{run.items_total} pair-orders judged",
                evals.runs_table(), run.id, view.markdown, view.plot_svg, evals.items_to_check(run.id))

    def stop():
        return "stopping after the current generation" if cancels.cancel(RUN_KEY) else "nothing is running"

    # JudgeBench's protocol judges both orders: picking it ticks the box (the user may untick it)
    c["benchmark"].change(lambda name: gr.update(value=both_orders_by_default(name)), c["benchmark"], c["both"],
                          show_progress="hidden", api_visibility="private")
    # the items with the report: no Show report needed
    run_outputs = [c[k] for k in ("status", "runs", "run_id", "report", "plot", "items")]
    form = [c[k] for k in ("benchmark", "data", "subset", "limit", "strategies", "both")]
    c["run"].click(launch, form, run_outputs, api_visibility="private", show_progress_on=c["status"])
    c["resume"].click(resume, c["run_id"], run_outputs, api_visibility="private", show_progress_on=c["status"])
    c["stop"].click(stop, None, c["status"], api_visibility="private")


def _wire_reports(evals: Any, c: dict[str, Any], tab: Any) -> None:
    """The runs table, a run's report and items, a comparison of two runs."""

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

    c["refresh"].click(evals.runs_table, None, c["runs"], api_visibility="private")
    c["show"].click(show, c["run_id"], [c["report"], c["plot"], c["items"], c["status"]], api_visibility="private")
    c["compare"].click(compare, [c["run_a"], c["run_b"]], c["comparison"], api_visibility="private")
    c["items"].select(first_cell, None, c["judgment_id"], api_visibility="private")
    c["runs"].select(first_cell, None, c["run_id"], api_visibility="private")
    c["benchmark"].focus(lambda: gr.update(choices=evals.choices()), None, c["benchmark"], api_visibility="private")
    if tab is not None:  # the table as built is the runs as the app started: read them whenever the tab is opened
        tab.select(evals.runs_table, None, c["runs"], api_visibility="private", show_progress="hidden")


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


def _interrupted_text(run_ids: list[int]) -> str:
    if not run_ids:
        return ""
    names = ", ".join(str(r) for r in run_ids)
    return (f"run(s) {names} interrupted: the app stopped while they ran. Pick one in Runs and press Resume run "
            "to go on from the pairs already judged")


TAB = TabSpec(label="Evaluate", id="evaluate",
              build=lambda wb, tab: build(wb.services, open_in_judge=lambda b, j, s: _open_in_judge(wb, b, j, s),
                                          tab=tab))
