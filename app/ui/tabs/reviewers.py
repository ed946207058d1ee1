"""The Reviewers tab: reviewers and roles, opening a review round, the rounds' progress, agreement, and the
adjudicator's queue with every answer side by side and a decision form.

What a user may do is the rounds room's to refuse (`RoleError`, shown as one line); the controls a role cannot
use are hidden as well: admin controls from everyone but admins, agreement and adjudication from plain reviewers.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from reflectrm_app.records import JudgeResult
from reflectrm_app.ui import round_views, views
from reflectrm_app.ui.forms import parse_marks
from reflectrm_app.ui.tabs.common import TabSpec, Workbench, unchanged, user_of
from reflectrm_app.ui.tabs.my_rounds import me
from reflectrm_app.services.rounds import ROLES, RoundConfig
from reflectrm.errors import ReflectRMError, RoleError


def build(wb: Workbench, tab: Any) -> None:
    rounds = wb.services.rounds
    c: dict[str, Any] = {"who": gr.Textbox(label="You", interactive=False, elem_id="reviewers-who")}
    c["admin"] = _admin_layout(c)
    c["rounds"] = gr.Dataframe(round_views.rounds_frame([]), label="Rounds: answers per reviewer (answered/assigned)",
                               interactive=False, wrap=True, elem_id="reviewers-rounds")
    c["refresh"] = gr.Button("Refresh", elem_id="reviewers-refresh")
    c["adjudicate"] = _adjudicator_layout(c)
    c["status"] = gr.Textbox(label="Status", interactive=False, elem_id="reviewers-status")
    _wire_overview(rounds, c, tab)
    _wire_admin(rounds, c)
    _wire_agreement(rounds, c)
    _wire_adjudication(rounds, c)


def _admin_layout(c: dict[str, Any]) -> Any:
    with gr.Column(visible=False, elem_id="reviewers-admin") as box:
        gr.Markdown("### Reviewers and roles (admins)")
        c["table"] = gr.Dataframe(round_views.reviewers_frame([]), label="Reviewers", interactive=False,
                                  elem_id="reviewers-table")
        with gr.Row():
            c["name"] = gr.Textbox(label="Login name", elem_id="reviewers-name")
            c["role"] = gr.Dropdown(list(ROLES), value="reviewer", label="Role", elem_id="reviewers-role")
            c["set"] = gr.Button("Add or change role", elem_id="reviewers-set")
        gr.Markdown("### Open a round")
        with gr.Row():
            c["round_name"] = gr.Textbox(label="Round name", elem_id="round-name")
            c["overlap"] = gr.Number(value=2, precision=0, label="Reviewers per item (overlap)", elem_id="round-overlap")
            c["blind"] = gr.Checkbox(value=True, label="Blind", elem_id="round-blind")
            c["members"] = gr.Textbox(label="Reviewers (blank: every reviewer)", elem_id="round-reviewers")
        with gr.Row():
            c["source"] = gr.Textbox(label="Only this data set (optional)", elem_id="round-source")
            c["snapshot"] = gr.Textbox(label="Or a snapshot's judgments (optional)", elem_id="round-snapshot")
            c["top"] = gr.Textbox(label="First N judgments (blank: all)", elem_id="round-top")
            c["corrected"] = gr.Checkbox(label="Include judgments already corrected", elem_id="round-corrected")
        c["open"] = gr.Button("Open the round", variant="primary", elem_id="round-open")
    return box


def _adjudicator_layout(c: dict[str, Any]) -> Any:
    with gr.Column(visible=False, elem_id="reviewers-adjudicator") as box:
        with gr.Row():
            c["pick"] = gr.Dropdown(label="Round", choices=[], value=None, elem_id="reviewers-round")
            c["agree"] = gr.Button("Agreement", elem_id="reviewers-agree")
            c["queue"] = gr.Button("Adjudication queue", elem_id="reviewers-queue")
        c["overall"] = gr.Dataframe(label="Agreement overall (verdicts, analyses) with 95% intervals",
                                    interactive=False, elem_id="agree-overall")
        c["pairs"] = gr.Dataframe(label="Per reviewer pair", interactive=False, elem_id="agree-pairs")
        c["items"] = gr.Dataframe(label="Per item", interactive=False, elem_id="agree-items")
        gr.Markdown("### Adjudication: items where reviewers disagree")
        c["item"] = gr.Dropdown(label="Disputed judgment", choices=[], value=None, elem_id="adjudicate-item")
        c["answers"] = gr.Dataframe(label="Every answer, side by side", interactive=False, wrap=True,
                                    elem_id="adjudicate-answers")
        c["verdict"] = gr.Radio([("Response 1", 1), ("Response 2", 2)], label="Decision", elem_id="adjudicate-verdict")
        with gr.Row():
            c["right"] = gr.CheckboxGroup(label="Analyses right", choices=[], elem_id="adjudicate-right")
            c["wrong"] = gr.CheckboxGroup(label="Analyses wrong", choices=[], elem_id="adjudicate-wrong")
        c["note"] = gr.Textbox(label="Note (optional)", elem_id="adjudicate-note")
        c["decide"] = gr.Button("Decide", variant="primary", elem_id="adjudicate-decide")
        with gr.Accordion("Full anatomy", open=False):
            c["anatomy"] = gr.HTML(elem_id="adjudicate-anatomy")
    return box


def _overview(rounds: Any, user: str) -> dict[str, Any]:
    """Who the user is, which parts they see, the reviewers and rounds tables."""
    found = rounds.reviewer(user) if user else None
    all_rounds = rounds.rounds()
    names = [r.name for r in all_rounds]
    who = (f"{found.name} ({found.role})" if found else
           f"{user or 'nobody logged in'}: not a reviewer (an admin adds you here or with `reflectrm reviewers add`)")
    return {"who": who, "admin": gr.update(visible=bool(found and found.role == "admin")),
            "adjudicate": gr.update(visible=bool(found and found.adjudicates)),
            "table": round_views.reviewers_frame(rounds.reviewers() if found else []),
            "rounds": round_views.rounds_frame([rounds.progress(n) for n in names] if found else []),
            "pick": gr.update(choices=names, value=names[-1] if names else None)}


OVERVIEW = ("who", "admin", "adjudicate", "table", "rounds", "pick")


def _wire_overview(rounds: Any, c: dict[str, Any], tab: Any) -> None:
    outputs = [c[k] for k in OVERVIEW]

    def refresh(request: gr.Request):
        parts = _overview(rounds, user_of(request))
        return [parts[k] for k in OVERVIEW]

    tab.select(refresh, None, outputs, api_visibility="private")
    c["refresh"].click(refresh, None, outputs, api_visibility="private")


def _wire_admin(rounds: Any, c: dict[str, Any]) -> None:
    outputs = [*(c[k] for k in OVERVIEW), c["status"]]

    def set_role(name, role, request: gr.Request):
        try:
            user = me(request)
            record, before = rounds.set_reviewer(name or "", role=role or "", by=user)
        except ReflectRMError as exc:
            return {**unchanged(outputs), c["status"]: f"error: {exc}"}
        said = f"added {record.name} as {record.role}" if before is None else \
            f"{record.name}: {before} -> {record.role}"
        return [*(_overview(rounds, user)[k] for k in OVERVIEW), said]

    def open_round(name, overlap, blind, members, source, snapshot, top, corrected, request: gr.Request):
        try:
            user = me(request)
            config = RoundConfig(name=name or "", overlap=int(overlap) if overlap is not None else 0,
                                 blind=bool(blind), reviewers=round_views.reviewer_names(members or ""),
                                 source=(source or "").strip() or None, snapshot=(snapshot or "").strip() or None,
                                 top=round_views.parse_top(top), include_corrected=bool(corrected))
            rnd = rounds.open_round(config, by=user)
        except ReflectRMError as exc:
            return {**unchanged(outputs), c["status"]: f"error: {exc}"}
        said = (f"opened round {rnd.name!r}: {rnd.items} judgment(s), each to {rnd.overlap} reviewer(s)"
                f"{', blind' if rnd.blind else ''}")
        return [*(_overview(rounds, user)[k] for k in OVERVIEW), said]

    c["set"].click(set_role, [c["name"], c["role"]], outputs, api_visibility="private")
    fields = [c[k] for k in ("round_name", "overlap", "blind", "members", "source", "snapshot", "top", "corrected")]
    c["open"].click(open_round, fields, outputs, api_visibility="private")


def require_adjudicator(rounds: Any, user: str) -> None:
    """A one-line refusal unless `user` adjudicates (agreement tables show what blind rounds withhold)."""
    found = rounds.reviewer(user)
    if found is None or not found.adjudicates:
        raise RoleError(f"{user!r} is {found.role if found else 'not a reviewer'}, and only an adjudicator or admin "
                        "may see a round's agreement: ask an admin to change the role")


def _wire_agreement(rounds: Any, c: dict[str, Any]) -> None:
    outputs = [c["overall"], c["pairs"], c["items"], c["status"]]

    def agreement(name, request: gr.Request):
        try:
            user = me(request)
            require_adjudicator(rounds, user)
            if not name:
                raise RoleError("pick a round first")
            report = rounds.agreement(name)
        except ReflectRMError as exc:
            return {**unchanged(outputs), c["status"]: f"error: {exc}"}
        return [*round_views.agreement_frames(report.rows()), f"agreement of round {name!r}: "
                f"{len(report.items)} item(s), {len(report.reviewers)} reviewer(s)"]

    c["agree"].click(agreement, c["pick"], outputs, api_visibility="private")


def _disputed(rounds: Any, name: str, jid: int, user: str) -> Any:
    for item in rounds.adjudication_queue(name, by=user):
        if item.stored.id == jid:
            return item
    raise RoleError(f"judgment {jid} is not waiting for an adjudicator in round {name!r}: load the queue again")


def _wire_adjudication(rounds: Any, c: dict[str, Any]) -> None:
    shown = [c[k] for k in ("answers", "anatomy", "right", "wrong", "verdict", "note")]

    def load_queue(name, request: gr.Request):
        try:
            queue = rounds.adjudication_queue(name or "", by=me(request))
        except ReflectRMError as exc:
            return gr.update(), f"error: {exc}"
        ids = [item.stored.id for item in queue]
        return (gr.update(choices=[(f"#{i}", i) for i in ids], value=ids[0] if ids else None),
                f"{len(ids)} item(s) waiting for an adjudicator in round {name!r}")

    def show_item(name, jid, request: gr.Request):
        if jid is None:
            return [None, "", gr.update(choices=[], value=[]), gr.update(choices=[], value=[]), None, "", ""]
        try:
            item = _disputed(rounds, name or "", int(jid), me(request))
        except ReflectRMError as exc:
            return {**unchanged(shown), c["status"]: f"error: {exc}"}
        j = item.stored.judgment
        choices = [(f"#{k}", k) for k in range(len(j.rollouts))]
        return [round_views.answers_frame(item.answers, analyses=len(j.rollouts)),
                views.anatomy_html(JudgeResult(judgment_id=item.stored.id, judgment=j)),
                gr.update(choices=choices, value=[]), gr.update(choices=choices, value=[]), None, "", ""]

    def decide(name, jid, verdict, ok, bad, text, request: gr.Request):
        try:
            if jid is None or verdict is None:
                raise RoleError("pick a disputed judgment and a decision (Response 1 or 2)")
            label = rounds.adjudicate(name or "", int(jid), by=me(request), verdict=int(verdict),
                                      marks=parse_marks(ok or [], bad or []), note=text or "")
        except ReflectRMError as exc:
            return f"error: {exc}"
        return (f"judgment #{label.judgment_id}: {round_views.verdict_cell(label.verdict)}, decided by "
                f"{label.decided_by} ({len(label.overruled)} answer(s) overruled)")

    c["queue"].click(load_queue, c["pick"], [c["item"], c["status"]], api_visibility="private")
    c["item"].change(show_item, [c["pick"], c["item"]], [*shown, c["status"]], api_visibility="private")
    c["decide"].click(decide, [c["pick"], c["item"], c["verdict"], c["right"], c["wrong"], c["note"]], c["status"],
                      api_visibility="private")


TAB = TabSpec(label="Reviewers", id="reviewers", build=build)
