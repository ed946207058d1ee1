"""The Train tab: GRPO runs on a snapshot, watched live (loss, reward, completions, log); use a checkpoint as
the judge, or evaluate it against the active judge first (two stored runs, compared item by item)."""

from __future__ import annotations

from typing import Any

import gradio as gr

from reflectrm_app.ui import views
from reflectrm_app.records import TrainRequest
from reflectrm_app.evaluation import EvaluationService
from reflectrm_app.training import MIXES
from reflectrm_app.ui.tabs.common import (
    TabSpec,
    Workbench,
    failure_text,
    field_note,
    run_cancellable,
    session_key,
    unchanged,
    whole,
)
from reflectrm.errors import ReflectRMError


def _snapshot_choices(services: Any, current: str | None) -> Any:
    names = [s.name for s in reversed(services.snapshots())]  # newest first
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


def build(wb: Workbench, tab: Any) -> None:
    services, active_judge = wb.services, wb.active_judge
    training = services.training
    evaluations = EvaluationService(services)
    d = training.defaults()
    with gr.Row():
        with gr.Column(scale=2):
            with gr.Row():
                snapshot = gr.Dropdown(label="Snapshot (take one in Curate)", choices=[], scale=3,
                                       elem_id="train-snapshot")
                refresh = gr.Button("Refresh", size="sm", scale=1, elem_id="train-refresh")
            mix = gr.Radio([(label, key) for key, label in MIXES.items()], value="paper",
                           label="Mix of preference examples and reflection pairs", elem_id="train-mix")
            snapshot_mix = gr.Markdown(elem_id="train-snapshot-mix")
            base_model = gr.Textbox(d.base_model, label="Base model (default: the active judge)",
                                    elem_id="train-base-model")
            with gr.Row():
                max_steps = gr.Number(d.config.max_steps, label="Max steps", elem_id="train-max-steps")
                lr = gr.Number(d.config.learning_rate, label="Learning rate", elem_id="train-lr")
                minutes = gr.Number(d.max_minutes, label="Time budget, minutes (0 = none)",
                                    elem_id="train-minutes")
                lora = gr.Checkbox(d.config.lora, label="LoRA adapter", elem_id="train-lora")
            form_note = field_note("train-form-note")  # a number the form cannot take, said under the numbers
            with gr.Accordion("More settings", open=False):
                with gr.Row():
                    batch = gr.Number(d.config.batch_size, label="Prompts per step",
                                      elem_id="train-batch")
                    group = gr.Number(d.config.num_generations,
                                      label="Group size (samples per prompt)", elem_id="train-group")
                with gr.Row():
                    length = gr.Number(d.config.max_completion_length, label="Max completion tokens",
                                       elem_id="train-length")
                    save = gr.Number(d.config.save_steps, label="Checkpoint every N steps",
                                     elem_id="train-save")
                grad_ckpt = gr.Checkbox(d.config.gradient_checkpointing,
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
                loss = gr.LinePlot(None, x="step", y="loss", title="Loss", height=240,
                                   elem_id="train-loss")
                reward = gr.LinePlot(None, x="step", y="reward", title="Mean reward",
                                     y_lim=[0, 1], height=240, elem_id="train-reward")
            with gr.Row():
                checkpoint = gr.Dropdown(label="Checkpoints of this run", choices=[], scale=3,
                                         elem_id="train-checkpoint")
                use = gr.Button("Use as judge", scale=1, elem_id="train-use")
            with gr.Accordion("Evaluate this checkpoint against the active judge", open=False):
                with gr.Row():
                    bench = gr.Dropdown(evaluations.choices(), value="demo", label="Benchmark or data set",
                                        elem_id="train-eval-benchmark")
                    bench_limit = gr.Number(50, label="Pairs at most", precision=0, elem_id="train-eval-limit")
                    evaluate = gr.Button("Evaluate against the judge", elem_id="train-eval")
                evaluated = gr.Markdown(elem_id="train-eval-result")
    runs = gr.Dataframe(views.runs_frame([]), label="Runs, newest first (select a row to watch it)",
                        interactive=False, elem_id="train-runs")
    completions = gr.Dataframe(views.completions_frame([]), label="Recent completions (newest first)",
                               interactive=False, wrap=True, elem_id="train-completions")
    log = gr.Textbox(label="Log (the end)", lines=12, max_lines=20, interactive=False, autoscroll=True,
                     elem_id="train-log")
    timer = gr.Timer(2.0, active=False)
    watched = gr.State(None)
    seen = gr.State({})

    shown = [line, loss, reward, checkpoint, completions, log, runs, seen, timer, watched, status]
    use_outputs = [status, active_judge, base_model]
    form = [snapshot, base_model, max_steps, lr, lora, batch, group, length, save, grad_ckpt, minutes, decay, precision,
            mix]

    def show(run_id, last, *, full: bool = False) -> dict:
        got = _train_view(services, run_id, {} if full else (last or {}))
        out: dict[Any, Any] = {**unchanged(shown), line: got["line"], seen: got["seen"],
                               timer: gr.Timer(active=got["active"]), watched: run_id}
        if not got["active"] and "view" in got and "step" in got["changed"]:
            out[status] = got["line"]  # a cancel's "stops after the step in progress" is over: say how it ended
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
                   dtype, chosen_mix) -> TrainRequest:
        return TrainRequest.from_form(
            snapshot=snap or "", base_model=model or "", max_steps=whole(steps, "max steps", minimum=1),
            learning_rate=float(rate or 0), lora=bool(use_lora),
            batch_size=whole(prompts, "prompts per step", minimum=1),
            num_generations=whole(size, "group size", minimum=2),
            max_completion_length=whole(tokens, "max completion tokens", minimum=1),
            save_steps=whole(every, "checkpoint every N steps", minimum=1), gradient_checkpointing=bool(ckpt),
            max_minutes=float(budget or 0), decay_over_time=bool(decayed), precision=dtype or "auto",
            mix=chosen_mix or "paper")

    def start_run(*values):
        try:
            request = request_of(*values)
        except ReflectRMError as exc:
            return {**unchanged(shown), form_note: views.note_markdown(f"error: {exc}")}
        try:
            run = training.start(request)
        except ReflectRMError as exc:
            return {**unchanged(shown), status: f"error: {exc}", form_note: ""}
        used = run.config.get("data_mix") or {}
        replay = f" + {used['replay']} replayed" if used.get("replay") else ""
        trained_on = (f" ({used['preference']} preference example(s){replay}, {used['reflection']} reflection "
                      "pair(s))" if used else "")
        return {**show(run.id, {}, full=True), form_note: "",
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
            return {**unchanged(shown), status: "error: no run is shown: select one in the list", form_note: ""}
        try:
            form_steps = whole(steps, "max steps", minimum=1)
        except ReflectRMError as exc:
            return {**unchanged(shown), form_note: views.note_markdown(f"error: {exc}")}
        try:
            start = training.resume_point(int(run_id))
            run = training.resume_from_form(int(run_id), form_steps=form_steps)
        except ReflectRMError as exc:
            return {**unchanged(shown), status: f"error: {exc}", form_note: ""}
        return {**show(run.id, {}, full=True), form_note: "",
                status: views.resumed_text(run.id, start, max_steps=run.config.get("max_steps"))}

    def use_checkpoint(run_id, path):
        if run_id is None or not path:
            return {**unchanged(use_outputs),
                    status: "error: pick a checkpoint of a run first (a run saves them as it trains)"}
        try:
            name = services.use_judge(int(run_id), path)
        except ReflectRMError as exc:
            return {**unchanged(use_outputs), status: f"error: {exc}"}
        return {status: views.judge_now_text(name),
                active_judge: services.active_judge_label(),
                base_model: name}

    def evaluate_checkpoint(run_id, path, name, most, request: gr.Request, progress=gr.Progress()):  # noqa: B008
        # both runs stored and paired per item: "the checkpoint is better" is a tested claim, not a glance
        if run_id is None or not path:
            return "error: pick a checkpoint of a run first (a run saves them as it trains)"
        try:
            found = training.checkpoint(int(run_id), path)
            result = run_cancellable(services, session_key(request, "train-eval"), lambda cancel: (
                evaluations.checkpoint_against_judge(
                    str(found.path), benchmark=name or "demo", limit=whole(most, "pairs at most", minimum=1),
                    cancel=cancel, progress=lambda done, total: progress(done / max(1, total),
                                                                         desc=f"{done}/{total} pairs"))))
        except ReflectRMError as exc:
            return failure_text(exc, stopped="stopped: what was judged is kept in the Evaluate tab's runs")
        return (f"**Run {result.judge_run}** (the active judge) against **run {result.checkpoint_run}** "
                f"({found.path.name}); both are in the Evaluate tab.\n\n{result.markdown}")

    def open_tab(run_id, last, current):
        if run_id is None:
            listed = training.runs()
            run_id = listed[0].id if listed else None
        return {**show(run_id, last, full=True), snapshot: _snapshot_choices(services, current)}

    def select_run(evt: gr.SelectData):
        row = evt.row_value
        return show(int(row[0]), {}, full=True) if row else unchanged(shown)

    quiet = {"api_visibility": "private", "show_progress": "hidden"}
    timer.tick(lambda run_id, last: show(run_id, last), [watched, seen], shown, **quiet)
    tab.select(open_tab, [watched, seen, snapshot], [*shown, snapshot], **quiet)
    refresh.click(lambda current: _snapshot_choices(services, current), snapshot, snapshot, api_visibility="private")

    def mix_text(name, chosen):
        return views.snapshot_mix_text(services.snapshots(), name or "",
                                       training.data_mix(name or "", chosen or "paper"))

    for changed in (snapshot, mix):
        changed.change(mix_text, [snapshot, mix], snapshot_mix, api_visibility="private", show_progress="hidden")
    start.click(start_run, form, [*shown, form_note], api_visibility="private", concurrency_limit=1)
    cancel.click(cancel_run, [watched, seen], shown, api_visibility="private")
    resume.click(resume_run, [watched, max_steps], [*shown, form_note], api_visibility="private", concurrency_limit=1)
    use.click(use_checkpoint, [watched, checkpoint], use_outputs, api_visibility="private",
              concurrency_limit=1)
    evaluate.click(evaluate_checkpoint, [watched, checkpoint, bench, bench_limit], evaluated, api_visibility="private",
                   concurrency_limit=1)
    runs.select(select_run, None, shown, **quiet)
    # a read-only Textbox does not follow new text on its own: show the end of the log, where the news is
    log.change(None, None, None, js="() => { const t = document.querySelector('#train-log textarea'); "
                                    "if (t) { requestAnimationFrame(() => { t.scrollTop = t.scrollHeight; }); } }",
               api_visibility="private")


TAB = TabSpec(label="Train", id="train", build=build)
