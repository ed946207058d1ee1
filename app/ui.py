"""The Gradio Blocks: one private builder per tab; handlers are a few lines over `AppServices`.

No module-level mutable state: per-user state lives in `gr.State`, shared resources in the one
`AppServices` object. Model and user text is shown in Textboxes, Dataframes and JSON (as text) or
escaped into `gr.HTML` by `app.views`; errors are shown in status boxes as text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import gradio as gr

from app import views
from app.tabs import evaluate as evaluate_tab
from app.records import ExampleFilter, JudgeResult, ReviewItem, TrainRequest
from app.services import AppServices, build_pair, parse_day, parse_ids, parse_marks
from reflectrm.core.strategies import STRATEGIES
from reflectrm.errors import InputError, ReflectRMError

LABELS = MappingProxyType({"unknown": None, "Response 1": 1, "Response 2": 2})  # read-only
STRATEGY_NAMES = tuple(STRATEGIES)

CSS = """
.rr-anatomy { font-size: 14px; }
.rr-summary { display: grid; grid-template-columns: max-content 1fr; gap: 4px 12px; padding: 10px;
  border-radius: 8px; border: 1px solid var(--border-color-primary); margin-bottom: 10px; }
.rr-summary .rr-key { font-weight: 600; }
.rr-verdict-1 .rr-val[data-field="final verdict"], .rr-verdict-2 .rr-val[data-field="final verdict"] { font-weight: 700; }
.rr-cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(230px, 1fr)); gap: 8px; }
.rr-card { border: 1px solid var(--border-color-primary); border-radius: 8px; padding: 8px; }
.rr-card.rr-anchor { border: 3px solid #e8590c; background: rgba(232, 89, 12, 0.07); }
.rr-card.rr-winner { border: 2px solid #2f9e44; }
.rr-card.rr-unparseable { border-style: dashed; opacity: 0.75; }
.rr-badge { font-size: 11px; padding: 1px 6px; border-radius: 10px; color: white; margin-left: 4px; }
.rr-badge-anchor { background: #e8590c; } .rr-badge-winner { background: #2f9e44; } .rr-badge-bad { background: #868e96; }
.rr-bar { height: 8px; background: var(--background-fill-secondary); border-radius: 4px; margin: 2px 0 4px; }
.rr-fill { height: 8px; background: #1c7ed6; border-radius: 4px; }
.rr-anchor .rr-fill { background: #e8590c; }
.rr-text { white-space: pre-wrap; word-break: break-word; margin: 4px 0; }
.rr-meta { font-size: 12px; opacity: 0.8; }
.rr-raw { white-space: pre-wrap; word-break: break-word; font-size: 12px; }
.rr-reflections { width: 100%; border-collapse: collapse; margin-top: 6px; }
.rr-reflections td, .rr-reflections th { border-bottom: 1px solid var(--border-color-primary); padding: 4px; text-align: left; vertical-align: top; }
.rr-title { margin: 8px 0 4px; }
"""

# Review-queue keys. Ignored while typing in a text field (Esc leaves it); active only while the Review tab is visible.
KEYBOARD_JS = """
<script>
(() => {
  const keys = {"1": "review-r1", "2": "review-r2", "s": "review-skip", "n": "review-next"};
  const typing = (t) => {
    if (!t) return false;
    const tag = (t.tagName || "").toLowerCase();
    if (tag === "textarea" || tag === "select" || t.isContentEditable) return true;
    return tag === "input" && !["checkbox", "radio", "button", "submit"].includes((t.type || "").toLowerCase());
  };
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && typing(e.target)) { e.target.blur(); return; }  // Esc: back to the shortcuts
    if (e.ctrlKey || e.metaKey || e.altKey || e.repeat || typing(e.target)) return;
    const id = keys[(e.key || "").toLowerCase()];
    const button = id && document.getElementById(id);
    if (!button || button.offsetParent === null || button.disabled) return;
    e.preventDefault();
    button.click();
  });
})();
</script>
"""


def _session(request: gr.Request | None) -> str:
    return getattr(request, "session_hash", None) or "anonymous"


def _progress_adapter(progress: gr.Progress) -> Callable[[float | None, str], None]:
    def report(fraction: float | None, desc: str) -> None:
        if fraction is None:
            fraction = 0.5 if desc.startswith("stage 2") else 0.05
        progress(fraction, desc=desc)

    return report


def _run_cancellable(services: AppServices, key: str, work: Callable[[Any], Any]) -> Any:
    """Run `work(cancel_event)` under a cancel token the Stop button can set."""
    event = services.cancels.start(key)
    try:
        return work(event)
    finally:
        services.cancels.finish(key, event)


# --- Judge ----------------------------------------------------------------------------------------------------


@dataclass
class _JudgeView:
    """The Judge tab's components other tabs open judgments into."""

    form: list[Any] = field(default_factory=list)  # query, messages, r1, r2, label
    outputs: list[Any] = field(default_factory=list)  # status, verdict, id, switch, html, plot, json
    base: Any = None  # gr.State: the data-set pair the form was filled from
    run_inputs: list[Any] = field(default_factory=list)  # form + strategy, seed, base
    events: list[Any] = field(default_factory=list)  # what Stop cancels
    source: Any = None
    audit_button: Any = None
    stop_button: Any = None
    stop_fn: Callable[..., str] | None = None


def _judge_outputs(result: JudgeResult, status: str) -> list[Any]:
    j = result.judgment
    return [status, views.verdict_line(j), result.judgment_id, gr.update(value=j.strategy),
            views.anatomy_html(result), views.confidence_frame(j), j.to_dict()]


def _open_outputs(services: AppServices, judgment_id: Any) -> list[Any]:
    """Judge-tab outputs plus form values for a stored judgment (as recorded)."""
    stored = services.open(int(judgment_id))
    result = JudgeResult(judgment_id=stored.id, judgment=stored.judgment)
    fields = views.pair_fields(stored.judgment.pair)
    label = {None: "unknown", 1: "Response 1", 2: "Response 2"}[stored.judgment.pair.label]
    form = [fields["query"], fields["messages"], fields["response_1"], fields["response_2"], label]
    return [*_judge_outputs(result, f"opened judgment #{stored.id} as recorded"), *form, stored.judgment.pair.to_dict()]


def _judge_tab(services: AppServices) -> _JudgeView:
    view = _JudgeView()
    settings = services.settings
    with gr.Row():
        with gr.Column(scale=3):
            query = gr.Textbox(label="Query", lines=2, placeholder="What is 17 + 8?", elem_id="judge-query")
            messages = gr.Textbox(label="Or a multi-turn conversation (a JSON list of turns; overrides the query)",
                                  lines=1, max_lines=12, elem_id="judge-messages",
                                  placeholder='[{"role": "user", "content": "hi"}, {"role": "assistant", '
                                              '"content": "hello"}, {"role": "user", "content": "2+2?"}]')
            with gr.Row():
                r1 = gr.Textbox(label="Response 1", lines=3, elem_id="judge-r1")
                r2 = gr.Textbox(label="Response 2", lines=3, elem_id="judge-r2")
        with gr.Column(scale=2):
            with gr.Accordion("Pick a pair from a data set", open=True):
                source = gr.Dropdown(label="Data set", choices=[], allow_custom_value=False, elem_id="judge-source")
                pick = gr.Dropdown(label="Pair", choices=[], elem_id="judge-pick")
                with gr.Row():
                    refresh = gr.Button("Refresh data sets", size="sm")
                    demo_pairs = gr.Button("Add 30 demo pairs", size="sm", elem_id="judge-demo-pairs")
                with gr.Accordion("Import a data set", open=False):
                    upload = gr.File(label="Pairs file (.jsonl, .csv, .parquet)", file_types=[".jsonl", ".csv", ".parquet"],
                                     height=120, elem_id="judge-upload")
            label = gr.Radio(list(LABELS), value="unknown", label="Known better response", elem_id="judge-label")
            with gr.Row():
                strategy = gr.Dropdown(list(STRATEGY_NAMES), value=settings.strategy, label="Strategy")
                seed = gr.Number(value=settings.seed, precision=0, label="Seed")
            with gr.Row():
                run = gr.Button("Judge", variant="primary", elem_id="judge-run")
                audit = gr.Button("Audit both orders", elem_id="judge-audit")
                stop = gr.Button("Stop", variant="stop", elem_id="judge-stop")
    status = gr.Textbox(label="Status", interactive=False, elem_id="judge-status")
    with gr.Row():
        verdict = gr.Textbox(label="Final verdict", interactive=False, scale=3, elem_id="judge-verdict")
        judgment_id = gr.Number(None, label="Judgment #", precision=0, interactive=False, scale=1, elem_id="judge-id")
    switch = gr.Radio(list(STRATEGY_NAMES), label="Re-aggregate the same rollouts with another strategy",
                      elem_id="judge-switch")
    anatomy = gr.HTML(elem_id="judge-anatomy", js_on_load=None)
    plot = gr.BarPlot(x="sample", y="confidence", color="role", title="Confidence per analysis (Eq. 5)",
                      y_title="confidence (mean log-prob of the lowest 10% tokens)", height=260,
                      color_map={"anchor": "#e8590c", "winner": "#2f9e44", "sample": "#1c7ed6",
                                 "unparseable": "#868e96"}, elem_id="judge-plot")
    with gr.Accordion("Raw judgment (JSON)", open=False):
        raw = gr.JSON(elem_id="judge-json")
    base = gr.State(None)

    view.form = [query, messages, r1, r2, label]
    view.outputs = [status, verdict, judgment_id, switch, anatomy, plot, raw]
    view.base = base
    view.run_inputs = [query, messages, r1, r2, label, strategy, seed, base]

    def judge(q, msgs, a, b, lab, strat, sd, base_pair, request: gr.Request, progress=gr.Progress()):
        try:
            pair = build_pair(query=q or "", messages=msgs or "", response_1=a or "", response_2=b or "",
                              label=LABELS[lab or "unknown"], base=base_pair)
            result = _run_cancellable(services, f"{_session(request)}:judge", lambda cancel: services.judge(
                pair, strategy=strat, seed=sd, cancel=cancel, progress=_progress_adapter(progress)))
        except ReflectRMError as exc:
            return {status: f"error: {exc}"}
        t = result.judgment.timings
        note = f"judged and recorded as #{result.judgment_id} in {t.get('stage1_s', 0) + t.get('stage2_s', 0):.1f}s"
        return dict(zip(view.outputs, _judge_outputs(result, note)))

    def reaggregate(jid, strat, request: gr.Request):
        if not jid or not strat:
            return {status: "judge a pair first"}
        try:
            result = _run_cancellable(services, f"{_session(request)}:judge",
                                      lambda cancel: services.reaggregate(int(jid), strat, cancel=cancel))
        except ReflectRMError as exc:
            return {status: f"error: {exc}"}
        outs = dict(zip(view.outputs, _judge_outputs(result, f"strategy {strat} over judgment #{jid}")))
        outs.pop(switch)
        return outs

    def stop_work(request: gr.Request):
        stopped = services.cancels.cancel(f"{_session(request)}:judge")
        return "stopped" if stopped else "nothing is running"

    run_event = run.click(judge, view.run_inputs, view.outputs, api_visibility="private", concurrency_limit=4)
    switch_event = switch.input(reaggregate, [judgment_id, switch], view.outputs, api_visibility="private")
    view.events = [run_event, switch_event]
    view.source, view.audit_button, view.stop_button, view.stop_fn = source, audit, stop, stop_work
    _data_set_events(services, source=source, pick=pick, refresh=refresh, demo_pairs=demo_pairs, upload=upload,
                     status=status, form=view.form, base=base)
    return view


def _data_set_events(services: AppServices, *, source, pick, refresh, demo_pairs, upload, status, form, base) -> None:
    """The data-set picker: list sources, list a source's pairs, fill the form from one, import files."""

    def sources(selected: str | None = None):
        names = services.sources()
        return gr.update(choices=names, value=selected if selected in names else (names[0] if names else None))

    def pairs_of(name):
        rows = services.pairs(name) if name else []
        choices = [(f"{pid}: {views._short(p.query, 70)}", pid) for pid, p in rows]
        return gr.update(choices=choices, value=None)

    def fill(name, pair_id):
        found = dict(services.pairs(name)) if name and pair_id is not None else {}
        if pair_id not in found:
            return {}
        p = found[pair_id]
        fields = views.pair_fields(p)
        label = {None: "unknown", 1: "Response 1", 2: "Response 2"}[p.label]
        return dict(zip([*form, base, status], [fields["query"], fields["messages"], fields["response_1"],
                                                fields["response_2"], label, p.to_dict(), f"loaded pair {p.id}"]))

    def add_demo():
        report = services.add_demo_pairs(30)
        return {status: f"demo pairs: {report.added} added, {report.already_present} already present",
                source: sources("demo-arith")}

    def import_file(path):
        if not path:
            return {}
        try:
            report = services.import_file(path)
        except ReflectRMError as exc:
            return {status: f"import failed: {exc}"}
        # rows without a source get the file's stem (the store's rule): show that data set
        return {status: f"imported: {report.added} added, {report.already_present} already present",
                source: sources(Path(path).stem)}

    refresh.click(sources, [source], source, api_visibility="private")
    source.change(pairs_of, source, pick, api_visibility="private")
    pick.input(fill, [source, pick], [*form, base, status], api_visibility="private")
    demo_pairs.click(add_demo, None, [status, source], api_visibility="private")
    upload.upload(import_file, upload, [status, source], api_visibility="private")


# --- Audit ----------------------------------------------------------------------------------------------------


@dataclass
class _AuditView:
    banner: Any = None
    left: Any = None
    right: Any = None
    ids: Any = None
    flipped: Any = None
    source: Any = None


def _audit_tab(services: AppServices, tab: gr.Tab) -> _AuditView:
    view = _AuditView()
    gr.Markdown("**Both orders of one pair** — use *Audit both orders* in the Judge tab.")
    view.banner = gr.Textbox(label="Positional consistency", interactive=False, elem_id="audit-banner")
    view.ids = gr.Textbox(label="Recorded judgments", interactive=False, elem_id="audit-ids")
    with gr.Row():
        view.left = gr.HTML(elem_id="audit-original", js_on_load=None)
        view.right = gr.HTML(elem_id="audit-swapped", js_on_load=None)
    gr.Markdown("**Batch audit** — both orders of every pair of a data set (or a random sample).")
    with gr.Row():
        source = view.source = gr.Dropdown(label="Data set", choices=[], elem_id="audit-source")
        sample = gr.Number(value=20, precision=0, label="Random sample (0 = all pairs)", elem_id="audit-sample")
        seed = gr.Number(value=0, precision=0, label="Seed")
        refresh = gr.Button("Refresh data sets", size="sm")
    with gr.Row():
        run = gr.Button("Run batch audit", variant="primary", elem_id="audit-run")
        stop = gr.Button("Stop", variant="stop", elem_id="audit-stop")
    status = gr.Textbox(label="Status", interactive=False, elem_id="audit-status")
    empty_table, _, empty_flipped = views.empty_audit_frames()  # the chart starts empty: an empty frame fixes its colours
    table = gr.Dataframe(empty_table, label="Per subset", interactive=False, elem_id="audit-table")
    chart = gr.BarPlot(x="bar", y="value", color="metric", y_lim=[0, 1], x_label_angle=-30, height=300,
                       title="Both-orders accuracy, flip rate, first-position win rate", elem_id="audit-chart")
    view.flipped = gr.Dataframe(empty_flipped, label="Flipped pairs (select a row to open it in Judge)",
                                interactive=False, elem_id="audit-flipped")

    def batch(name, size, sd, request: gr.Request, progress=gr.Progress()):
        try:
            report = _run_cancellable(services, f"{_session(request)}:audit", lambda cancel: services.batch_audit(
                name, sample=int(size or 0), seed=int(sd or 0), cancel=cancel, progress=_progress_adapter(progress)))
        except ReflectRMError as exc:
            return {status: f"error: {exc}"}
        frames = views.audit_frames(report)
        note = f"audited {report.subsets[-1].pairs if report.subsets else 0} pairs of {name} in {report.seconds:.1f}s"
        return dict(zip([status, table, chart, view.flipped], [note, *frames]))

    def stop_batch(request: gr.Request):
        return "stopped" if services.cancels.cancel(f"{_session(request)}:audit") else "nothing is running"

    def sources(current):
        return _source_choices(services, 1, current=current or "")[0]

    refresh.click(sources, source, source, api_visibility="private")
    tab.select(sources, source, source, api_visibility="private")
    event = run.click(batch, [source, sample, seed], [status, table, chart, view.flipped], api_visibility="private",
                      concurrency_limit=2)
    stop.click(stop_batch, None, status, cancels=[event], queue=False, api_visibility="private")
    return view


def _wire_judge_audit(services: AppServices, judge: _JudgeView, audit: _AuditView, tabs: gr.Tabs) -> None:
    """The Judge tab's Audit button fills the Audit tab; Stop cancels either kind of judge work."""

    def both_orders(q, msgs, a, b, lab, strat, sd, base_pair, request: gr.Request, progress=gr.Progress()):
        try:
            pair = build_pair(query=q or "", messages=msgs or "", response_1=a or "", response_2=b or "",
                              label=LABELS[lab or "unknown"], base=base_pair)
            result = _run_cancellable(services, f"{_session(request)}:judge", lambda cancel: services.audit(
                pair, seed=sd, cancel=cancel, progress=_progress_adapter(progress)))
        except ReflectRMError as exc:
            return {judge.outputs[0]: f"error: {exc}"}
        return {
            judge.outputs[0]: f"audited: judgments #{result.original.judgment_id} and #{result.swapped.judgment_id}",
            audit.banner: views.audit_banner(result),
            audit.ids: f"original #{result.original.judgment_id} · swapped #{result.swapped.judgment_id}",
            audit.left: views.anatomy_html(result.original, title="Original order"),
            audit.right: views.anatomy_html(result.swapped, title="Swapped order (Response 1 and 2 exchanged)"),
            tabs: gr.Tabs(selected="audit"),
            audit.source: _source_choices(services, 1, current=pair.source)[0],
        }

    outs = [judge.outputs[0], audit.banner, audit.ids, audit.left, audit.right, tabs, audit.source]
    event = judge.audit_button.click(both_orders, judge.run_inputs, outs, api_visibility="private",
                                     concurrency_limit=4)
    judge.stop_button.click(judge.stop_fn, None, judge.outputs[0], cancels=[*judge.events, event],
                            queue=False, api_visibility="private")

    open_outs = [*judge.outputs, *judge.form, judge.base, tabs]

    def open_flipped(evt: gr.SelectData):
        try:
            row = evt.row_value
            values = _open_outputs(services, int(row[0]))
        except (ReflectRMError, TypeError, ValueError, IndexError) as exc:
            return {judge.outputs[0]: f"error: {exc}"}
        return dict(zip(open_outs, [*values, gr.Tabs(selected="judge")]))

    audit.flipped.select(open_flipped, None, open_outs, api_visibility="private")


# --- Review ---------------------------------------------------------------------------------------------------


def _review_tab(services: AppServices, tab: gr.Tab) -> None:
    with gr.Row():
        reviewer = gr.Textbox(label="Your name (recorded with corrections)", value="", scale=2, elem_id="review-author")
        source = gr.Textbox(label="Only this data set (optional)", scale=2, elem_id="review-source")
        jump = gr.Number(None, label="Open judgment #", precision=0, scale=1, elem_id="review-jump")
        open_btn = gr.Button("Open", scale=1, elem_id="review-open")
    header = gr.Textbox(label="Item", interactive=False, lines=2, elem_id="review-header")
    current = gr.Number(label="Judgment under review", precision=0, interactive=False, visible=False,
                        elem_id="review-current")
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
        skip = gr.Button("Skip  [s]", elem_id="review-skip")
        nxt = gr.Button("Next  [n]", elem_id="review-next")
    status = gr.Textbox(label="Saved", interactive=False, elem_id="review-status")
    with gr.Accordion("Full anatomy", open=False):
        anatomy = gr.HTML(elem_id="review-anatomy", js_on_load=None)
    skipped = gr.State([])

    shown = [header, current, query, r1, r2, analyses, right, wrong, note, anatomy, status]

    def show(item: ReviewItem | None):
        if item is None:
            return dict(zip(shown, ["The queue is empty: nothing left to review.", None, "", "", "", None,
                                    gr.update(choices=[], value=[]), gr.update(choices=[], value=[]), "", "", ""]))
        j = item.stored.judgment
        choices = [(f"#{k} ({'R' + str(r.prediction) if r.prediction else 'unparseable'})", k)
                   for k, r in enumerate(j.rollouts)]
        marks = item.correction.marks if item.correction else {}
        return dict(zip(shown, [
            views.review_header(item), item.stored.id, j.pair.query, j.pair.response_1, j.pair.response_2,
            views.analyses_frame(j),
            gr.update(choices=choices, value=[k for k, v in marks.items() if v == "right"]),
            gr.update(choices=choices, value=[k for k, v in marks.items() if v == "wrong"]),
            item.correction.note if item.correction else "",
            views.anatomy_html(JudgeResult(judgment_id=item.stored.id, judgment=j)), "",
        ]))

    def next_item(skip_ids, src, request: gr.Request):
        return show(services.next_for_review(reviewer=_session(request), skip=skip_ids, source=src or ""))

    def skip_item(cur, skip_ids, src, request: gr.Request):
        skip_ids = [*skip_ids, int(cur)] if cur else skip_ids
        return {**next_item(skip_ids, src, request), skipped: skip_ids}

    def open_item(jid, request: gr.Request):
        try:
            return show(services.review_item(int(jid), reviewer=_session(request)))
        except (ReflectRMError, TypeError, ValueError) as exc:
            return {status: f"error: {exc}"}

    def save(verdict: int):
        def handler(cur, ok, bad, text, name, request: gr.Request):
            if not cur:
                return {status: "nothing to correct: press n (Next) to load an item"}
            try:
                record = services.correct(int(cur), verdict=verdict, author=name or (request.username or ""),
                                          note=text or "", marks=parse_marks(ok or [], bad or []))
            except ReflectRMError as exc:
                return {status: f"error: {exc}"}
            return {status: views.correction_text(record) + "   (press n for the next item)"}

        return handler

    save_inputs = [current, right, wrong, note, reviewer]
    b1.click(save(1), save_inputs, status, api_visibility="private", concurrency_limit=8)
    b2.click(save(2), save_inputs, status, api_visibility="private", concurrency_limit=8)
    nxt.click(next_item, [skipped, source], shown, api_visibility="private", concurrency_limit=8)
    skip.click(skip_item, [current, skipped, source], [*shown, skipped], api_visibility="private", concurrency_limit=8)
    open_btn.click(open_item, jump, shown, api_visibility="private")

    def first_item(cur, skip_ids, src, request: gr.Request):
        return {} if cur else next_item(skip_ids, src, request)

    tab.select(first_item, [current, skipped, source], shown, api_visibility="private")


# --- Curate ---------------------------------------------------------------------------------------------------


def _curate_tab(services: AppServices, tab: gr.Tab) -> None:
    with gr.Row():
        kind = gr.Radio(["preference", "reflection"], value="reflection", label="Examples", elem_id="curate-kind")
        source = gr.Dropdown(label="Source", choices=[""], value="", allow_custom_value=True, elem_id="curate-source")
        states = gr.CheckboxGroup(["active", "excluded", "withdrawn"], value=["active", "excluded"], label="State",
                                  elem_id="curate-states")
        agreement = gr.Dropdown(["any", "agrees", "disagrees"], value="any", label="Person vs judge",
                                elem_id="curate-agreement")
    with gr.Row():
        since = gr.Textbox(label="Since (YYYY-MM-DD)", elem_id="curate-since")
        until = gr.Textbox(label="Until (YYYY-MM-DD)", elem_id="curate-until")
        search = gr.Textbox(label="Search text", elem_id="curate-search")
        show_btn = gr.Button("Show", variant="primary", elem_id="curate-show")
    with gr.Row():
        mix = gr.Textbox(label="Mix", interactive=False, scale=3, elem_id="curate-mix")
        mix_plot = gr.BarPlot(x="mix", y="share", color="kind", y_lim=[0, 1], height=200, scale=2,
                              title="Pref:Refl share, current vs paper", elem_id="curate-mix-plot")
    table = gr.Dataframe(label="Examples (select a row to add its id below)", interactive=False, wrap=True,
                         elem_id="curate-table")
    detail = gr.JSON(label="Selected example", elem_id="curate-detail")
    with gr.Row():
        ids = gr.Textbox(label="Example ids", placeholder="3, 5", elem_id="curate-ids")
        exclude = gr.Button("Exclude", elem_id="curate-exclude")
        restore = gr.Button("Restore", elem_id="curate-restore")
    status = gr.Textbox(label="Status", interactive=False, elem_id="curate-status")
    with gr.Row():
        with gr.Column():
            snap_name = gr.Textbox(label="Snapshot name", elem_id="curate-snap-name")
            snap_note = gr.Textbox(label="Snapshot note")
            snap_btn = gr.Button("Snapshot the active examples", elem_id="curate-snapshot")
            snaps = gr.Dataframe(label="Snapshots", interactive=False, elem_id="curate-snapshots")
        with gr.Column():
            ex_kind = gr.Dropdown(["training", "preference-examples", "reflection-pairs", "corrections", "judgments",
                                   "pairs"], value="training", label="Export")
            ex_fmt = gr.Dropdown(["jsonl", "parquet", "hf"], value="jsonl", label="Format (hf: a zipped dataset)")
            ex_snap = gr.Dropdown(label="From snapshot (optional)", choices=[""], value="", allow_custom_value=True)
            ex_inactive = gr.Checkbox(label="Include excluded and withdrawn")
            ex_btn = gr.Button("Export", elem_id="curate-export")
            ex_file = gr.File(label="Download", interactive=False, elem_id="curate-file")
    rows_state = gr.State([])

    filter_inputs = [kind, source, states, since, until, agreement, search]
    listing = [table, mix, mix_plot, snaps, source, ex_snap, rows_state, status]

    def list_examples(k, src, st, s_from, s_to, agree, text):
        try:
            filters = ExampleFilter(source=src or "", states=tuple(st or ()), since=parse_day(s_from, "since"),
                                    until=parse_day(s_to, "until"), agreement=agree, search=text or "")
        except ReflectRMError as exc:
            return {status: f"error: {exc}"}
        rows = services.browse(k, filters)
        m, snapshots = services.mix(), services.snapshots()
        names = ["", *services.sources()]
        return dict(zip(listing, [
            views.examples_frame(rows), views.mix_text(m), views.mix_frame(m), views.snapshots_frame(snapshots),
            gr.update(choices=names), gr.update(choices=["", *(s.name for s in snapshots)]),
            [_example_detail(r) for r in rows], f"{len(rows)} {k} example(s) shown",
        ]))

    def select_row(current_ids, rows, evt: gr.SelectData):
        k = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
        if not rows or k is None or k >= len(rows):
            return {}
        picked = rows[k]
        merged = list(dict.fromkeys([*_ids_or_empty(current_ids), picked["id"]]))
        return {ids: ", ".join(map(str, merged)), detail: picked}

    def change_state(excluded: bool):
        def handler(k, text, *filters):
            try:
                changed = services.set_excluded(k, parse_ids(text), excluded=excluded)
            except ReflectRMError as exc:
                return {status: f"error: {exc}"}
            out = list_examples(k, *filters)
            out[status] = f"{'excluded' if excluded else 'restored'} {changed} {k} example(s)"
            out[ids] = ""
            return out

        return handler

    def take_snapshot(name, text, *filters):
        try:
            snap = services.snapshot(name, note=text or "")
        except ReflectRMError as exc:
            return {status: f"error: {exc}"}
        out = list_examples(*filters)
        out[status] = (f"snapshot {snap.name!r}: {snap.num_preference} preference, {snap.num_reflection} reflection "
                       f"(hash {snap.content_hash[:16]})")
        return out

    def export(k, fmt, snap, inactive):
        try:
            path = services.export(k, fmt=fmt, snapshot=snap or "", include_inactive=bool(inactive))
        except ReflectRMError as exc:
            return {status: f"error: {exc}"}
        return {ex_file: str(path), status: f"exported {k} as {fmt}"}

    for trigger in (show_btn.click, kind.change, tab.select):
        trigger(list_examples, filter_inputs, listing, api_visibility="private")
    table.select(select_row, [ids, rows_state], [ids, detail], api_visibility="private")
    exclude.click(change_state(True), [kind, ids, *filter_inputs[1:]], [*listing, ids], api_visibility="private")
    restore.click(change_state(False), [kind, ids, *filter_inputs[1:]], [*listing, ids], api_visibility="private")
    snap_btn.click(take_snapshot, [snap_name, snap_note, *filter_inputs], listing, api_visibility="private")
    ex_btn.click(export, [ex_kind, ex_fmt, ex_snap, ex_inactive], [ex_file, status], api_visibility="private")


def _ids_or_empty(text: str) -> list[int]:
    try:
        return parse_ids(text or "")
    except ReflectRMError:
        return []


def _example_detail(row) -> dict[str, Any]:
    return {"id": row.id, "kind": row.kind, "state": row.state, "source": row.source, "subset": row.subset,
            "query": row.query, "response_1": row.response_1, "response_2": row.response_2,
            "label": row.label, "judge_verdict": row.judge_verdict, "person_verdict": row.human_verdict,
            "critique_1": row.critique_1, "critique_2": row.critique_2, "judgment_id": row.judgment_id,
            "correction_id": row.correction_id}


# --- History --------------------------------------------------------------------------------------------------


def _history_tab(services: AppServices, judge: _JudgeView, tabs: gr.Tabs, tab: gr.Tab) -> None:
    with gr.Row():
        search = gr.Textbox(label="Search query or source", scale=3, elem_id="history-search")
        refresh = gr.Button("Refresh", scale=1, elem_id="history-refresh")
        jid = gr.Number(None, label="Judgment #", precision=0, scale=1, elem_id="history-id")
        open_btn = gr.Button("Reopen", scale=1, elem_id="history-open")
    table = gr.Dataframe(label="Stored judgments, newest first (select a row to reopen it)", interactive=False,
                         elem_id="history-table")
    status = gr.Textbox(label="Status", interactive=False, elem_id="history-status")
    verdict = gr.Textbox(label="Final verdict", interactive=False, elem_id="history-verdict")
    to_judge = gr.Button("Open in Judge (switch strategies there)", elem_id="history-to-judge")
    anatomy = gr.HTML(elem_id="history-anatomy", js_on_load=None)
    with gr.Accordion("Raw judgment (JSON, as recorded)", open=False):
        raw = gr.JSON(elem_id="history-json")

    def listing(text):
        return views.summaries_frame(services.history(search=text or ""))

    def reopen(judgment_id):
        try:
            stored = services.open(int(judgment_id))
        except (ReflectRMError, TypeError, ValueError) as exc:
            return {status: f"error: {exc}"}
        result = JudgeResult(judgment_id=stored.id, judgment=stored.judgment)
        twin = f", swapped-order twin #{stored.twin_id}" if stored.twin_id else ""
        return {status: f"judgment #{stored.id} recorded {stored.created_at:%Y-%m-%d %H:%M:%S}{twin}", jid: stored.id,
                verdict: views.verdict_line(stored.judgment), anatomy: views.anatomy_html(result),
                raw: stored.judgment.to_dict()}

    def select_row(evt: gr.SelectData):
        return reopen(evt.row_value[0]) if evt.row_value else {}

    open_outs = [*judge.outputs, *judge.form, judge.base, tabs]

    def open_in_judge(judgment_id):
        try:
            values = _open_outputs(services, int(judgment_id))
        except (ReflectRMError, TypeError, ValueError) as exc:
            return {status: f"error: {exc}"}
        return dict(zip(open_outs, [*values, gr.Tabs(selected="judge")]))

    shown = [status, jid, verdict, anatomy, raw]
    refresh.click(listing, search, table, api_visibility="private")
    search.submit(listing, search, table, api_visibility="private")
    tab.select(listing, search, table, api_visibility="private")
    open_btn.click(reopen, jid, shown, api_visibility="private")
    table.select(select_row, None, shown, api_visibility="private")
    to_judge.click(open_in_judge, jid, [*open_outs, status], api_visibility="private")


# --- Train ----------------------------------------------------------------------------------------------------


def _snapshot_choices(services: AppServices, current: str | None) -> Any:
    names = [s.name for s in reversed(services.snapshots())]  # newest first
    return gr.update(choices=names, value=current if current in names else (names[0] if names else None))


def _train_view(services: AppServices, run_id: int | None, seen: dict[str, Any]) -> dict[str, Any]:
    """What changed in a watched run since `seen` (keys: which parts were last drawn from what)."""
    if run_id is None:
        return {"line": "no run yet: pick a snapshot and press Start", "seen": {}, "active": False}
    view = services.training.watch(int(run_id))
    p = view.progress
    parts = {"step": (view.run.id, p.step, p.state), "log": (view.run.id, p.log_tail),
             "checkpoints": (view.run.id, tuple(str(c.path) for c in p.checkpoints)),
             "completions": (view.run.id, tuple((c.get("step"), c.get("text")) for c in p.completions[-1:]))}
    changed = {k for k, v in parts.items() if seen.get(k) != repr(v)}
    return {"line": views.train_status_line(view), "view": view, "changed": changed,
            "seen": {k: repr(v) for k, v in parts.items()}, "active": not p.finished}


def _train_tab(services: AppServices, tab: gr.Tab, active_judge: Any) -> None:
    training = services.training
    d = training.defaults()
    with gr.Row():
        with gr.Column(scale=2):
            with gr.Row():
                snapshot = gr.Dropdown(label="Snapshot (take one in Curate)", choices=[], scale=3,
                                       elem_id="train-snapshot")
                refresh = gr.Button("Refresh", size="sm", scale=1, elem_id="train-refresh")
            base_model = gr.Textbox(d.base_model, label="Base model (default: the active judge)",
                                    elem_id="train-base-model")
            with gr.Row():
                max_steps = gr.Number(d.max_steps, precision=0, minimum=1, label="Max steps", elem_id="train-max-steps")
                lr = gr.Number(d.learning_rate, label="Learning rate", elem_id="train-lr")
                minutes = gr.Number(d.max_minutes, minimum=0, label="Time budget, minutes (0 = none)",
                                    elem_id="train-minutes")
                lora = gr.Checkbox(d.lora, label="LoRA adapter", elem_id="train-lora")
            with gr.Accordion("More settings", open=False):
                with gr.Row():
                    batch = gr.Number(d.batch_size, precision=0, minimum=1, label="Prompts per step",
                                      elem_id="train-batch")
                    group = gr.Number(d.num_generations, precision=0, minimum=2,
                                      label="Group size (samples per prompt)", elem_id="train-group")
                with gr.Row():
                    length = gr.Number(d.max_completion_length, precision=0, minimum=1, label="Max completion tokens",
                                       elem_id="train-length")
                    save = gr.Number(d.save_steps, precision=0, minimum=1, label="Checkpoint every N steps",
                                     elem_id="train-save")
                grad_ckpt = gr.Checkbox(d.gradient_checkpointing,
                                        label="Gradient checkpointing (less GPU memory, slower)")
                with gr.Row():
                    decay = gr.Checkbox(d.decay_over_time, label="Decay the rate to 0 over the time budget",
                                        elem_id="train-decay")
                    precision = gr.Dropdown(
                        [("auto: bf16 on a GPU, fp32 on a CPU", "auto"),
                         ("bf16 (on a CPU: autocast, pays with AMX / AVX512-BF16)", "bf16"), ("fp32", "fp32")],
                        value=d.precision, label="Precision", elem_id="train-precision")
            with gr.Row():
                start = gr.Button("Start", variant="primary", elem_id="train-start")
                cancel = gr.Button("Cancel", variant="stop", elem_id="train-cancel")
                resume = gr.Button("Resume", elem_id="train-resume")
            status = gr.Textbox(label="Status", interactive=False, elem_id="train-status")
        with gr.Column(scale=3):
            line = gr.Textbox(label="Progress", interactive=False, elem_id="train-progress")
            with gr.Row():
                loss = gr.LinePlot(views.curve_frame([], "loss"), x="step", y="loss", title="Loss", height=240,
                                   elem_id="train-loss")
                reward = gr.LinePlot(views.curve_frame([], "reward"), x="step", y="reward", title="Mean reward",
                                     y_lim=[0, 1], height=240, elem_id="train-reward")
            with gr.Row():
                checkpoint = gr.Dropdown(label="Checkpoints of this run", choices=[], scale=3,
                                         elem_id="train-checkpoint")
                use = gr.Button("Use as judge", scale=1, elem_id="train-use")
    runs = gr.Dataframe(views.runs_frame([]), label="Runs, newest first (select a row to watch it)",
                        interactive=False, elem_id="train-runs")
    completions = gr.Dataframe(views.completions_frame([]), label="Recent completions (newest first)",
                               interactive=False, wrap=True, elem_id="train-completions")
    log = gr.Textbox(label="Log (the end)", lines=12, max_lines=20, interactive=False, autoscroll=True,
                     elem_id="train-log")
    timer = gr.Timer(2.0, active=False)
    watched = gr.State(None)
    seen = gr.State({})

    shown = [line, loss, reward, checkpoint, completions, log, runs, seen, timer, watched]
    form = [snapshot, base_model, max_steps, lr, lora, batch, group, length, save, grad_ckpt, minutes, decay, precision]

    def show(run_id, last, *, full: bool = False) -> dict:
        got = _train_view(services, run_id, {} if full else (last or {}))
        out: dict[Any, Any] = {line: got["line"], seen: got["seen"], timer: gr.Timer(active=got["active"]),
                               watched: run_id}
        if "view" not in got:
            return out
        view, changed = got["view"], got["changed"]
        if "step" in changed:
            out.update({loss: views.curve_frame(view.progress.loss, "loss"),
                        reward: views.curve_frame(view.progress.reward, "reward"),
                        runs: views.runs_frame(training.runs())})
        if "checkpoints" in changed:
            choices = views.checkpoint_choices(view.checkpoints)
            out[checkpoint] = gr.update(choices=choices, value=choices[0][1] if choices else None)
        if "completions" in changed:
            out[completions] = views.completions_frame(view.progress.completions)
        if "log" in changed:
            out[log] = view.progress.log_tail
        return out

    def request_of(snap, model, steps, rate, use_lora, prompts, size, tokens, every, ckpt, budget, decayed,
                   dtype) -> TrainRequest:
        return TrainRequest(snapshot=snap or "", base_model=model or "", max_steps=_whole(steps, "max steps"),
                            learning_rate=float(rate or 0), lora=bool(use_lora),
                            batch_size=_whole(prompts, "prompts per step"), num_generations=_whole(size, "group size"),
                            max_completion_length=_whole(tokens, "max completion tokens"),
                            save_steps=_whole(every, "checkpoint every N steps"), gradient_checkpointing=bool(ckpt),
                            max_minutes=float(budget or 0), decay_over_time=bool(decayed), precision=dtype or "auto")

    def start_run(*values):
        try:
            run = training.start(request_of(*values))
        except ReflectRMError as exc:
            return {status: f"error: {exc}"}
        return {**show(run.id, {}, full=True), status: f"started run #{run.id} on snapshot {run.snapshot_name!r}"}

    def cancel_run(run_id, last):
        if run_id is None:
            return {status: "error: no run is shown: start one or select one in the list"}
        try:
            forced = training.cancel(int(run_id))
        except ReflectRMError as exc:
            return {status: f"error: {exc}"}
        note = (f"run #{run_id} stopped at once" if forced
                else f"run #{run_id} stops after the step in progress, with a checkpoint (press again to stop at once)")
        return {**show(run_id, last), status: note}

    def resume_run(run_id, steps):
        if run_id is None:
            return {status: "error: no run is shown: select one in the list"}
        try:
            run = training.resume(int(run_id), max_steps=_whole(steps, "max steps"))
        except ReflectRMError as exc:
            return {status: f"error: {exc}"}
        return {**show(run.id, {}, full=True), status: f"resumed run #{run.id} from its last checkpoint"}

    def use_checkpoint(run_id, path):
        if run_id is None or not path:
            return {status: "error: pick a checkpoint of a run first (a run saves them as it trains)"}
        try:
            name = services.use_judge(int(run_id), path)
        except ReflectRMError as exc:
            return {status: f"error: {exc}"}
        return {status: f"the judge is now {name}: judgments from now on use it", active_judge: name,
                base_model: name}

    def open_tab(run_id, last, current):
        if run_id is None:
            listed = training.runs()
            run_id = listed[0].id if listed else None
        return {**show(run_id, last, full=True), snapshot: _snapshot_choices(services, current)}

    def select_run(evt: gr.SelectData):
        row = evt.row_value
        return show(int(row[0]), {}, full=True) if row else {}

    quiet = {"api_visibility": "private", "show_progress": "hidden"}
    timer.tick(lambda run_id, last: show(run_id, last), [watched, seen], shown, **quiet)
    tab.select(open_tab, [watched, seen, snapshot], [*shown, snapshot], **quiet)
    refresh.click(lambda current: _snapshot_choices(services, current), snapshot, snapshot, api_visibility="private")
    start.click(start_run, form, [*shown, status], api_visibility="private", concurrency_limit=1)
    cancel.click(cancel_run, [watched, seen], [*shown, status], api_visibility="private")
    resume.click(resume_run, [watched, max_steps], [*shown, status], api_visibility="private", concurrency_limit=1)
    use.click(use_checkpoint, [watched, checkpoint], [status, active_judge, base_model], api_visibility="private",
              concurrency_limit=1)
    runs.select(select_run, None, shown, **quiet)
    # a read-only Textbox does not follow new text on its own: show the end of the log, where the news is
    log.change(None, None, None, js="() => { const t = document.querySelector('#train-log textarea'); "
                                    "if (t) { requestAnimationFrame(() => { t.scrollTop = t.scrollHeight; }); } }",
               api_visibility="private")


def _whole(value: Any, what: str) -> int:
    """A form number that must be a whole number (a clear error instead of a silent cut)."""
    if value is None or float(value) != int(value):
        raise InputError(f"{what} must be a whole number, got {value!r}")
    return int(value)


def _source_choices(services: AppServices, copies: int, *, current: str = "") -> list[Any]:
    """Dropdown updates listing the data sets (keeping `current` selected when it is one)."""
    names = services.sources()
    value = current if current in names else (names[0] if names else None)
    return [gr.update(choices=names, value=value) for _ in range(copies)]


# --- the API and the whole app --------------------------------------------------------------------------------


def _api(services: AppServices) -> None:
    """Named endpoints for `gradio_client`: /judge, /audit, /correct, /rejudge, /review_queue."""

    def judge(query: str, response_1: str, response_2: str, messages: str = "", strategy: str = "reflectrm",
              seed: int = 0, label: int = 0) -> dict:
        """Judge a pair (query, or messages as a JSON list of turns) and record it; returns the judgment."""
        pair = build_pair(query=query, messages=messages, response_1=response_1, response_2=response_2,
                          label=label or None)
        result = services.judge(pair, strategy=strategy, seed=seed)
        return {"judgment_id": result.judgment_id, "judgment": result.judgment.to_dict()}

    def audit(query: str, response_1: str, response_2: str, messages: str = "", seed: int = 0, label: int = 0) -> dict:
        """Judge a pair in both orders; returns both judgments and whether they are consistent."""
        pair = build_pair(query=query, messages=messages, response_1=response_1, response_2=response_2,
                          label=label or None)
        result = services.audit(pair, seed=seed)
        return {"consistent": result.agree, "banner": views.audit_banner(result),
                "original": {"judgment_id": result.original.judgment_id, "judgment": result.original.judgment.to_dict()},
                "swapped": {"judgment_id": result.swapped.judgment_id, "judgment": result.swapped.judgment.to_dict()}}

    def correct(judgment_id: int, verdict: int, author: str = "", note: str = "", marks: str = "") -> dict:
        """Record (or edit) a person's verdict on a judgment; marks: JSON {"3": "right", "5": "wrong"}."""
        parsed = {int(k): v for k, v in json.loads(marks).items()} if marks.strip() else {}
        record = services.correct(judgment_id, verdict=verdict, author=author or "api", note=note, marks=parsed)
        return {"correction_id": record.id, "judgment_id": record.judgment_id, "verdict": record.verdict,
                "revision": record.revision, "marks": {str(k): v for k, v in record.marks.items()},
                "preference_example_ids": list(record.preference_example_ids),
                "reflection_pair_ids": list(record.reflection_pair_ids)}

    def rejudge(judgment_id: int, strategy: str) -> dict:
        """A stored judgment re-aggregated with another strategy (generates only what it lacks)."""
        result = services.reaggregate(judgment_id, strategy)
        return {"judgment_id": judgment_id, "generated": result.generated, "judgment": result.judgment.to_dict()}

    gr.api(judge, api_name="judge", concurrency_limit=4)
    gr.api(audit, api_name="audit", concurrency_limit=4)
    gr.api(correct, api_name="correct", concurrency_limit=8)
    gr.api(rejudge, api_name="rejudge", concurrency_limit=4)


def _open_in_judge(services: AppServices, judge: _JudgeView, tabs: gr.Tabs, button: gr.Button, jid: gr.Number) -> None:
    """Wire a button that opens judgment `jid` in the Judge tab (the Evaluate tab's drill-down)."""
    outs = [*judge.outputs, *judge.form, judge.base, tabs]

    def open_it(judgment_id):
        try:
            return [*_open_outputs(services, int(judgment_id)), gr.Tabs(selected="judge")]
        except (ReflectRMError, TypeError, ValueError) as exc:
            return [f"error: {exc}", *[gr.update()] * (len(outs) - 1)]

    button.click(open_it, jid, outs, api_visibility="private")


def build_app(services: AppServices) -> gr.Blocks:
    """The whole app: six tabs and the named API."""
    with gr.Blocks(title="ReflectRM", analytics_enabled=False) as demo:
        _api(services)  # first, so the endpoints get their plain names (/judge, /audit, /correct, /rejudge)
        with gr.Row():
            gr.Markdown("## ReflectRM: look inside judgments, audit positional bias, correct the judge, retrain it")
            active_judge = gr.Textbox(services.active_judge(), label="Active judge", interactive=False, scale=0,
                                      min_width=420, elem_id="active-judge")
        with gr.Tabs(elem_id="tabs") as tabs:
            with gr.Tab("Judge", id="judge", elem_id="tab-judge"):
                judge = _judge_tab(services)
            with gr.Tab("Audit", id="audit", elem_id="tab-audit") as audit_tab:
                audit = _audit_tab(services, audit_tab)
            with gr.Tab("Review queue", id="review", elem_id="tab-review") as review_tab:
                _review_tab(services, review_tab)
            with gr.Tab("Curate", id="curate", elem_id="tab-curate") as curate_tab:
                _curate_tab(services, curate_tab)
            with gr.Tab("History", id="history", elem_id="tab-history") as history_tab:
                _history_tab(services, judge, tabs, history_tab)
            with gr.Tab("Train", id="train", elem_id="tab-train") as train_tab:
                _train_tab(services, train_tab, active_judge)
            with gr.Tab("Evaluate", id="evaluate", elem_id="tab-evaluate"):
                evaluate_tab.build(services, open_in_judge=lambda button, jid: _open_in_judge(services, judge, tabs,
                                                                                              button, jid))
        _wire_judge_audit(services, judge, audit, tabs)
        demo.load(lambda: [*_source_choices(services, 2), services.active_judge()], None,
                  [judge.source, audit.source, active_judge], api_visibility="private")
    return demo


def launch_options() -> dict[str, Any]:
    """What `Blocks.launch` needs besides host and port (Gradio 6 takes css/head at launch)."""
    return {"css": CSS, "head": KEYBOARD_JS, "share": False, "ssr_mode": False, "show_error": False,
            "footer_links": ["api"]}
