"""The Audit tab: both orders of one pair side by side, batch audits of a data set, and two models' position bias
before and after retraining."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from reflectrm_app.ui import views
from reflectrm_app.ui.forms import build_pair, whole
from reflectrm_app.ui.tabs import judge as judge_tab
from reflectrm_app.ui.tabs.common import (
    LABELS,
    TabSpec,
    Workbench,
    audit_text,
    failure_text,
    progress_reporter,
    run_cancellable,
    session_key,
    source_choices,
    unchanged,
)
from reflectrm.errors import ReflectRMError


@dataclass
class AuditView:
    banner: Any
    ids: Any
    left: Any
    right: Any
    source: Any
    flipped: Any


def build(wb: Workbench, tab: Any) -> AuditView:
    services = wb.services
    gr.Markdown("**Both orders of one pair** — use *Audit both orders* in the Judge tab.")
    banner = gr.Textbox(label="Positional consistency", interactive=False, elem_id="audit-banner")
    ids = gr.Textbox(label="Recorded judgments", interactive=False, elem_id="audit-ids")
    with gr.Row():
        left = gr.HTML(elem_id="audit-original", js_on_load=None)
        right = gr.HTML(elem_id="audit-swapped", js_on_load=None)
    gr.Markdown("**Batch audit** — both orders of every pair of a data set (or a seeded random sample); "
                "the data set itself is left as it is.")
    with gr.Row():
        source = gr.Dropdown(label="Data set", choices=[], elem_id="audit-source")
        sample = gr.Number(value=20, precision=0, minimum=0, label="Random sample (0 = all pairs)",
                           elem_id="audit-sample")
        seed = gr.Number(value=0, precision=0, label="Seed", elem_id="audit-seed")
        refresh = gr.Button("Refresh data sets", size="sm")
    with gr.Row():
        run = gr.Button("Run batch audit", variant="primary", elem_id="audit-run")
        stop = gr.Button("Stop", variant="stop", elem_id="audit-stop")
    status = gr.Textbox(label="Status", interactive=False, elem_id="audit-status")
    measured = gr.Markdown(views.measured_stage2_text(services.audit.measured_stage2()), elem_id="audit-measured")
    empty_table, _, empty_flipped = views.empty_audit_frames()  # an empty frame fixes the chart's colours
    table = gr.Dataframe(empty_table, label="Per subset", interactive=False, elem_id="audit-table")
    chart = gr.BarPlot(x="bar", y="value", color="metric", y_lim=[0, 1], x_label_angle=-30, height=300,
                       title="Both-orders accuracy, flip rate, first-position win rate", elem_id="audit-chart")
    flipped = gr.Dataframe(empty_flipped, label="Flipped pairs: what each order chose (select a row to open it in "
                                                "Judge)", interactive=False, wrap=True, elem_id="audit-flipped")
    results = [status, table, chart, flipped]

    def batch(name, size, sd, request: gr.Request, progress=gr.Progress()):
        try:
            report = progress_reporter(progress, text=audit_text)
            found = run_cancellable(services, session_key(request, "audit"), lambda cancel: services.audit.batch_audit(
                name, sample=int(size or 0), seed=int(sd or 0), cancel=cancel, progress=report))
        except ReflectRMError as exc:
            return [failure_text(exc, stopped="stopped: the pairs audited so far are recorded"),
                    *views.empty_audit_frames()]
        note = f"audited {found.subsets[-1].pairs if found.subsets else 0} pairs of {name} in {found.seconds:.1f}s"
        return [note, *views.audit_frames(found)]

    def stop_batch(request: gr.Request):
        stopped = services.runtime.cancels.cancel(session_key(request, "audit"))
        return ["stopped: the pairs audited so far are recorded" if stopped else "nothing is running",
                *views.empty_audit_frames()]

    refresh.click(lambda current: source_choices(services, current=current or ""), source, source,
                  api_visibility="private")
    # on opening the tab: the data sets, and the active judge's card (Train's "make active" may have changed it)
    tab.select(lambda current: (source_choices(services, current=current or ""),
                                views.measured_stage2_text(services.audit.measured_stage2())),
               source, [source, measured], api_visibility="private")
    event = run.click(batch, [source, sample, seed], results, api_visibility="private", concurrency_limit=2,
                      show_progress_on=status)  # one progress display, not one over each output
    stop.click(stop_batch, None, results, cancels=[event], queue=False, api_visibility="private")
    _build_before_after(wb, tab)
    return AuditView(banner=banner, ids=ids, left=left, right=right, source=source, flipped=flipped)


def _build_before_after(wb: Workbench, tab: Any) -> None:
    """Two models (the active judge, a training run's checkpoint, a model folder) on the same labelled pairs in
    both orders: flip rate, first-slot win rate, both-orders accuracy, first-critique share, and the change."""
    services = wb.services
    gr.Markdown("**Before / after** — two models judge the same labelled pairs in both orders with the app's judge "
                "settings (each kept as an evaluation run): how a retrained judge's position bias compares.")
    choices = services.audit.model_choices()
    with gr.Row():
        before = gr.Dropdown(choices=choices, value="", allow_custom_value=True, elem_id="ba-before",
                             label="Before: a model (or type a model folder inside the data folder)")
        after = gr.Dropdown(choices=choices, value=choices[1][1] if len(choices) > 1 else None,
                            allow_custom_value=True, label="After: a model (or type a model folder)", elem_id="ba-after")
    with gr.Row():
        source = gr.Dropdown(label="Data set (labelled pairs)", choices=[], elem_id="ba-source")
        most = gr.Number(value=20, precision=0, minimum=1, label="Pairs at most (empty: all)", elem_id="ba-limit")
        refresh = gr.Button("Refresh models and data sets", size="sm")
    with gr.Row():
        run = gr.Button("Run before / after", variant="primary", elem_id="ba-run")
        stop = gr.Button("Stop", variant="stop", elem_id="ba-stop")
    summary = gr.Textbox(label="Before / after", lines=2, interactive=False, elem_id="ba-summary")
    table = gr.Dataframe(views.before_after_frame(None), label="Each model's figures (95 % intervals) and the "
                         "paired change", interactive=False, wrap=True, elem_id="ba-table")

    def compare(b, a, name, limit, request: gr.Request, progress=gr.Progress()):  # noqa: B008
        try:
            pairs = None if limit in (None, "") else whole(limit, '"Pairs at most"', minimum=1)
            found = run_cancellable(services, session_key(request, "before-after"), lambda cancel: (
                services.audit.before_after(name or "", before=b or "", after=a or "", limit=pairs, cancel=cancel,
                                            progress=lambda done, total: progress(
                                                done / max(1, total), desc=f"{done} of {total} pair(s) judged"))))
        except ReflectRMError as exc:
            return failure_text(exc, stopped=str(exc)), views.before_after_frame(None), gr.Button(interactive=True)
        return views.before_after_text(found), views.before_after_frame(found), gr.Button(interactive=True)

    def stop_compare(request: gr.Request):
        stopped = services.runtime.cancels.cancel(session_key(request, "before-after"))
        return ("stopped: the pairs judged so far are kept as evaluation runs" if stopped else "nothing is running",
                gr.Button(interactive=True))

    def listed(name):
        # the lists only: a value sent back would undo what the user picked or typed while this was on its way
        found = services.audit.model_choices()
        names = services.judging.sources()
        return (gr.update(choices=found), gr.update(choices=found),
                gr.update(choices=names) if name in names else source_choices(services))

    pickers = [before, after, source]
    refresh.click(listed, [source], pickers, api_visibility="private")
    tab.select(listed, [source], pickers, api_visibility="private", show_progress="hidden")
    # the button is off while a comparison runs (it loads two models in turn): one press, one comparison
    event = run.click(lambda: gr.Button(interactive=False), None, run, queue=False, api_visibility="private").then(
        compare, [before, after, source, most], [summary, table, run], api_visibility="private",
        concurrency_limit=1, show_progress_on=summary)
    stop.click(stop_compare, None, [summary, run], cancels=[event], queue=False, api_visibility="private")


def wire(wb: Workbench) -> None:
    """The Judge tab's Audit button fills this tab; Stop there cancels either kind of judge work;
    a flipped pair opens in Judge."""
    services, judge, audit = wb.services, wb.views["judge"], wb.views["audit"]
    shown = [audit.banner, audit.ids, audit.left, audit.right]
    outs = [*judge.outputs, *shown, wb.tabs, audit.source]

    def both_orders(q, msgs, a, b, lab, strat, sd, base_pair, request: gr.Request, progress=gr.Progress()):
        try:
            pair = build_pair(query=q or "", messages=msgs or "", response_1=a or "", response_2=b or "",
                              label=LABELS[lab or "unknown"], base=base_pair)
            report = progress_reporter(progress)
            result = run_cancellable(services, session_key(request, "judge"), lambda cancel: services.audit.audit(
                pair, seed=sd, cancel=cancel, progress=report))
        except ReflectRMError as exc:
            return [*judge_tab.cleared_outputs(failure_text(exc)), "", "", "", "", gr.update(), gr.update()]
        note = f"audited: judgments #{result.original.judgment_id} and #{result.swapped.judgment_id}"
        return [*judge_tab.result_outputs(result.original, note), views.audit_banner(result),
                f"original #{result.original.judgment_id} · swapped #{result.swapped.judgment_id}",
                views.anatomy_html(result.original, title="Original order"),
                views.anatomy_html(result.swapped, title="Swapped order (Response 1 and 2 exchanged)"),
                gr.Tabs(selected="audit"), source_choices(services, current=pair.source)]

    def stop_work(request: gr.Request):
        stopped = services.runtime.cancels.cancel(session_key(request, "judge"))
        return judge_tab.cleared_outputs("stopped: nothing was recorded" if stopped else "nothing is running")

    event = judge.audit_button.click(both_orders, judge.run_inputs, outs, api_visibility="private",
                                     concurrency_limit=4, show_progress_on=judge.status)
    judge.stop_button.click(stop_work, None, judge.outputs, cancels=[*judge.events, event], queue=False,
                            api_visibility="private")
    open_outs = [*judge.outputs, *judge.form, judge.base, wb.tabs]

    def open_flipped(evt: gr.SelectData):
        row = evt.row_value
        if not row:
            return unchanged(open_outs)
        try:
            return [*judge_tab.opened_outputs(services, int(row[0])), gr.Tabs(selected="judge")]
        except (ReflectRMError, TypeError, ValueError) as exc:
            return {**unchanged(open_outs), judge.status: f"error: {exc}"}

    audit.flipped.select(open_flipped, None, open_outs, api_visibility="private")


TAB = TabSpec(label="Audit", id="audit", build=build, wire=wire)
