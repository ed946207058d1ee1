"""The Review tab's "My rounds": a logged-in reviewer walks only the items a review round assigned to them.

Shown only to a user with round work (a round that names them, or names nobody, and a reviewing role). The items,
other reviewers' answers and earlier corrections come from the rounds room (`RoundService.item`), which withholds
them in a blind round until the reviewer answered; this section shows what it is given and fetches nothing else.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from reflectrm_app.records import JudgeResult
from reflectrm_app.services.rounds import RoundItemView
from reflectrm_app.ui import round_views, views
from reflectrm_app.ui.forms import parse_marks
from reflectrm_app.ui.tabs.common import unchanged, user_of
from reflectrm.errors import ReflectRMError, RoleError

SHOWN = ("header", "current", "query", "r1", "r2", "analyses", "right", "wrong", "note", "others", "label",
         "anatomy", "progress", "status")
"""What showing an item (or no item) updates, in this order."""


def build_section(rounds: Any, tab: Any) -> dict[str, Any]:
    """Lay out "My rounds" above the queue and wire it; returns its components."""
    c = _layout()
    _wire(rounds, c, tab)
    return c


def _layout() -> dict[str, Any]:
    c: dict[str, Any] = {}
    with gr.Column(visible=False, elem_id="myround") as c["box"]:
        gr.Markdown("### My rounds: the items a review round assigned to you")
        with gr.Row():
            c["pick"] = gr.Dropdown(label="Round", choices=[], value=None, scale=3, elem_id="myround-pick")
            c["next"] = gr.Button("Next item of this round", scale=1, elem_id="myround-next")
        c["progress"] = gr.Textbox(label="Your progress", interactive=False, elem_id="myround-progress")
        c["header"] = gr.Textbox(label="Round item", interactive=False, elem_id="myround-header")
        c["status"] = gr.Textbox(label="Last action", interactive=False, elem_id="myround-status")
        c["query"] = gr.Textbox(label="Query", interactive=False, lines=2, elem_id="myround-query")
        with gr.Row():
            c["r1"] = gr.Textbox(label="Response 1", interactive=False, lines=3, elem_id="myround-resp1")
            c["r2"] = gr.Textbox(label="Response 2", interactive=False, lines=3, elem_id="myround-resp2")
        c["analyses"] = gr.Dataframe(label="The judge's analyses", interactive=False, wrap=True,
                                     elem_id="myround-analyses")
        with gr.Row():
            c["right"] = gr.CheckboxGroup(label="Mark analyses right", choices=[], elem_id="myround-right")
            c["wrong"] = gr.CheckboxGroup(label="Mark analyses wrong", choices=[], elem_id="myround-wrong")
        c["note"] = gr.Textbox(label="Note (optional)", elem_id="myround-note")
        with gr.Row():
            c["b1"] = gr.Button("Answer: Response 1 better", variant="primary", elem_id="myround-r1")
            c["b2"] = gr.Button("Answer: Response 2 better", variant="primary", elem_id="myround-r2")
        c["others"] = gr.Dataframe(round_views.others_frame([], hidden=False), label="Other reviewers' answers",
                                   interactive=False, wrap=True, elem_id="myround-others")
        c["label"] = gr.Textbox(label="The item's label", interactive=False, elem_id="myround-label")
        with gr.Accordion("Full anatomy", open=False):
            c["anatomy"] = gr.HTML(elem_id="myround-anatomy")
    c["current"] = gr.State(None)
    return c


def show(view: RoundItemView | None, *, progress: str, status: str) -> list[Any]:
    """`SHOWN`'s values for one item as the room gave it (None: nothing left for this reviewer)."""
    if view is None:
        empty = gr.update(choices=[], value=[])
        return ["nothing left for you in this round", None, "", "", "", None, empty, empty, "",
                round_views.others_frame([], hidden=False), "", "", progress, status]
    j = view.stored.judgment
    choices = [(f"#{k} ({'R' + str(r.prediction) if r.prediction else 'unparseable'})", k)
               for k, r in enumerate(j.rollouts)]
    marks = view.mine.marks
    blind = ", blind" if view.round.blind else ""
    answered = f"; you answered {round_views.verdict_cell(view.mine.verdict)}" if view.mine.answered_at else ""
    return [f"Judgment #{view.stored.id} in round {view.round.name!r}{blind}{answered}", view.stored.id,
            j.pair.query, j.pair.response_1, j.pair.response_2, views.analyses_frame(j),
            gr.update(choices=choices, value=[k for k, v in marks.items() if v == "right"]),
            gr.update(choices=choices, value=[k for k, v in marks.items() if v == "wrong"]), view.mine.note,
            round_views.others_frame(view.others, hidden=view.hidden),
            round_views.label_text(view.label, hidden=view.hidden),
            views.anatomy_html(JudgeResult(judgment_id=view.stored.id, judgment=j)), progress, status]


def me(request: gr.Request | None) -> str:
    """The logged-in user; a one-line refusal when nobody is (rounds know people by their login)."""
    user = user_of(request)
    if not user:
        raise RoleError("review rounds need a login: start the app with REFLECTRM_AUTH and log in")
    return user


def _wire(rounds: Any, c: dict[str, Any], tab: Any) -> None:
    shown = [c[k] for k in SHOWN]

    def offer(request: gr.Request):
        user = user_of(request)
        reviewer = rounds.reviewer(user) if user else None
        mine = [r for r in rounds.rounds() if round_views.works_in(r, reviewer)]
        names = [(round_views.round_choice(r), r.name) for r in mine]
        return gr.update(visible=bool(mine)), gr.update(choices=names, value=names[0][1] if names else None)

    def next_item(name, request: gr.Request):
        try:
            user = me(request)
            if not name:
                raise RoleError("pick a round first")
            view = rounds.next_item(name, reviewer=user)
            progress = round_views.progress_text(rounds.progress(name), user)
        except ReflectRMError as exc:
            return {**unchanged(shown), c["status"]: f"error: {exc}"}
        return show(view, progress=progress, status="")

    def answer(verdict: int):
        def handler(name, cur, ok, bad, text, request: gr.Request):
            try:
                user = me(request)
                if not name or cur is None:
                    raise RoleError("no round item is shown: pick a round and press Next item")
                mine, _ = rounds.answer(name, int(cur), reviewer=user, verdict=verdict, marks=parse_marks(ok or [],
                                        bad or []), note=text or "")
                view = rounds.item(name, int(cur), reviewer=user)  # now answered: others' answers may show
                progress = round_views.progress_text(rounds.progress(name), user)
            except ReflectRMError as exc:
                return {**unchanged(shown), c["status"]: f"error: {exc}"}
            saved = (f"saved your answer to judgment #{mine.judgment_id}: {round_views.verdict_cell(mine.verdict)}; "
                     "press Next item for the next one")
            return show(view, progress=progress, status=saved)

        return handler

    tab.select(offer, None, [c["box"], c["pick"]], api_visibility="private")
    c["next"].click(next_item, c["pick"], shown, api_visibility="private", concurrency_limit=8)
    inputs = [c[k] for k in ("pick", "current", "right", "wrong", "note")]
    for button, verdict in ((c["b1"], 1), (c["b2"], 2)):
        button.click(answer(verdict), inputs, shown, api_visibility="private", concurrency_limit=8)
