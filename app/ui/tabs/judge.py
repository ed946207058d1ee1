"""The Judge tab: judge a pair (typed, or picked from a data set), see its anatomy, re-aggregate it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gradio as gr

from reflectrm_app.ui import views
from reflectrm_app.records import JudgeResult
from reflectrm_app.ui.forms import build_pair, judgment_number
from reflectrm_app.ui.tabs.common import (
    LABEL_NAMES,
    LABELS,
    failure_text,
    TabSpec,
    Workbench,
    progress_reporter,
    run_cancellable,
    session_key,
    source_choices,
    unchanged,
)
from reflectrm.core.strategies import STRATEGIES
from reflectrm.errors import ReflectRMError

STRATEGY_NAMES = tuple(STRATEGIES)


@dataclass
class JudgeView:
    """The Judge tab's components other tabs open judgments into or start work from."""

    form: list[Any] = field(default_factory=list)  # query, messages, r1, r2, label
    outputs: list[Any] = field(default_factory=list)  # status, verdict, id, switch, html, plot, json
    base: Any = None  # gr.State: the data-set pair the form was filled from
    run_inputs: list[Any] = field(default_factory=list)  # form + strategy, seed, base
    events: list[Any] = field(default_factory=list)  # what Stop cancels
    source: Any = None
    audit_button: Any = None
    stop_button: Any = None

    @property
    def status(self) -> Any:
        return self.outputs[0]


def result_outputs(result: JudgeResult, status: str) -> list[Any]:
    """Values for `JudgeView.outputs` showing one judgment."""
    j = result.judgment
    return [status, views.verdict_line(j), f"#{result.judgment_id}", gr.update(value=j.strategy),
            views.anatomy_html(result), views.confidence_frame(j), j.to_dict()]


def cleared_outputs(status: str) -> list[Any]:
    """Values for `JudgeView.outputs` after an error or Stop: nothing stale stays under the new inputs."""
    return [status, "", "", gr.update(value=None), "", None, None]  # no plot: see `build` on why not an empty one


def opened_outputs(services: Any, judgment_id: int) -> list[Any]:
    """`JudgeView.outputs`, then the form's values and the base pair, for a stored judgment (as recorded)."""
    stored = services.judging.open(judgment_id)
    result = JudgeResult(judgment_id=stored.id, judgment=stored.judgment)
    return [*result_outputs(result, f"opened judgment #{stored.id} as recorded"),
            *form_values(stored.judgment.pair), stored.judgment.pair.to_dict()]


def form_values(pair: Any) -> list[Any]:
    fields = views.pair_fields(pair)
    return [fields["query"], fields["messages"], fields["response_1"], fields["response_2"], LABEL_NAMES[pair.label]]


def build(wb: Workbench, tab: Any) -> JudgeView:
    view = JudgeView()
    settings, example_rows = wb.services.runtime.settings, wb.services.judging.judge_examples()
    with gr.Row():
        with gr.Column(scale=3):
            query = gr.Textbox(label="Query", lines=2, elem_id="judge-query",
                               placeholder=example_rows[0][0] if example_rows else "What is 17 + 8?")
            messages = gr.Textbox(label="Or a multi-turn conversation (a JSON list of turns; overrides the query)",
                                  lines=1, max_lines=12, elem_id="judge-messages",
                                  placeholder='[{"role": "user", "content": "hi"}, {"role": "assistant", '
                                              '"content": "hello"}, {"role": "user", "content": "2+2?"}]')
            with gr.Row():
                r1 = gr.Textbox(label="Response 1", lines=3, elem_id="judge-r1")
                r2 = gr.Textbox(label="Response 2", lines=3, elem_id="judge-r2")
            examples = _examples(example_rows, [query, r1, r2])
        with gr.Column(scale=2):
            picker = _picker()
            label = gr.Radio(list(LABELS), value="unknown", label="Known better response", elem_id="judge-label")
            with gr.Row():
                strategy = gr.Dropdown(list(STRATEGY_NAMES), value=settings.judge.strategy, label="Strategy")
                seed = gr.Number(value=settings.judge.seed, precision=0, label="Seed")
            with gr.Row():
                run = gr.Button("Judge", variant="primary", elem_id="judge-run")
                view.audit_button = gr.Button("Audit both orders", elem_id="judge-audit")
                view.stop_button = gr.Button("Stop", variant="stop", elem_id="judge-stop")
    status = gr.Textbox(label="Status", interactive=False, elem_id="judge-status")
    with gr.Row():
        verdict = gr.Textbox(label="Final verdict", interactive=False, scale=3, elem_id="judge-verdict")
        judgment_id = gr.Textbox("", label="Judgment", interactive=False, scale=1, elem_id="judge-id")
    switch = gr.Radio(list(STRATEGY_NAMES), label="Re-aggregate the same rollouts with another strategy",
                      elem_id="judge-switch")
    anatomy = gr.HTML(elem_id="judge-anatomy", js_on_load=None)
    # no initial (empty) frame: the chart drawn from one kept its empty colour scale when the first judgment
    # arrived (bars with no fill, an empty legend) until the tab was left and shown again
    plot = gr.BarPlot(None, x="sample", y="shown", color="role",
                      title="Confidence per analysis (Eq. 5), as the cards show it",
                      y_title="bar on the card (%)", y_lim=[0, 100], height=300,
                      color_map=dict(views.ROLE_COLOURS), elem_id="judge-plot")
    with gr.Accordion("Raw judgment (JSON)", open=False):
        raw = gr.JSON(elem_id="judge-json")
    view.base = gr.State(None)
    view.form = [query, messages, r1, r2, label]
    view.outputs = [status, verdict, judgment_id, switch, anatomy, plot, raw]
    view.run_inputs = [query, messages, r1, r2, label, strategy, seed, view.base]
    view.source = picker["source"]
    _wire_judging(wb, view, run, switch)
    _wire_picker(wb, view, picker)
    if examples is not None:
        _wire_examples(view, examples, example_rows)
    return view


def _examples(rows: tuple[tuple[str, str, str], ...], shown_as: list[Any]) -> Any:
    """A table of the demo judge's example pairs (None when the judge offers none: a user's own model)."""
    if not rows:
        return None
    return gr.Dataset(components=shown_as, samples=[list(r) for r in rows], type="index",
                      headers=["Query", "Response 1", "Response 2"],
                      label="Examples for this demo judge: click one to fill the form, then press Judge",
                      elem_id="judge-examples")


def example_values(rows: tuple[tuple[str, str, str], ...], index: int | None) -> list[Any] | None:
    """The form's values, the base pair and a status for example `index` (None: no such example)."""
    if index is None or not 0 <= index < len(rows):
        return None
    q, a, b = rows[index]
    return [q, "", a, b, "unknown", None, f"example {index + 1} filled in: press Judge to judge it"]


def _wire_examples(view: JudgeView, examples: Any, rows: tuple[tuple[str, str, str], ...]) -> None:
    """Clicking an example fills the form (the conversation box emptied, the label unknown); it judges nothing."""
    outputs = [*view.form, view.base, view.status]

    def fill(index):
        return example_values(rows, index) or unchanged(outputs)

    examples.click(fill, examples, outputs, api_visibility="private")


def _picker() -> dict[str, Any]:
    with gr.Accordion("Pick a pair from a data set", open=True):
        source = gr.Dropdown(label="Data set", choices=[], allow_custom_value=False, elem_id="judge-source")
        pick = gr.Dropdown(label="Pair", choices=[], elem_id="judge-pick")
        with gr.Row():
            refresh = gr.Button("Refresh data sets", size="sm")
            demo_pairs = gr.Button("Add 30 demo pairs", size="sm", elem_id="judge-demo-pairs")
        with gr.Accordion("Import a data set", open=False):
            upload = gr.File(label="Pairs file (.jsonl, .csv, .parquet)", file_types=[".jsonl", ".csv", ".parquet"],
                             height=120, elem_id="judge-upload")
    return {"source": source, "pick": pick, "refresh": refresh, "demo_pairs": demo_pairs, "upload": upload}


def _wire_judging(wb: Workbench, view: JudgeView, run: Any, switch: Any) -> None:
    services = wb.services

    def judge(q, msgs, a, b, lab, strat, sd, base_pair, request: gr.Request, progress=gr.Progress()):
        try:
            pair = build_pair(query=q or "", messages=msgs or "", response_1=a or "", response_2=b or "",
                              label=LABELS[lab or "unknown"], base=base_pair)
            report = progress_reporter(progress)
            result = run_cancellable(services, session_key(request, "judge"), lambda cancel: services.judging.judge(
                pair, strategy=strat, seed=sd, cancel=cancel, progress=report))
        except ReflectRMError as exc:
            gr.Warning(failure_text(exc), title="Not judged")  # a toast: the status box may be below the fold
            return cleared_outputs(failure_text(exc))
        t = result.judgment.timings
        note = f"judged and recorded as #{result.judgment_id} in {t.get('stage1_s', 0) + t.get('stage2_s', 0):.1f}s"
        return result_outputs(result, note)

    def reaggregate(shown_id, strat, request: gr.Request):
        try:
            jid = judgment_number(shown_id)
            if jid is None or not strat:
                return {**unchanged(view.outputs), view.status: "judge a pair first, then pick a strategy"}
            result = run_cancellable(services, session_key(request, "judge"),
                                     lambda cancel: services.judging.reaggregate(jid, strat, cancel=cancel))
        except ReflectRMError as exc:
            return cleared_outputs(failure_text(exc))
        return result_outputs(result, f"strategy {strat} over judgment #{jid}")

    # one progress display per action (on the status line), not an overlay over each of the seven outputs
    run_event = run.click(judge, view.run_inputs, view.outputs, api_visibility="private", concurrency_limit=4,
                          show_progress_on=view.status)
    switch_event = switch.input(reaggregate, [view.outputs[2], switch], view.outputs, api_visibility="private")
    view.events = [run_event, switch_event]


def _wire_picker(wb: Workbench, view: JudgeView, picker: dict[str, Any]) -> None:
    """The data-set picker: list sources, list a source's pairs, fill the form from one, import files."""
    services, status, source, pick = wb.services, view.status, picker["source"], picker["pick"]
    fill_outputs = [*view.form, view.base, status]

    def pairs_of(name):
        rows = services.judging.pairs(name) if name else []
        return gr.update(choices=[(f"{pid}: {views.short(p.query, 70)}", pid) for pid, p in rows], value=None)

    def fill(name, pair_id):
        found = dict(services.judging.pairs(name)) if name and pair_id is not None else {}
        if pair_id not in found:  # the dropdown closed without a choice (Esc): leave the form alone
            return unchanged(fill_outputs)
        p = found[pair_id]
        return [*form_values(p), p.to_dict(), f"loaded pair {p.id}"]

    def add_demo():
        try:
            report, name = services.judging.add_demo_pairs(30), services.judging.demo_source()
        except ReflectRMError as exc:
            return f"no demo pairs: {exc}", gr.update()
        return (f"demo pairs ({name}): {report.added} added, {report.already_present} already present",
                source_choices(services, current=name))

    def import_file(path):
        if not path:
            return unchanged([status, source])
        try:
            report = services.judging.import_file(path)
        except ReflectRMError as exc:
            return f"import failed: {exc}", gr.update()
        # rows without a source get the file's stem (the store's rule): show that data set
        return (f"imported: {report.added} added, {report.already_present} already present",
                source_choices(services, current=Path(path).stem))

    picker["refresh"].click(lambda current: source_choices(services, current=current or ""), [source], source,
                            api_visibility="private")
    source.change(pairs_of, source, pick, api_visibility="private")
    pick.input(fill, [source, pick], fill_outputs, api_visibility="private")
    picker["demo_pairs"].click(add_demo, None, [status, source], api_visibility="private")
    picker["upload"].upload(import_file, picker["upload"], [status, source], api_visibility="private")


TAB = TabSpec(label="Judge", id="judge", build=build)
