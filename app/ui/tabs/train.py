"""The Train tab: GRPO runs on a snapshot, watched live (loss, reward, completions, log); use a checkpoint as
the judge, or evaluate it against the active judge first (two stored runs, compared item by item), and read what
the comparison changed: the pairs that flipped either way (each opens in the anatomy) and the corrections that share
a problem or a template with them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr
import pandas as pd

from reflectrm_app.ui import views
from reflectrm_app.records import JudgeResult, TrainRequest
from reflectrm_app.services.evaluation import FLIPS_SHOWN, PROMOTION_COLUMNS, NeedsOverride
from reflectrm_app.services.training import MIXES
from reflectrm_app.ui.forms import judgment_number, train_request, whole
from reflectrm_app.ui.tabs.common import (TabSpec, Workbench, failure_text, field_note, run_cancellable, session_key,
                                          unchanged, user_of)
from reflectrm.errors import ReflectRMError


def _snapshot_choices(services: Any, current: str | None) -> Any:
    names = [s.name for s in reversed(services.curation.snapshots())]  # newest first
    return gr.update(choices=names, value=current if current in names else (names[0] if names else None))


def _train_view(services: Any, run_id: int | None, seen: dict[str, Any]) -> dict[str, Any]:
    """What changed in a watched run since `seen` (keys: which parts were last drawn from what)."""
    if run_id is None:
        return {"line": "no run yet: pick a snapshot and press Start", "seen": {}, "active": False}
    view = services.training.watch(int(run_id))
    p = view.progress
    parts = {"step": (view.run.id, p.step, p.state), "log": (view.run.id, p.log_tail),
             "checkpoints": (view.run.id, tuple(str(c.path) for c in p.checkpoints)),
             "completions": (view.run.id, tuple((c.get("step"), c.get("text")) for c in p.completions[-1:]))}
    changed = {k for k, v in parts.items() if seen.get(k) != v}
    return {"line": views.train_status_line(view), "view": view, "changed": changed, "seen": parts,
            "active": not p.finished}


@dataclass(frozen=True, slots=True)
class TrainPage:
    """The tab's components, as its layout parts drew them (the handler groups below wire them)."""

    form: dict[str, Any]  # TrainRequest's fields, in `train_request`'s order, plus the Start/Cancel/Resume buttons
    status: Any
    watch: dict[str, Any]  # the watched run: progress line, plots, checkpoints, evaluation against the judge
    runs: Any
    completions: Any
    log: Any
    timer: Any
    watched: Any  # gr.State: the run shown
    seen: Any  # gr.State: which parts were last drawn from what (`_train_view`)

    @property
    def shown(self) -> list[Any]:
        """What showing a run updates."""
        w = self.watch
        return [w["line"], w["loss"], w["reward"], w["checkpoint"], self.completions, self.log, self.runs, self.seen,
                self.timer, self.watched, self.status]

    @property
    def request_fields(self) -> list[Any]:
        return [self.form[k] for k in FORM_FIELDS]


FORM_FIELDS = ("snapshot", "base_model", "max_steps", "lr", "lora", "batch", "group", "length", "save", "grad_ckpt",
               "minutes", "decay", "precision", "mix", "both_orders")
"""The form's fields, in the order `forms.train_request` takes them."""


def build(wb: Workbench, tab: Any) -> None:
    d = wb.services.training.defaults()
    with gr.Row():
        with gr.Column(scale=2):
            form = _form(d)
            status = gr.Textbox(label="Status", interactive=False, elem_id="train-status")
        with gr.Column(scale=3):
            watch = _watch_panel(wb.services.evaluation.choices())
    flips = _flips_panel()
    runs = gr.Dataframe(views.runs_frame([]), label="Runs, newest first (select a row to watch it)",
                        interactive=False, elem_id="train-runs")
    completions = gr.Dataframe(views.completions_frame([]), label="Recent completions (newest first)",
                               interactive=False, wrap=True, elem_id="train-completions")
    log = gr.Textbox(label="Log (the end)", lines=12, max_lines=20, interactive=False, autoscroll=True,
                     elem_id="train-log")
    promotions = gr.Dataframe(promotions_frame(wb.services), label="Promotions, newest first", interactive=False,
                              elem_id="train-promotions")
    page = TrainPage(form=form, status=status, watch={**watch, **flips, "promotions": promotions}, runs=runs,
                     completions=completions, log=log, timer=gr.Timer(2.0, active=False), watched=gr.State(None),
                     seen=gr.State({}))
    show = _shower(wb.services, page)
    _wire_watching(wb.services, page, tab, show)
    _wire_runs(wb.services, page, show)
    _wire_checkpoints(wb, page)
    _wire_promotions(wb, page, tab)
    _wire_flips(wb, page)


def _form(d: TrainRequest) -> dict[str, Any]:
    """The run's settings, the snapshot and its mix first; then Start, Cancel and Resume."""
    f: dict[str, Any] = {}
    with gr.Row():
        f["snapshot"] = gr.Dropdown(label="Snapshot (take one in Curate)", choices=[], scale=3, elem_id="train-snapshot")
        f["refresh"] = gr.Button("Refresh", size="sm", scale=1, elem_id="train-refresh")
    f["mix"] = gr.Radio([(label, key) for key, label in MIXES.items()], value="paper",
                        label="Mix of preference examples and reflection pairs", elem_id="train-mix")
    f["snapshot_mix"] = gr.Markdown(elem_id="train-snapshot-mix")
    f["both_orders"] = gr.Checkbox(
        d.config.both_orders, elem_id="train-both-orders",
        label="Both orders: roll out each example in both orders, pay a right verdict by how often the other "
              "order is right too (trains position bias away; the Audit tab measures it)")
    f["base_model"] = gr.Textbox(d.base_model, label="Base model (default: the active judge)",
                                 elem_id="train-base-model")
    with gr.Row():
        f["max_steps"] = gr.Number(d.config.max_steps, label="Max steps", elem_id="train-max-steps")
        f["lr"] = gr.Number(d.config.learning_rate, label="Learning rate", elem_id="train-lr")
        f["minutes"] = gr.Number(d.max_minutes, label="Time budget, minutes (0 = none)", elem_id="train-minutes")
        f["lora"] = gr.Checkbox(d.config.lora, label="LoRA adapter", elem_id="train-lora")
    f["note"] = field_note("train-form-note")  # a number the form cannot take, said under the numbers
    with gr.Accordion("More settings", open=False):
        _more_settings(d, f)
    with gr.Row():
        f["start"] = gr.Button("Start", variant="primary", elem_id="train-start")
        f["cancel"] = gr.Button("Cancel", variant="stop", elem_id="train-cancel")
        f["resume"] = gr.Button("Resume", elem_id="train-resume")
    return f


def _more_settings(d: TrainRequest, f: dict[str, Any]) -> None:
    with gr.Row():
        f["batch"] = gr.Number(d.config.batch_size, label="Prompts per step", elem_id="train-batch")
        f["group"] = gr.Number(d.config.num_generations, label="Group size (samples per prompt)", elem_id="train-group")
    with gr.Row():
        f["length"] = gr.Number(d.config.max_completion_length, label="Max completion tokens", elem_id="train-length")
        f["save"] = gr.Number(d.config.save_steps, label="Checkpoint every N steps", elem_id="train-save")
    f["grad_ckpt"] = gr.Checkbox(d.config.gradient_checkpointing,
                                 label="Gradient checkpointing (less GPU memory, slower)")
    with gr.Row():
        f["decay"] = gr.Checkbox(d.decay_over_time, label="Decay the rate to 0 over the time budget",
                                 elem_id="train-decay")
        f["precision"] = gr.Dropdown(
            [("auto: bf16 on a GPU, fp32 on a CPU", "auto"),
             ("bf16 (on a CPU: autocast, pays with AMX / AVX512-BF16)", "bf16"), ("fp32", "fp32")],
            value=d.precision, label="Precision", elem_id="train-precision")


def _watch_panel(benchmarks: list[str]) -> dict[str, Any]:
    """The watched run: its progress, loss and reward, its checkpoints and what to do with one."""
    w: dict[str, Any] = {"line": gr.Textbox(label="Progress", interactive=False, elem_id="train-progress")}
    with gr.Row():
        w["loss"] = gr.LinePlot(None, x="step", y="loss", title="Loss", height=240,
                                elem_id="train-loss")
        w["reward"] = gr.LinePlot(None, x="step", y="reward", title="Mean reward",
                                  y_lim=[0, 1], height=240, elem_id="train-reward")
    with gr.Row():
        w["checkpoint"] = gr.Dropdown(label="Checkpoints of this run", choices=[], scale=3, elem_id="train-checkpoint")
        w["use"] = gr.Button("Use as judge", scale=1, elem_id="train-use")
    with gr.Row():  # the promotion gate: a checkpoint worse than the judge needs a named override
        w["override"] = gr.Checkbox(False, label="Override: use it anyway (when the gate finds it worse)",
                                    elem_id="train-override")
        w["reviewer"] = gr.Textbox(label="Your name (recorded with a promotion; with a login, your user name is)",
                                   elem_id="train-reviewer")
    w["gate"] = gr.Textbox(label="Promotion gate (the checkpoint against the active judge)", lines=3,
                           interactive=False, elem_id="train-gate")
    with gr.Accordion("Evaluate this checkpoint against the active judge", open=False):
        with gr.Row():
            w["bench"] = gr.Dropdown(benchmarks, value="demo", label="Benchmark or data set",
                                     elem_id="train-eval-benchmark")
            w["bench_limit"] = gr.Number(50, label="Pairs at most", precision=0, elem_id="train-eval-limit")
            w["evaluate"] = gr.Button("Evaluate against the judge", elem_id="train-eval")
        w["evaluated"] = gr.Markdown(elem_id="train-eval-result")
    return w


def _flips_panel() -> dict[str, Any]:
    """What the latest comparison changed: its flipped pairs (a row opens both judgments' anatomies) and the
    corrections that share a problem or a template with them. Filled by Evaluate against the judge and Use as judge."""
    f: dict[str, Any] = {}
    with gr.Accordion("What the comparison changed: flipped pairs and related corrections", open=True):
        f["flips_note"] = gr.Textbox(label="Flipped pairs", interactive=False, elem_id="train-flips-note",
                                     value="evaluate a checkpoint against the judge (or press Use as judge) to see "
                                           "the pairs that flipped")
        f["flipped"] = gr.Dataframe(views.flipped_frame_empty(), label="Flipped pairs (select a row to open both "
                                    "judgments)", interactive=False, wrap=True, elem_id="train-flips")
        f["flip_status"] = gr.Textbox(label="Status", interactive=False, elem_id="train-flip-status")
        with gr.Row():
            f["flip_checkpoint"] = gr.HTML(elem_id="train-flip-checkpoint", js_on_load=None)
            f["flip_judge"] = gr.HTML(elem_id="train-flip-judge", js_on_load=None)
        f["related_note"] = gr.Textbox(label="Corrections sharing a problem or template", interactive=False,
                                       elem_id="train-related-note")
        f["related"] = gr.Dataframe(views.related_frame_empty(), label="Active corrections sharing a problem (the "
                                    "same conversation) or a template (the same, numbers masked) with a flipped pair",
                                    interactive=False, wrap=True, elem_id="train-related")
    return f


FLIP_PARTS = ("flips_note", "flipped", "flip_status", "flip_checkpoint", "flip_judge", "related_note", "related")
"""What showing a comparison's flips updates (`_flips_shown`)."""


def _flips_shown(services: Any, w: dict[str, Any], runs: tuple[int, int] | None) -> dict[Any, Any]:
    """The flips panel drawn for the compared runs (judge's, checkpoint's); None: nothing compared, panel emptied."""
    empty = {w["flipped"]: views.flipped_frame_empty(), w["related"]: views.related_frame_empty(),
             w["flip_status"]: "", w["flip_checkpoint"]: "", w["flip_judge"]: "", w["related_note"]: ""}
    if runs is None:
        return {**empty, w["flips_note"]: "not compared: this checkpoint was never evaluated against the judge"}
    try:
        flips = services.evaluation.flips(*runs)
    except ReflectRMError as exc:
        return {**empty, w["flips_note"]: f"error: {exc}"}
    return {**empty, w["flips_note"]: views.flips_text(flips, limit=FLIPS_SHOWN),
            w["flipped"]: views.flipped_frame(flips, limit=FLIPS_SHOWN), w["related"]: views.related_frame(flips),
            w["related_note"]: views.related_text(flips)}


def _shower(services: Any, page: TrainPage) -> Any:
    """`show(run_id, last, full=False)`: the updates that draw a run (only its parts that changed since `last`)."""
    w, shown = page.watch, page.shown

    def show(run_id, last, *, full: bool = False) -> dict:
        got = _train_view(services, run_id, {} if full else (last or {}))
        out: dict[Any, Any] = {**unchanged(shown), w["line"]: got["line"], page.seen: got["seen"],
                               page.timer: gr.Timer(active=got["active"]), page.watched: run_id}
        if not got["active"] and "view" in got and "step" in got["changed"]:
            out[page.status] = got["line"]  # a cancel's "stops after the step in progress" is over: say how it ended
        if "view" not in got:
            return out
        view, changed = got["view"], got["changed"]
        if "step" in changed:
            out.update({w["loss"]: views.curve_frame(view.progress.loss, "loss"),
                        w["reward"]: views.curve_frame(view.progress.reward, "reward"),
                        page.runs: views.runs_frame(services.training.runs())})
        if "checkpoints" in changed:
            choices = views.checkpoint_choices(view.checkpoints)
            out[w["checkpoint"]] = gr.update(choices=choices, value=choices[0][1] if choices else None)
        if "completions" in changed:
            out[page.completions] = views.completions_frame(view.progress.completions)
        if "log" in changed:
            out[page.log] = view.progress.log_tail
        return out

    return show


def _wire_watching(services: Any, page: TrainPage, tab: Any, show: Any) -> None:
    """The live view: the timer, opening the tab, picking a run, the snapshot list and its mix, the log's end."""
    shown, snapshot, mix, training = page.shown, page.form["snapshot"], page.form["mix"], services.training

    def open_tab(run_id, last, current):
        if run_id is None:
            listed = training.runs()
            run_id = listed[0].id if listed else None
        return {**show(run_id, last, full=True), snapshot: _snapshot_choices(services, current)}

    def select_run(evt: gr.SelectData):
        row = evt.row_value
        return show(int(row[0]), {}, full=True) if row else unchanged(shown)

    def mix_text(name, chosen):
        return views.snapshot_mix_text(services.curation.snapshots(), name or "",
                                       training.data_mix(name or "", chosen or "paper"))

    quiet = {"api_visibility": "private", "show_progress": "hidden"}
    page.timer.tick(lambda run_id, last: show(run_id, last), [page.watched, page.seen], shown, **quiet)
    tab.select(open_tab, [page.watched, page.seen, snapshot], [*shown, snapshot], **quiet)
    page.form["refresh"].click(lambda current: _snapshot_choices(services, current), snapshot, snapshot,
                               api_visibility="private")
    for changed in (snapshot, mix):
        changed.change(mix_text, [snapshot, mix], page.form["snapshot_mix"], api_visibility="private",
                       show_progress="hidden")
    page.runs.select(select_run, None, shown, **quiet)
    # a read-only Textbox does not follow new text on its own: show the end of the log, where the news is
    page.log.change(None, None, None, js="() => { const t = document.querySelector('#train-log textarea'); "
                                         "if (t) { requestAnimationFrame(() => { t.scrollTop = t.scrollHeight; }); } }",
                    api_visibility="private")


def _wire_runs(services: Any, page: TrainPage, show: Any) -> None:
    """Start, Cancel and Resume."""
    shown, status, training, note = page.shown, page.status, services.training, page.form["note"]

    def start_run(*values):
        try:
            request = train_request(*values)
        except ReflectRMError as exc:
            return {**unchanged(shown), note: views.note_markdown(f"error: {exc}")}
        try:
            run = training.start(request)
        except ReflectRMError as exc:
            return {**unchanged(shown), status: f"error: {exc}", note: ""}
        used = run.config.get("data_mix") or {}
        replay = f" + {used['replay']} replayed" if used.get("replay") else ""
        trained_on = (f" ({used['preference']} preference example(s){replay}, {used['reflection']} reflection "
                      "pair(s))" if used else "")
        return {**show(run.id, {}, full=True), note: "",
                status: f"started run #{run.id} on snapshot {run.snapshot_name!r}{trained_on}"}

    def cancel_run(run_id, last):
        if run_id is None:
            return {**unchanged(shown), status: "error: no run is shown: start one or select one in the list"}
        try:
            forced = training.cancel(int(run_id))
        except ReflectRMError as exc:
            return {**unchanged(shown), status: f"error: {exc}"}
        note = (f"run #{run_id} stopped at once" if forced
                else f"run #{run_id} stops after the step in progress, with a checkpoint (press again to stop at once)")
        return {**show(run_id, last), status: note}

    def resume_run(run_id, steps):
        if run_id is None:
            return {**unchanged(shown), status: "error: no run is shown: select one in the list", note: ""}
        try:
            form_steps = whole(steps, "max steps", minimum=1)
        except ReflectRMError as exc:
            return {**unchanged(shown), note: views.note_markdown(f"error: {exc}")}
        try:
            start = training.resume_point(int(run_id))
            run = training.resume_from_form(int(run_id), form_steps=form_steps)
        except ReflectRMError as exc:
            return {**unchanged(shown), status: f"error: {exc}", note: ""}
        return {**show(run.id, {}, full=True), note: "",
                status: views.resumed_text(run.id, start, max_steps=run.config.get("max_steps"))}

    page.form["start"].click(start_run, page.request_fields, [*shown, note], api_visibility="private",
                             concurrency_limit=1)
    page.form["cancel"].click(cancel_run, [page.watched, page.seen], shown, api_visibility="private")
    page.form["resume"].click(resume_run, [page.watched, page.form["max_steps"]], [*shown, note], api_visibility="private",
                              concurrency_limit=1)


def promotions_frame(services: Any) -> pd.DataFrame:
    """The recorded promotions (who, when, which model over which judge, the gate's verdict, overridden)."""
    return pd.DataFrame(services.evaluation.promotions_table(), columns=list(PROMOTION_COLUMNS))


def _wire_checkpoints(wb: Workbench, page: TrainPage) -> None:
    """A checkpoint of the watched run: use it as the judge (through the promotion gate), or evaluate it against
    the active judge first."""
    services, w, status = wb.services, page.watch, page.status
    flip_outputs = [w[k] for k in FLIP_PARTS]
    use_outputs = [status, wb.active_judge, page.form["base_model"], w["gate"], w["promotions"], w["override"],
                   *flip_outputs]

    def use_checkpoint(run_id, path, override, name, request: gr.Request):
        if run_id is None or not path:
            return {**unchanged(use_outputs),
                    status: "error: pick a checkpoint of a run first (a run saves them as it trains)"}
        try:
            found = services.training.checkpoint(int(run_id), path)
            promoted = services.evaluation.promote(str(found.path), by=user_of(request) or name or "",
                                                   override=bool(override))
        except NeedsOverride as exc:  # the refusal's comparison: what flipped, to read before overriding
            return {**unchanged(use_outputs), **_flips_shown(services, w, exc.runs), status: f"refused: {exc}",
                    w["gate"]: "\n".join(exc.lines)}
        except ReflectRMError as exc:
            return {**unchanged(use_outputs), status: f"error: {exc}"}
        p = promoted.record
        how = f"gate: {p.verdict}" + (f", overridden by {p.promoted_by}" if p.overridden else "")
        compared = None if p.judge_run_id is None or p.checkpoint_run_id is None else (p.judge_run_id,
                                                                                       p.checkpoint_run_id)
        return {**_flips_shown(services, w, compared), status: f"{views.judge_now_text(promoted.path)} ({how})",
                wb.active_judge: services.runtime.active_judge_label(), page.form["base_model"]: promoted.path,
                w["gate"]: "\n".join(p.lines), w["promotions"]: promotions_frame(services), w["override"]: False}

    eval_outputs = [w["evaluated"], *flip_outputs]

    def evaluate_checkpoint(run_id, path, name, most, request: gr.Request, progress=gr.Progress()):  # noqa: B008
        # both runs stored and paired per item: "the checkpoint is better" is a tested claim, not a glance
        if run_id is None or not path:
            return {**unchanged(eval_outputs),
                    w["evaluated"]: "error: pick a checkpoint of a run first (a run saves them as it trains)"}
        try:
            found = services.training.checkpoint(int(run_id), path)
            result = run_cancellable(services, session_key(request, "train-eval"), lambda cancel: (
                services.evaluation.checkpoint_against_judge(
                    str(found.path), benchmark=name or "demo", limit=whole(most, "pairs at most", minimum=1),
                    cancel=cancel, progress=lambda done, total: progress(done / max(1, total),
                                                                         desc=f"{done}/{total} pairs"))))
        except ReflectRMError as exc:
            said = failure_text(exc, stopped="stopped: what was judged is kept in the Evaluate tab's runs")
            return {**unchanged(eval_outputs), w["evaluated"]: said}
        said = (f"**Run {result.judge_run}** (the active judge) against **run {result.checkpoint_run}** "
                f"({found.path.name}); both are in the Evaluate tab.\n\n{result.markdown}")
        return {**_flips_shown(services, w, (result.judge_run, result.checkpoint_run)), w["evaluated"]: said}

    w["use"].click(use_checkpoint, [page.watched, w["checkpoint"], w["override"], w["reviewer"]], use_outputs,
                   api_visibility="private", concurrency_limit=1)
    w["evaluate"].click(evaluate_checkpoint, [page.watched, w["checkpoint"], w["bench"], w["bench_limit"]],
                        eval_outputs, api_visibility="private", concurrency_limit=1)


def _wire_promotions(wb: Workbench, page: TrainPage, tab: Any) -> None:
    """Opening the tab: the promotions listed anew, and the name field prefilled with the login user."""
    w = page.watch

    def open_tab(name, request: gr.Request):
        return name or user_of(request), promotions_frame(wb.services)

    tab.select(open_tab, w["reviewer"], [w["reviewer"], w["promotions"]], api_visibility="private",
               show_progress="hidden")


def _wire_flips(wb: Workbench, page: TrainPage) -> None:
    """A flipped pair selected: the checkpoint's judgment of it and the judge's, each in the full anatomy."""
    w = page.watch
    shown = [w["flip_status"], w["flip_checkpoint"], w["flip_judge"]]

    def anatomy(cell: Any, title: str) -> str:
        if (number := judgment_number(cell)) is None:  # a run that kept no judgment of this pair
            return ""
        stored = wb.services.judging.open(number)
        return views.anatomy_html(JudgeResult(judgment_id=stored.id, judgment=stored.judgment),
                                  title=f"{title}: judgment #{stored.id}")

    def select_flip(evt: gr.SelectData):
        row = evt.row_value
        if not row:
            return unchanged(shown)
        try:
            opened = [anatomy(row[5], "The checkpoint's judgment"), anatomy(row[6], "The active judge's judgment")]
        except ReflectRMError as exc:
            return [f"error: {exc}", "", ""]
        return [f"pair {row[3]} ({row[1]}, {row[2]}): {row[0]}", *opened]

    w["flipped"].select(select_flip, None, shown, api_visibility="private")


TAB = TabSpec(label="Train", id="train", build=build)
