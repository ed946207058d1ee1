"""The Gradio Blocks, assembled from one module per tab (`reflectrm_app.ui.tabs`) and the named API (`reflectrm_app.ui.api`).

No module-level mutable state: per-user state lives in `gr.State`, shared resources in the one
`Services` object. Model and user text is shown in Textboxes, Dataframes and JSON (as text) or
escaped into `gr.HTML` by `reflectrm_app.ui.views`; errors are shown in status boxes as text.

A new tab is one line: a module with a `TAB = TabSpec(...)`, added to `TABS` below.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr
from starlette.middleware import Middleware

from reflectrm_app.ui import api
from reflectrm_app.ui.login import FailureCounter, LoginGuard, LoginThrottleMiddleware, trust_proxies
from reflectrm_app.ui.uploads import MB, UploadFolderCap
from reflectrm_app.services import Services
from reflectrm_app.settings import AppSettings, load_settings, parse_proxies
from reflectrm.serving.guard import AccessGuard
from reflectrm_app.ui.tabs import audit, curate, evaluate, history, judge, review, reviewers, train
from reflectrm_app.ui.tabs.common import TabSpec, Workbench, source_choices

TABS: tuple[TabSpec, ...] = (judge.TAB, audit.TAB, review.TAB, reviewers.TAB, curate.TAB, history.TAB, train.TAB,
                             evaluate.TAB)
"""The tabs, in order: add a tab module's `TAB` here."""

ADDRESS_MAX_FAILURES = 20  # failed logins from one address (several users may share it) before a lock-out

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
.rr-note { font-size: 12px; opacity: 0.85; margin: 4px 0; }
/* Curate's long cells (the query, why a correction is contested) wrap inside a bounded column, never cut off */
#curate-table td { white-space: normal; overflow-wrap: break-word; max-width: 28em; vertical-align: top; }
/* table headers break between words, never inside one ("judgmen t", "subse t", "rewar d"). Gradio's table
   writes each header into a span that breaks anywhere and then sizes the column from what the header needs:
   the span keeps whole words, so a column is at least its longest header word wide (the table scrolls) */
.gradio-dataframe th, .gradio-dataframe [role=columnheader], .table-wrap th, [role=columnheader] .header,
.prose th, .rr-reflections th {
  word-break: keep-all !important; overflow-wrap: normal !important; hyphens: manual !important; }
.gradio-dataframe th, .table-wrap th { min-width: max-content; }
"""

# Review-queue keys (and Tab out of a dropdown). Ignored while typing in a text field (Esc leaves it); active only
# while the Review tab is visible.
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
  // Tab out of a dropdown closes its list: Gradio's dropdown reopens it in a keydown handler that runs after the
  // blur had closed it (it awaits a tick), so the list stayed drawn over the form. Tab only moves focus there.
  window.addEventListener("keydown", (e) => {
    if (e.key === "Tab" && e.target && e.target.getAttribute && e.target.getAttribute("role") === "combobox") {
      e.stopPropagation();
    }
  }, true);
  // a question to confirm a correction stays up until it is answered or passed over (a save, Next, Skip): then
  // it goes, rather than linger over the form for its time
  window.reflectrmAnswered = () => document.querySelectorAll(".toast-body").forEach((toast) => {
    if (/Confirm: /.test(toast.textContent)) toast.querySelector(".toast-close")?.click();
  });
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


def build_app(services: Services, tabs: tuple[TabSpec, ...] = TABS) -> gr.Blocks:
    """The whole app: the tabs and the named API."""
    with gr.Blocks(title="ReflectRM", analytics_enabled=False) as demo:
        api.register(services)  # first, so the endpoints get their plain names (/judge, /audit, /correct, /rejudge)
        with gr.Row():
            gr.Markdown("## ReflectRM: look inside judgments, audit positional bias, correct the judge, retrain it")
            active_judge = gr.Textbox(services.runtime.active_judge_label(), label="Active judge", interactive=False, scale=0,
                                      min_width=420, elem_id="active-judge")
        with gr.Tabs(elem_id="tabs") as tab_set:
            wb = Workbench(services=services, tabs=tab_set, active_judge=active_judge)
            for spec in tabs:
                with gr.Tab(spec.label, id=spec.id, elem_id=f"tab-{spec.id}") as tab:
                    wb.views[spec.id] = spec.build(wb, tab)
        for spec in tabs:
            if spec.wire is not None:
                spec.wire(wb)
        pickers = [wb.views[k].source for k in ("judge", "audit") if k in wb.views]
        demo.load(lambda: [*(source_choices(services) for _ in pickers), services.runtime.active_judge_label()], None,
                  [*pickers, active_judge], api_visibility="private")
    api.name_missing_values(demo)
    return demo


def launch_options(settings: AppSettings | None = None) -> dict[str, Any]:
    """What `Blocks.launch` needs besides host and port: css/head (Gradio 6 takes them at launch), the
    trusted-host and cross-site checks (`reflectrm.serving.hosts`) on every route, the login (throttled
    per user and per address), and the upload limits (per file, and the upload folder as a whole)."""
    from gradio.utils import get_upload_folder  # the folder Gradio's server writes uploads to

    settings = settings if settings is not None else load_settings()
    options: dict[str, Any] = {"css": CSS, "head": KEYBOARD_JS, "share": False, "ssr_mode": False,
                               "show_error": False, "footer_links": ["api"], "max_file_size": "50mb"}
    trust_proxies(parse_proxies(settings.app.trusted_proxies))
    middleware = [Middleware(AccessGuard, access=settings.app.access()),  # first: before any route or login
                  Middleware(UploadFolderCap, folder=Path(get_upload_folder()),
                             max_bytes=settings.app.upload_folder_max_mb * MB)]
    credentials = settings.app.credentials()
    if credentials:
        options["auth"] = LoginGuard(credentials).check
        by_address = FailureCounter(max_failures=ADDRESS_MAX_FAILURES)
        middleware.append(Middleware(LoginThrottleMiddleware, counter=by_address))
    options["app_kwargs"] = {"middleware": middleware}
    return options
