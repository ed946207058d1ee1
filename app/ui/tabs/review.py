"""The Review queue: the judgments most worth a look, one at a time; correct, edit or withdraw by keyboard.

Keys (see `reflectrm_app.ui.KEYBOARD_JS`): 1 / 2 save a verdict (pressing the same key again confirms one that
contradicts what is known), n moves on, s skips (the item stays away for this session).
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from reflectrm_app.ui import views
from reflectrm_app.records import JudgeResult, ReviewItem
from reflectrm_app.services import NeedsConfirmation, parse_marks
from reflectrm_app.ui.tabs.common import (
    TabSpec, Workbench, field_note, judgment_number, session_key, unchanged, user_of,
)
from reflectrm.errors import InputError, ReflectRMError


def build(wb: Workbench, tab: Any) -> None:
    services = wb.services
    with gr.Row():
        reviewer = gr.Textbox(label="Your name (recorded with corrections; with a login, your user name is)",
                              value="", scale=2, elem_id="review-author")
        source = gr.Textbox(label="Only this data set (optional)", scale=2, elem_id="review-source")
        jump = gr.Textbox(label="Open judgment #", scale=1, elem_id="review-jump")
        open_btn = gr.Button("Open", scale=1, elem_id="review-open")
    jump_note = field_note("review-jump-note")  # a number that cannot be opened, said under the field
    header = gr.Textbox(label="Item", interactive=False, lines=2, elem_id="review-header")
    # under the item's header, where the eye is after a key (and no toast: a toast per save piled up over the
    # analyses): each action replaces it
    status = gr.Textbox(label="Last action: saved, or a confirmation to answer", interactive=False,
                        elem_id="review-status")
    query = gr.Textbox(label="Query", interactive=False, lines=2, elem_id="review-query")
    with gr.Row():
        r1 = gr.Textbox(label="Response 1", interactive=False, lines=3, elem_id="review-resp1")
        r2 = gr.Textbox(label="Response 2", interactive=False, lines=3, elem_id="review-resp2")
    analyses = gr.Dataframe(label="The judge's analyses", interactive=False, wrap=True, elem_id="review-analyses")
    with gr.Row():
        right = gr.CheckboxGroup(label="Mark analyses right", choices=[], elem_id="review-right")
        wrong = gr.CheckboxGroup(label="Mark analyses wrong", choices=[], elem_id="review-wrong")
    note = gr.Textbox(label="Note (optional)", lines=1, elem_id="review-note")
    with gr.Row():
        b1 = gr.Button("Response 1 better  [1]", variant="primary", elem_id="review-r1")
        b2 = gr.Button("Response 2 better  [2]", variant="primary", elem_id="review-r2")
        nxt = gr.Button("Next  [n]", elem_id="review-next")
        skip = gr.Button("Skip for this session  [s]", elem_id="review-skip")
        withdraw = gr.Button("Withdraw my correction", variant="stop", elem_id="review-withdraw")
    with gr.Accordion("Full anatomy", open=False):
        anatomy = gr.HTML(elem_id="review-anatomy", js_on_load=None)
    # the judgment number the header showed when a key or button was pressed (filled in the browser by SHOWN_JS)
    on_screen = gr.Textbox(visible=False, elem_id="review-on-screen")
    current, skipped, pending = gr.State(None), gr.State([]), gr.State(None)
    shown = [header, current, query, r1, r2, analyses, right, wrong, note, anatomy, status, pending]

    def show(item: ReviewItem | None, note_text: str = "") -> list[Any]:
        if item is None:
            empty = gr.update(choices=[], value=[])
            return ["The queue is empty: nothing left to review.", None, "", "", "", None, empty, empty, "", "",
                    note_text, None]
        if item.wrapped and not note_text:
            note_text = "Back at the start of the queue: Next has walked through every item"
        j = item.stored.judgment
        choices = [(f"#{k} ({'R' + str(r.prediction) if r.prediction else 'unparseable'})", k)
                   for k, r in enumerate(j.rollouts)]
        marks = item.correction.marks if item.correction else {}
        return [views.review_header(item), item.stored.id, j.pair.query, j.pair.response_1, j.pair.response_2,
                views.analyses_frame(j),
                gr.update(choices=choices, value=[k for k, v in marks.items() if v == "right"]),
                gr.update(choices=choices, value=[k for k, v in marks.items() if v == "wrong"]),
                item.correction.note if item.correction else "",
                views.anatomy_html(JudgeResult(judgment_id=item.stored.id, judgment=j)), note_text, None]

    def next_item(cur, skip_ids, src, request: gr.Request, note_text: str = ""):
        item = services.next_for_review(reviewer=session_key(request, "review"), skip=skip_ids, after=cur,
                                        source=src or "")
        return show(item, note_text)

    def skip_item(cur, skip_ids, src, request: gr.Request):
        skip_ids = [*skip_ids, int(cur)] if cur else skip_ids
        return [*next_item(cur, skip_ids, src, request), skip_ids]

    def open_item(text, request: gr.Request):
        try:
            jid = judgment_number(text)
            if jid is None:
                raise InputError("type a judgment number to open (History lists them)")
            return [*show(services.review_item(jid, reviewer=session_key(request, "review"))), ""]
        except ReflectRMError as exc:
            return {**unchanged(shown), jump_note: views.note_markdown(f"error: {exc}")}

    def save(verdict: int):
        def handler(cur, ok, bad, text, name, waiting, skip_ids, src, seen, request: gr.Request):
            if not cur:
                return {**unchanged(shown), status: "nothing to correct: press n (Next) to load an item"}
            try:
                target = judgment_number(seen or "") or cur  # the item on screen, not the one the state moved to
                marks = parse_marks(ok or [], bad or [])
                # a confirmation answers the question asked: marks changed since then are asked about afresh
                asked = [target, verdict, [[k, mark] for k, mark in sorted(marks.items())]]
                record = services.correct(int(target), verdict=verdict, author=user_of(request) or name or "",
                                          note=text or "", marks=marks, confirmed=waiting == asked,
                                          on_screen=int(cur))
            except NeedsConfirmation as exc:
                # until answered (the next save, Next or Skip dismisses it: `reflectrmAnswered` in the page's head)
                gr.Warning(f"Confirm: {exc}", title="Confirm this correction", duration=None)
                return {**unchanged(shown), status: f"confirm: {exc}", pending: asked}
            except ReflectRMError as exc:
                return {**unchanged(shown), status: f"error: {exc}", pending: None}
            # said in the status line beside the keys, replaced by the next save (toasts piled up over the analyses)
            saved = f"{views.correction_text(record)} (judgment #{target}); the next item is shown"
            return next_item(cur, skip_ids, src, request, note_text=saved)

        return handler

    def withdraw_current(cur, name, request: gr.Request):
        try:
            if not cur:
                raise InputError("no item is shown: open the judgment whose correction you withdraw")
            record = services.withdraw(int(cur), author=user_of(request) or name or "")
            item = services.review_item(int(cur), reviewer=session_key(request, "review"))
        except ReflectRMError as exc:
            return {**unchanged(shown), status: f"error: {exc}"}
        return show(item, views.withdrawn_text(record))

    def first_item(cur, skip_ids, src, request: gr.Request):
        return unchanged(shown) if cur else next_item(None, skip_ids, src, request)

    save_inputs = [current, right, wrong, note, reviewer, pending, skipped, source, on_screen]
    for button, verdict in ((b1, 1), (b2, 2)):
        button.click(save(verdict), save_inputs, shown, api_visibility="private", concurrency_limit=8, js=SHOWN_JS)
    passed_over = "(...values) => { window.reflectrmAnswered?.(); return values; }"
    nxt.click(next_item, [current, skipped, source], shown, api_visibility="private", concurrency_limit=8,
              js=passed_over)
    skip.click(skip_item, [current, skipped, source], [*shown, skipped], api_visibility="private",
               concurrency_limit=8, js=passed_over)
    withdraw.click(withdraw_current, [current, reviewer], shown, api_visibility="private")
    open_btn.click(open_item, jump, [*shown, jump_note], api_visibility="private")
    jump.submit(open_item, jump, [*shown, jump_note], api_visibility="private")
    tab.select(first_item, [current, skipped, source], shown, api_visibility="private")


SHOWN_JS = """(...values) => {
  window.reflectrmAnswered?.();
  const header = document.querySelector('#review-header textarea');
  const m = header ? header.value.match(/^Judgment #(\\d+)/) : null;
  values[values.length - 1] = m ? m[1] : "";
  return values;
}"""
"""Runs in the browser as a save is pressed: its last input becomes the judgment number the header shows then, and a
question to confirm on screen is dismissed (the press answers it)."""

TAB = TabSpec(label="Review queue", id="review", build=build)
