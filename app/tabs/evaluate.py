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

from reflectrm_app.evaluation import ITEM_COLUMNS, RUN_COLUMNS, EvaluationService
from reflectrm_app.tabs import judge as judge_tab
from reflectrm_app.tabs.common import TabSpec, Workbench, failure_text, judgment_number, unchanged
from reflectrm.errors import InputError, ReflectRMError
from reflectrm.eval.runner import DEFAULT_STRATEGIES

OpenHook = Callable[[gr.Button, gr.Number], None]


def _session(request: gr.Request | None) -> str:
    return getattr(request, "session_hash", None) or "anonymous"


def build(services: Any, *, open_in_judge: OpenHook | None = None) -> None:
    """Lay out the tab and wire its events (called inside `with gr.Tab(...)`)."""
    evals = EvaluationService(services)
    with gr.Row():
        benchmark = gr.Dropdown(evals.choices(), value="demo", label="Benchmark or data set", allow_custom_value=False,
                                elem_id="eval-benchmark")
        data = gr.Textbox(label="Local file or folder (--data)", placeholder="e.g. /data/judgebench",
                          elem_id="eval-data")
        subset = gr.Textbox(label="Subset", elem_id="eval-subset")
        limit = gr.Number(20, label="Pairs at most", precision=0, elem_id="eval-limit")
    with gr.Row():
        strategies = gr.CheckboxGroup(list(DEFAULT_STRATEGIES), value=["reflectrm"], label="Strategies",
                                      elem_id="eval-strategies")
        both = gr.Checkbox(False, label="Both orders", elem_id="eval-both")
        run_btn = gr.Button("Run evaluation", variant="primary", elem_id="eval-run")
        stop_btn = gr.Button("Stop", elem_id="eval-stop")
    status = gr.Textbox(label="Status", interactive=False, elem_id="eval-status")
    runs = gr.Dataframe(evals.runs_table(), headers=list(RUN_COLUMNS), label="Runs", interactive=False,
                        elem_id="eval-runs")
    with gr.Row():
        refresh_btn = gr.Button("Refresh runs", elem_id="eval-refresh")
        run_id = gr.Number(None, label="Run", precision=0, elem_id="eval-run-id")
        show_btn = gr.Button("Show report", elem_id="eval-show")
        run_a = gr.Number(None, label="Compare run A", precision=0, elem_id="eval-run-a")
        run_b = gr.Number(None, label="with run B", precision=0, elem_id="eval-run-b")
        compare_btn = gr.Button("Compare", elem_id="eval-compare")
    report = gr.Markdown(elem_id="eval-report")
    plot = gr.HTML(elem_id="eval-plot")
    comparison = gr.Markdown(elem_id="eval-comparison")
    items = gr.Dataframe(headers=list(ITEM_COLUMNS), label="Wrong, abstained or flipped items", interactive=False,
                         elem_id="eval-items")
    with gr.Row():
        judgment_id = gr.Number(None, label="Judgment #", precision=0, elem_id="eval-judgment-id")
        open_btn = gr.Button("Open in Judge view", elem_id="eval-open")

    def launch(name, path, sub, lim, strats, orders, request: gr.Request, progress=gr.Progress()):  # noqa: B008
        key = f"{_session(request)}:evaluate"
        cancel = services.cancels.start(key)
        try:
            req = evals.request(name, data=path or "", subset=sub or "", limit=lim, strategies=strats,
                                both_orders=bool(orders))
            run = evals.run(req, cancel=cancel,
                            progress=lambda done, total: progress(done / max(1, total), desc=f"{done}/{total} pairs"))
        except ReflectRMError as exc:
            return (failure_text(exc, stopped="stopped: the pairs judged so far are kept; run again to resume"),
                    evals.runs_table(), gr.update(), "", "")
        finally:
            services.cancels.finish(key, cancel)
        view = evals.view(run.id)
        return (f"run {run.id} {run.status}: {run.items_done}/{run.items_total} pair-orders judged",
                evals.runs_table(), run.id, view.markdown, view.plot_svg)

    def stop(request: gr.Request):
        return "stopping after the current generation" if services.cancels.cancel(f"{_session(request)}:evaluate") \
            else "nothing is running"

    def show(rid):
        try:
            view = evals.view(int(rid))
            return view.markdown, view.plot_svg, evals.items_to_check(int(rid)), ""
        except (ReflectRMError, TypeError, ValueError) as exc:
            return "", "", [], f"error: {exc}"

    def compare(a, b):
        try:
            return evals.compare(int(a), int(b))
        except (ReflectRMError, TypeError, ValueError) as exc:
            return f"error: {exc}"

    def first_cell(evt: gr.SelectData):
        return evt.row_value[0] if evt.row_value else None

    run_btn.click(launch, [benchmark, data, subset, limit, strategies, both], [status, runs, run_id, report, plot],
                  api_visibility="private")
    stop_btn.click(stop, None, status, api_visibility="private")
    refresh_btn.click(evals.runs_table, None, runs, api_visibility="private")
    show_btn.click(show, run_id, [report, plot, items, status], api_visibility="private")
    compare_btn.click(compare, [run_a, run_b], comparison, api_visibility="private")
    items.select(first_cell, None, judgment_id, api_visibility="private")
    runs.select(first_cell, None, run_id, api_visibility="private")
    if open_in_judge is not None:
        open_in_judge(open_btn, judgment_id)
    benchmark.focus(lambda: gr.update(choices=evals.choices()), None, benchmark, api_visibility="private")


def _open_in_judge(wb: Workbench, button: gr.Button, judgment_id: gr.Number) -> None:
    """The drill-down: `button` opens judgment `judgment_id` in the Judge tab, as recorded."""
    judge = wb.views["judge"]
    outs = [*judge.outputs, *judge.form, judge.base, wb.tabs]

    def open_it(typed: Any) -> Any:
        try:
            number = judgment_number(typed)
            if number is None:
                raise InputError("pick an item with a judgment first")
            return [*judge_tab.opened_outputs(wb.services, number), gr.Tabs(selected="judge")]
        except ReflectRMError as exc:
            return {**unchanged(outs), judge.outputs[0]: f"error: {exc}"}

    button.click(open_it, judgment_id, outs, api_visibility="private")


TAB = TabSpec(label="Evaluate", id="evaluate",
              build=lambda wb, tab: build(wb.services, open_in_judge=lambda b, j: _open_in_judge(wb, b, j)))
