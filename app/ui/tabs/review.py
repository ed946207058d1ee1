"""The Review queue: the judgments most worth a look, one at a time; correct, edit or withdraw by keyboard.

Keys (see `reflectrm_app.ui.KEYBOARD_JS`): 1 / 2 save a verdict (pressing the same key again confirms one that
contradicts what is known), n moves on, s skips (the item stays away for this session).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from reflectrm_app.ui import views
from reflectrm_app.records import JudgeResult, ReviewItem
from reflectrm_app.services.review import NeedsConfirmation
from reflectrm_app.ui.forms import judgment_number, parse_marks
from reflectrm_app.ui.tabs import my_rounds
from reflectrm_app.ui.tabs.common import TabSpec, Workbench, field_note, session_key, unchanged, user_of
from reflectrm.errors import InputError, ReflectRMError


@dataclass(frozen=True, slots=True)
class ReviewPage:
    """The tab's components (`_layout`); `shown` is what drawing an item updates."""

    c: dict[str, Any]

    @property
    def shown(self) -> list[Any]:
        return [self.c[k] for k in ("header", "current", "query", "r1", "r2", "analyses", "right", "wrong", "note",
                                    "anatomy", "status", "pending")]


def build(wb: Workbench, tab: Any) -> None:
    my_rounds.build_section(wb.services.rounds, tab)  # shown only to a logged-in user with round work
    page = ReviewPage(_layout())
    _wire_walk(wb.services.review, page, tab)
    _wire_saves(wb.services.review, page)


def _layout() -> dict[str, Any]:
    c: dict[str, Any] = {}
    with gr.Row():
        c["reviewer"] = gr.Textbox(label="Your name (recorded with corrections; with a login, your user name is)",
                                   value="", scale=2, elem_id="review-author")
        c["source"] = gr.Textbox(label="Only this data set (optional)", scale=2, elem_id="review-source")
        c["jump"] = gr.Textbox(label="Open judgment #", scale=1, elem_id="review-jump")
        c["open"] = gr.Button("Open", scale=1, elem_id="review-open")
    c["jump_note"] = field_note("review-jump-note")  # a number that cannot be opened, said under the field
    c["header"] = gr.Textbox(label="Item", interactive=False, lines=3, elem_id="review-header")
    # under the item's header, where the eye is after a key (and no toast: a toast per save piled up over the
    # analyses): each action replaces it
    c["status"] = gr.Textbox(label="Last action: saved, or a confirmation to answer", interactive=False,
                             elem_id="review-status")
    c["query"] = gr.Textbox(label="Query", interactive=False, lines=2, elem_id="review-query")
    with gr.Row():
        c["r1"] = gr.Textbox(label="Response 1", interactive=False, lines=3, elem_id="review-resp1")
        c["r2"] = gr.Textbox(label="Response 2", interactive=False, lines=3, elem_id="review-resp2")
    c["analyses"] = gr.Dataframe(label="The judge's analyses", interactive=False, wrap=True, elem_id="review-analyses")
    with gr.Row():
        c["right"] = gr.CheckboxGroup(label="Mark analyses right", choices=[], elem_id="review-right")
        c["wrong"] = gr.CheckboxGroup(label="Mark analyses wrong", choices=[], elem_id="review-wrong")
    c["note"] = gr.Textbox(label="Note (optional)", lines=1, elem_id="review-note")
    with gr.Row():
        c["b1"] = gr.Button("Response 1 better  [1]", variant="primary", elem_id="review-r1")
        c["b2"] = gr.Button("Response 2 better  [2]", variant="primary", elem_id="review-r2")
        c["next"] = gr.Button("Next  [n]", elem_id="review-next")
        c["skip"] = gr.Button("Skip for this session  [s]", elem_id="review-skip")
        c["withdraw"] = gr.Button("Withdraw my correction", variant="stop", elem_id="review-withdraw")
    with gr.Accordion("Full anatomy", open=False):
        c["anatomy"] = gr.HTML(elem_id="review-anatomy", js_on_load=None)
    # the judgment number the header showed when a key or button was pressed (filled in the browser by SHOWN_JS)
    c["on_screen"] = gr.Textbox(visible=False, elem_id="review-on-screen")
    c["current"], c["skipped"], c["pending"] = gr.State(None), gr.State([]), gr.State(None)
    return c


def show(item: ReviewItem | None, note_text: str = "") -> list[Any]:
    """`ReviewPage.shown`'s values for `item` (None: the queue is empty), with `note_text` in the status line."""
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


def _next_item(review: Any, cur, skip_ids, src, request: gr.Request, note_text: str = ""):
    item = review.next_for_review(reviewer=session_key(request, "review"), skip=skip_ids, after=cur, source=src or "")
    return show(item, note_text)


def _wire_walk(review: Any, page: ReviewPage, tab: Any) -> None:
    """Next, Skip, Open judgment # and the first item when the tab opens."""
    c, shown = page.c, page.shown

    def next_item(cur, skip_ids, src, request: gr.Request):
        return _next_item(review, cur, skip_ids, src, request)

    def skip_item(cur, skip_ids, src, request: gr.Request):
        skip_ids = [*skip_ids, int(cur)] if cur else skip_ids
        return [*_next_item(review, cur, skip_ids, src, request), skip_ids]

    def open_item(text, request: gr.Request):
        try:
            jid = judgment_number(text)
            if jid is None:
                raise InputError("type a judgment number to open (History lists them)")
            return [*show(review.review_item(jid, reviewer=session_key(request, "review"))), ""]
        except ReflectRMError as exc:
            return {**unchanged(shown), c["jump_note"]: views.note_markdown(f"error: {exc}")}

    def first_item(cur, skip_ids, src, request: gr.Request):
        # as the tab opens; an item opened by number while this ran (both are in flight at once) is not replaced
        if cur:
            return unchanged(shown)
        reviewer = session_key(request, "review")
        item = review.next_for_review(reviewer=reviewer, skip=skip_ids, source=src or "", keep_held=True)
        if review.holding(reviewer) != (item.stored.id if item else None):
            return unchanged(shown)
        return show(item)

    walk = [c["current"], c["skipped"], c["source"]]
    passed_over = "(...values) => { window.reflectrmAnswered?.(); return values; }"  # a question on screen leaves
    c["next"].click(next_item, walk, shown, api_visibility="private", concurrency_limit=8, js=passed_over)
    c["skip"].click(skip_item, walk, [*shown, c["skipped"]], api_visibility="private", concurrency_limit=8,
                    js=passed_over)
    c["open"].click(open_item, c["jump"], [*shown, c["jump_note"]], api_visibility="private")
    c["jump"].submit(open_item, c["jump"], [*shown, c["jump_note"]], api_visibility="private")
    tab.select(first_item, walk, shown, api_visibility="private")


def _wire_saves(review: Any, page: ReviewPage) -> None:
    """1 / 2 (a verdict, asked first when it contradicts what is known) and Withdraw."""
    c, shown = page.c, page.shown
    status, pending = c["status"], c["pending"]

    def save(verdict: int):
        def handler(cur, ok, bad, text, name, waiting, skip_ids, src, seen, request: gr.Request):
            if not cur:
                return {**unchanged(shown), status: "nothing to correct: press n (Next) to load an item"}
            try:
                target = judgment_number(seen or "") or cur  # the item on screen, not the one the state moved to
                marks = parse_marks(ok or [], bad or [])
                # a confirmation answers the question asked: marks changed since then are asked about afresh
                asked = [target, verdict, [[k, mark] for k, mark in sorted(marks.items())]]
                record = review.correct(int(target), verdict=verdict, author=user_of(request) or name or "",
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
            return _next_item(review, cur, skip_ids, src, request, note_text=saved)

        return handler

    def withdraw_current(cur, name, request: gr.Request):
        try:
            if not cur:
                raise InputError("no item is shown: open the judgment whose correction you withdraw")
            record = review.withdraw(int(cur), author=user_of(request) or name or "")
            item = review.review_item(int(cur), reviewer=session_key(request, "review"))
        except ReflectRMError as exc:
            return {**unchanged(shown), status: f"error: {exc}"}
        return show(item, views.withdrawn_text(record))

    save_inputs = [c[k] for k in ("current", "right", "wrong", "note", "reviewer", "pending", "skipped", "source",
                                  "on_screen")]
    for button, verdict in ((c["b1"], 1), (c["b2"], 2)):
        button.click(save(verdict), save_inputs, shown, api_visibility="private", concurrency_limit=8, js=SHOWN_JS)
    c["withdraw"].click(withdraw_current, [c["current"], c["reviewer"]], shown, api_visibility="private")


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
