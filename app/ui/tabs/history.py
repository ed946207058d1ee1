"""The History tab: stored judgments, newest first (filtered in SQL); reopen one as recorded."""

from __future__ import annotations

from typing import Any

import gradio as gr

from reflectrm_app.ui import views
from reflectrm_app.records import JudgeResult
from reflectrm_app.ui.tabs import judge as judge_tab
from reflectrm_app.ui.forms import judgment_number
from reflectrm_app.ui.tabs.common import TabSpec, Workbench, unchanged
from reflectrm.errors import InputError, ReflectRMError


def build(wb: Workbench, tab: Any) -> dict[str, Any]:
    services = wb.services
    with gr.Row():
        search = gr.Textbox(label="Search query or source", scale=3, elem_id="history-search")
        refresh = gr.Button("Refresh", scale=1, elem_id="history-refresh")
        jid = gr.Textbox(label="Judgment #", scale=1, elem_id="history-id")
        open_btn = gr.Button("Reopen", scale=1, elem_id="history-open")
    table = gr.Dataframe(views.summaries_frame([]), label="Stored judgments, newest first (the latest 200; select "
                                                          "a row to reopen it)", interactive=False,
                         elem_id="history-table")
    status = gr.Textbox(label="Status", interactive=False, elem_id="history-status")
    verdict = gr.Textbox(label="Final verdict", interactive=False, elem_id="history-verdict")
    to_judge = gr.Button("Open in Judge (switch strategies there)", elem_id="history-to-judge")
    anatomy = gr.HTML(elem_id="history-anatomy", js_on_load=None)
    with gr.Accordion("Raw judgment (JSON, as recorded)", open=False):
        raw = gr.JSON(elem_id="history-json")
    shown = [status, jid, verdict, anatomy, raw]

    def listing(text):
        return views.summaries_frame(services.history.history(search=text or ""))

    def reopen(typed):
        try:
            number = judgment_number(typed)
            if number is None:
                raise InputError("type a judgment number, or select a row")
            stored = services.judging.open(number)
        except ReflectRMError as exc:
            return [f"error: {exc}", gr.update(), "", "", None]  # nothing of an earlier judgment stays
        twin = f", swapped-order twin #{stored.twin_id}" if stored.twin_id else ""
        return [f"judgment #{stored.id} recorded {stored.created_at:%Y-%m-%d %H:%M:%S}{twin}", str(stored.id),
                views.verdict_line(stored.judgment),
                views.anatomy_html(JudgeResult(judgment_id=stored.id, judgment=stored.judgment)),
                stored.judgment.to_dict()]

    def select_row(evt: gr.SelectData):
        return reopen(evt.row_value[0]) if evt.row_value else unchanged(shown)

    refresh.click(listing, search, table, api_visibility="private")
    search.submit(listing, search, table, api_visibility="private")
    tab.select(listing, search, table, api_visibility="private")
    open_btn.click(reopen, jid, shown, api_visibility="private")
    jid.submit(reopen, jid, shown, api_visibility="private")
    table.select(select_row, None, shown, api_visibility="private")
    return {"id": jid, "status": status, "to_judge": to_judge}


def wire(wb: Workbench) -> None:
    """Open in Judge: the Judge tab's form and outputs filled from the stored judgment."""
    services, judge, history = wb.services, wb.views["judge"], wb.views["history"]
    outs = [*judge.outputs, *judge.form, judge.base, wb.tabs, history["status"]]

    def open_in_judge(typed):
        try:
            number = judgment_number(typed)
            if number is None:
                raise InputError("reopen a judgment first (type its number or select a row)")
            return [*judge_tab.opened_outputs(services, number), gr.Tabs(selected="judge"), gr.update()]
        except ReflectRMError as exc:
            return {**unchanged(outs), history["status"]: f"error: {exc}"}

    history["to_judge"].click(open_in_judge, history["id"], outs, api_visibility="private")


TAB = TabSpec(label="History", id="history", build=build, wire=wire)
