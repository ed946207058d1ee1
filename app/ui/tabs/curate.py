"""The Curate tab: browse the derived training examples, exclude or restore them, snapshot, export."""

from __future__ import annotations

from typing import Any

import gradio as gr

from reflectrm_app.services.rounds import LABEL_RULES, SnapshotRule
from reflectrm_app.ui import round_views, views
from reflectrm_app.records import ExampleFilter, ExampleRow
from reflectrm_app.ui.forms import parse_day, parse_ids
from reflectrm_app.ui.tabs.common import TabSpec, Workbench, field_note, unchanged
from reflectrm.errors import ReflectRMError


# the empty choice has words: an empty label rendered as a bare tick mark
ANY_SOURCE = ("any source", "")
NO_SNAPSHOT = ("none: the examples in force now", "")

def build(wb: Workbench, tab: Any) -> None:
    curation, judging = wb.services.curation, wb.services.judging
    c = _layout()
    list_examples = _lister(curation, judging, c)
    _wire_listing(c, tab, list_examples)
    _wire_changes(curation, c, list_examples)
    _wire_rule_snapshot(wb.services.rounds, c, list_examples)


def _layout() -> dict[str, Any]:
    c: dict[str, Any] = {}
    with gr.Row():
        c["kind"] = gr.Radio(["preference", "reflection"], value="reflection", label="Examples", elem_id="curate-kind")
        c["source"] = gr.Dropdown(label="Source", choices=[ANY_SOURCE], value="", allow_custom_value=True,
                                  elem_id="curate-source")
        c["states"] = gr.CheckboxGroup(["active", "excluded", "withdrawn"], value=["active", "excluded"],
                                       label="State", elem_id="curate-states")
        c["agreement"] = gr.Dropdown(["any", "agrees", "disagrees"], value="any", label="Person vs judge",
                                     elem_id="curate-agreement")
    with gr.Row():
        c["since"] = gr.Textbox(label="Since (YYYY-MM-DD)", elem_id="curate-since")
        c["until"] = gr.Textbox(label="Until (YYYY-MM-DD)", elem_id="curate-until")
        c["search"] = gr.Textbox(label="Search text", elem_id="curate-search")
        c["show"] = gr.Button("Show", variant="primary", elem_id="curate-show")
    c["filter_note"] = field_note("curate-filter-note")  # a date that is not one, said under the filters
    with gr.Row():
        c["mix"] = gr.Textbox(label="Mix", interactive=False, scale=3, elem_id="curate-mix")
        c["mix_plot"] = gr.BarPlot(x="mix", y="share", color="kind", y_lim=[0, 1], height=200, scale=2,
                                   title="Pref:Refl share, current vs paper", elem_id="curate-mix-plot")
    c["table"] = gr.Dataframe(views.examples_frame([]), label="Examples (select a row to see it whole and add its id "
                                                              "below); 'contested': the person contradicted what is "
                                                              "known",
                              interactive=False, wrap=True, elem_id="curate-table")
    c["detail"] = gr.JSON(label="Selected example (with both critiques)", elem_id="curate-detail")
    with gr.Row():
        c["ids"] = gr.Textbox(label="Example ids", placeholder="3, 5", elem_id="curate-ids")
        c["exclude"] = gr.Button("Exclude", elem_id="curate-exclude")
        c["restore"] = gr.Button("Restore", elem_id="curate-restore")
    c["ids_note"] = field_note("curate-ids-note")  # ids that are not numbers, said under the field
    with gr.Row():
        c["labelled"] = gr.Dropdown(label="Labelled data set (judged with samples)", choices=[], value=None,
                                    allow_custom_value=True, scale=3, elem_id="curate-labelled-source")
        c["from_labels"] = gr.Button("Add the paper's examples from its judgments", scale=2,
                                     elem_id="curate-from-labels")
    c["status"] = gr.Textbox(label="Status", interactive=False, elem_id="curate-status")
    c["snapshots"], c["export"] = _snapshot_and_export_widgets()
    c["rows"] = gr.State([])
    return c


def _filters(c: dict[str, Any]) -> list[Any]:
    """The filter fields, in `list_examples`' order (the kind first)."""
    return [c[k] for k in ("kind", "source", "states", "since", "until", "agreement", "search")]


def _listing(c: dict[str, Any]) -> list[Any]:
    """What listing the examples updates."""
    return [c["table"], c["mix"], c["mix_plot"], c["snapshots"]["table"], c["source"], c["export"]["snapshot"],
            c["rows"], c["labelled"], c["status"], c["filter_note"]]


def _lister(curation: Any, judging: Any, c: dict[str, Any]) -> Any:
    """`list_examples(kind, *filters)`: the examples the filters keep, the mix, snapshots and data sets."""
    listing = _listing(c)

    def list_examples(k, src, st, s_from, s_to, agree, text):
        try:
            filters = ExampleFilter(source=src or "", states=tuple(st or ()), since=parse_day(s_from, "since"),
                                    until=parse_day(s_to, "until"), agreement=agree, search=text or "")
        except ReflectRMError as exc:
            return {**unchanged(listing), c["filter_note"]: views.note_markdown(f"error: {exc}")}
        rows = curation.browse(k, filters)
        m, snaps, sources = curation.mix(), curation.snapshots(), judging.sources()
        return dict(zip(listing, [
            views.examples_frame(rows), views.mix_text(m), views.mix_frame(m), views.snapshots_frame(snaps),
            gr.update(choices=[ANY_SOURCE, *sources]),
            gr.update(choices=[NO_SNAPSHOT, *(s.name for s in snaps)]),
            [example_detail(r) for r in rows], gr.update(choices=sources), f"{len(rows)} {k} example(s) shown", ""]))

    return list_examples


def _wire_listing(c: dict[str, Any], tab: Any, list_examples: Any) -> None:
    """Show (and a new kind, and opening the tab) lists the examples; a selected row is shown whole."""

    def select_row(current_ids, rows, evt: gr.SelectData):
        k = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
        if not rows or k is None or k >= len(rows):
            return unchanged([c["ids"], c["detail"]])
        merged = list(dict.fromkeys([*_ids_or_empty(current_ids), rows[k]["id"]]))
        return ", ".join(map(str, merged)), rows[k]

    for trigger in (c["show"].click, c["kind"].change, tab.select):
        trigger(list_examples, _filters(c), _listing(c), api_visibility="private")
    c["table"].select(select_row, [c["ids"], c["rows"]], [c["ids"], c["detail"]], api_visibility="private")


def _wire_changes(curation: Any, c: dict[str, Any], list_examples: Any) -> None:
    """Exclude, restore, the paper's examples from a labelled data set, snapshot, export."""
    listing, status, ids, snapshots, export = _listing(c), c["status"], c["ids"], c["snapshots"], c["export"]
    ids_note = c["ids_note"]
    filter_inputs = _filters(c)

    def change_state(excluded: bool):
        def handler(k, text, *filters):
            try:
                changed = curation.set_excluded(k, parse_ids(text), excluded=excluded)
            except ReflectRMError as exc:
                return {**unchanged([*listing, ids]), ids_note: views.note_markdown(f"error: {exc}")}
            note = f"{'excluded' if excluded else 'restored'} {changed} {k} example(s)"
            return {**list_examples(k, *filters), status: note, ids: "", ids_note: ""}

        return handler

    def take_snapshot(name, text, *filters):
        try:
            snap = curation.snapshot(name, note=text or "")
        except ReflectRMError as exc:
            return {**unchanged(listing), status: f"error: {exc}"}
        note = (f"snapshot {snap.name!r}: {snap.num_preference} preference, {snap.num_reflection} reflection "
                f"(hash {snap.content_hash[:16]})")
        return {**list_examples(*filters), status: note}

    def add_from_labels(data_set, *filters):
        try:
            report = curation.derive_from_labels(data_set or "")
        except ReflectRMError as exc:
            return {**unchanged(listing), status: f"error: {exc}"}
        return {**list_examples(*filters), status: views.labelled_derivation_text(data_set, report)}

    def export_file(k, fmt, snap, inactive):
        try:
            path = curation.export(k, fmt=fmt, snapshot=snap or "", include_inactive=bool(inactive))
        except ReflectRMError as exc:
            return None, f"error: {exc}"
        return str(path), f"exported {k} as {fmt}"

    c["exclude"].click(change_state(True), [c["kind"], ids, *filter_inputs[1:]], [*listing, ids, ids_note],
                       api_visibility="private")
    c["restore"].click(change_state(False), [c["kind"], ids, *filter_inputs[1:]], [*listing, ids, ids_note],
                       api_visibility="private")
    # Enter in the name field snapshots too: a keyboard user need not Tab on to the button
    for trigger in (snapshots["button"].click, snapshots["name"].submit):
        trigger(take_snapshot, [snapshots["name"], snapshots["note"], *filter_inputs], listing,
                api_visibility="private")
    c["from_labels"].click(add_from_labels, [c["labelled"], *filter_inputs], listing, api_visibility="private")
    export["button"].click(export_file, [export["kind"], export["format"], export["snapshot"], export["inactive"]],
                           [export["file"], status], api_visibility="private")


def _snapshot_and_export_widgets() -> tuple[dict[str, Any], dict[str, Any]]:
    with gr.Row():
        with gr.Column():
            snapshots = {"name": gr.Textbox(label="Snapshot name", elem_id="curate-snap-name"),
                         "note": gr.Textbox(label="Snapshot note"),
                         "button": gr.Button("Snapshot the active examples", elem_id="curate-snapshot"),
                         **_rule_widgets(),
                         "table": gr.Dataframe(label="Snapshots", interactive=False, elem_id="curate-snapshots")}
        with gr.Column():
            export = {
                "kind": gr.Dropdown(["training", "preference-examples", "reflection-pairs", "corrections",
                                     "judgments", "pairs"], value="training", label="Export",
                                    elem_id="curate-export-kind"),
                "format": gr.Dropdown(["jsonl", "parquet", "hf"], value="jsonl",
                                      label="Format (hf: a zipped dataset)"),
                "snapshot": gr.Dropdown(label="From snapshot (optional)", choices=[NO_SNAPSHOT], value="",
                                        allow_custom_value=True, elem_id="curate-export-snapshot"),
                "inactive": gr.Checkbox(label="Include excluded and withdrawn"),
                "button": gr.Button("Export", elem_id="curate-export"),
                "file": gr.File(label="Download", interactive=False, elem_id="curate-file"),
            }
    return snapshots, export


def _rule_widgets() -> dict[str, Any]:
    """A snapshot from review rounds' labels only: agreed, adjudicated, or both, with a least per-item agreement."""
    with gr.Row():
        widgets = {
            "labels": gr.Dropdown(list(LABEL_RULES), value="agreed-or-adjudicated", label="Round labels",
                                  elem_id="curate-rule-labels"),
            "min": gr.Number(value=0, minimum=0, maximum=1, label="Least per-item agreement (0 to 1)",
                             elem_id="curate-rule-min"),
            "round": gr.Textbox(label="Only this round (blank: every round)", elem_id="curate-rule-round"),
        }
    widgets["rule_button"] = gr.Button("Snapshot round labels only", elem_id="curate-snapshot-rule")
    return widgets


def _wire_rule_snapshot(rounds: Any, c: dict[str, Any], list_examples: Any) -> None:
    """Snapshot by rule: the examples of the round labels the rule takes; the snapshot records its rule."""
    listing, snapshots = _listing(c), c["snapshots"]

    def take_rule_snapshot(name, text, labels, least, only, *filters):
        try:
            rule = SnapshotRule(labels=labels or "", min_agreement=float(least or 0),
                                round=(only or "").strip() or None)
            snap = rounds.snapshot(name or "", rule=rule, note=text or "")
        except ReflectRMError as exc:
            return {**unchanged(listing), c["status"]: f"error: {exc}"}
        note = (f"snapshot {snap.name!r} of {round_views.rule_text(snap.rule)}: {snap.num_preference} preference, "
                f"{snap.num_reflection} reflection (hash {snap.content_hash[:16]})")
        return {**list_examples(*filters), c["status"]: note}

    fields = [snapshots[k] for k in ("name", "note", "labels", "min", "round")]
    snapshots["rule_button"].click(take_rule_snapshot, [*fields, *_filters(c)], listing, api_visibility="private")


def _ids_or_empty(text: str) -> list[int]:
    try:
        return parse_ids(text or "")
    except ReflectRMError:
        return []


def example_detail(row: ExampleRow) -> dict[str, Any]:
    return {"id": row.id, "kind": row.kind, "state": row.state, "source": row.source, "subset": row.subset,
            "query": row.query, "response_1": row.response_1, "response_2": row.response_2,
            "trains_toward": views.trains_toward(row), "known_label": row.known_label,
            "judge_verdict": row.judge_verdict, "person_verdict": row.human_verdict,
            "contested": row.contested or None, "critique_1": row.critique_1, "critique_2": row.critique_2,
            "judgment_id": row.judgment_id, "correction_id": row.correction_id}


TAB = TabSpec(label="Curate", id="curate", build=build)
