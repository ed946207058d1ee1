"""What every tab shares: the workbench context, session keys, cancellable work, progress (form fields are
parsed in `reflectrm_app.ui.forms`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import gradio as gr

from reflectrm.pipeline import Progress, ProgressCallback, Stage
from reflectrm_app.services import Services
from reflectrm.errors import Cancelled, ReflectRMError

LABELS = MappingProxyType({"unknown": None, "Response 1": 1, "Response 2": 2})  # read-only
LABEL_NAMES = MappingProxyType({None: "unknown", 1: "Response 1", 2: "Response 2"})


@dataclass
class Workbench:
    """What tab builders share: the services, the Tabs (to switch tabs), and each tab's exported view."""

    services: Services
    tabs: Any  # gr.Tabs
    active_judge: Any  # gr.Textbox in the header
    views: dict[str, Any] = field(default_factory=dict)  # tab id -> what the tab's `build` returned


@dataclass(frozen=True)
class TabSpec:
    """A tab: `build(workbench, tab)` lays it out and wires its own events; `wire(workbench)` then
    wires events that reach into other tabs (every tab is built by then)."""

    label: str
    id: str
    build: Callable[[Workbench, Any], Any]
    wire: Callable[[Workbench], None] | None = None


def session_key(request: gr.Request | None, what: str) -> str:
    """A per-browser-session key (cancel tokens, review leases)."""
    return f"{getattr(request, 'session_hash', None) or 'anonymous'}:{what}"


def user_of(request: gr.Request | None) -> str:
    """The logged-in user ("" when login is off)."""
    return getattr(request, "username", None) or ""


def run_cancellable(services: Services, key: str, work: Callable[[Any], Any]) -> Any:
    """Run `work(cancel_event)` under a cancel token the Stop button can set."""
    event = services.runtime.cancels.start(key)
    try:
        return work(event)
    finally:
        services.runtime.cancels.finish(key, event)


def progress_reporter(progress: gr.Progress, *, text: Callable[[Progress], str] = str) -> ProgressCallback:
    """The one place where the app turns the pipeline's progress events into Gradio's progress bar."""

    def report(event: Progress) -> None:
        progress(event.fraction, desc=text(event))

    progress(0.0, desc="starting")  # the bar shows at once, not after the first report
    return report


def audit_text(event: Progress) -> str:
    """An audit's progress line: audited pairs (each judged in both orders), then the batch's stage."""
    if event.stage is Stage.DECIDED:
        return f"audit: {event.done} of {event.total} pairs done"
    return f"audit: {event.pairs_done // 2} of {event.pairs_total // 2} pairs done; {event}"


def failure_text(exc: ReflectRMError, *, stopped: str = "stopped: nothing was recorded") -> str:
    """A status line for a failed action: Stop is not an error (it says what was kept), anything else is."""
    return stopped if isinstance(exc, Cancelled) else f"error: {exc}"


def unchanged(outputs: Sequence[Any]) -> dict[Any, Any]:
    """Every declared output left as it is (a handler must answer for each output it declares)."""
    return {component: gr.update() for component in outputs}


def field_note(elem_id: str) -> Any:
    """A one-line note right under a form's fields: what is wrong with what was typed, where the eye is (the
    tab's status box can be below the fold). Each action replaces it; empty, it takes no room."""
    return gr.Markdown("", elem_id=elem_id, latex_delimiters=[], elem_classes=["rr-field-note"])


def source_choices(services: Services, *, current: str = "") -> Any:
    """A Dropdown update listing the data sets (keeping `current` selected when it is one)."""
    names = services.judging.sources()
    return gr.update(choices=names, value=current if current in names else (names[0] if names else None))
