"""The named endpoints for `gradio_client` (/judge, /audit, /correct, /rejudge): one module over the services.

An input error reaches the client as the same one-line message the UI shows (a `gr.Error`, which
Gradio passes on even without verbose error reporting). With a login on, a correction's author is
the logged-in user: the audit trail cannot be forged through the API.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from typing import Any, TypeVar

import gradio as gr

from reflectrm_app.ui import views
from reflectrm_app.records import JudgeResult
from reflectrm_app.services import Services
from reflectrm_app.ui.forms import build_pair
from reflectrm_app.ui.tabs.common import user_of
from reflectrm.core.config import MAX_ROW_ID
from reflectrm.errors import InputError, ReflectRMError

F = TypeVar("F", bound=Callable[..., Any])


def one_line_errors(fn: F) -> F:
    """Our errors as `gr.Error(message)`: the client sees the message, not "verbose error reporting"."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ReflectRMError as exc:
            raise gr.Error(str(exc), print_exception=False) from exc

    return wrapper  # type: ignore[return-value]


def whole(value: Any, name: str) -> int:
    """An endpoint's whole-number argument, as a client may send it (5, 5.0 or "5"); anything else is named."""
    if isinstance(value, bool):
        value = None
    try:
        number = int(value) if isinstance(value, int) or (isinstance(value, float) and value.is_integer()) \
            else int(str(value).strip())
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a whole number, got {value!r}") from None
    return number


def text(value: Any, name: str) -> str:
    """An endpoint's text argument (None reads as empty)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InputError(f"{name} must be text, got {value!r}")
    return value


def _label(value: Any) -> int | None:
    number = whole(value, "label")
    if number not in (0, 1, 2):
        raise InputError(f"label must be 0 (unknown), 1 or 2, got {number}")
    return number or None


def name_missing_values(blocks: gr.Blocks) -> None:
    """A call with too few values answers with one line naming the endpoint and the count, not `{"error": null}`
    and a server traceback (Gradio checks the count before any handler runs, so it is said here)."""
    check = blocks.validate_inputs

    def validate(block_fn: Any, inputs: list[Any]) -> None:
        if len(inputs) < len(block_fn.inputs):
            names = ", ".join(p for p in inspect.signature(block_fn.fn).parameters if p != "request")
            raise gr.Error(f"/{block_fn.api_name} takes {len(block_fn.inputs)} values ({names}), got {len(inputs)}",
                           print_exception=False)
        check(block_fn, inputs)

    blocks.validate_inputs = validate  # type: ignore[method-assign]


def _judged(result: JudgeResult) -> dict[str, Any]:
    return {"judgment_id": result.judgment_id, "judgment": result.judgment.to_dict()}


def _marks(text: str) -> dict[int, str]:
    if not text.strip():
        return {}
    try:
        parsed = json.loads(text)
        return {int(k): v for k, v in parsed.items()}
    except (json.JSONDecodeError, AttributeError, ValueError) as exc:
        raise InputError(f'marks must be a JSON object like {{"3": "right", "5": "wrong"}}, got {text[:60]!r}') from exc


def _row_id(value: Any, *, name: str) -> int:
    """A stored row's id exactly as sent: a JSON integer (2.7, "2", true and 1e30 are refused, not rounded)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_ROW_ID:
        raise InputError(f"{name} must be a whole number from 1 to 2**63-1 (a JSON integer), got {str(value)[:40]!r}")
    return value


def _verdict(value: Any) -> int:
    """A person's verdict: the JSON integer 1 or 2."""
    if isinstance(value, bool) or value not in (1, 2) or not isinstance(value, int):
        raise InputError(f"verdict must be 1 or 2 (a JSON integer), got {str(value)[:40]!r}")
    return value


def _pair(query: Any, response_1: Any, response_2: Any, messages: Any, label: Any) -> Any:
    return build_pair(query=text(query, "query"), messages=text(messages, "messages"),
                      response_1=text(response_1, "response_1"), response_2=text(response_2, "response_2"),
                      label=_label(label))


def register(services: Services) -> None:
    """Add the named endpoints to the Blocks being built."""

    @one_line_errors
    def judge(query: str, response_1: str, response_2: str, messages: str = "", strategy: str = "reflectrm",
              seed: int = 0, label: int = 0) -> dict:
        """Judge a pair (query, or messages as a JSON list of turns) and record it; returns the judgment."""
        pair = _pair(query, response_1, response_2, messages, label)
        return _judged(services.judging.judge(pair, strategy=text(strategy, "strategy"), seed=whole(seed, "seed")))

    @one_line_errors
    def audit(query: str, response_1: str, response_2: str, messages: str = "", seed: int = 0, label: int = 0) -> dict:
        """Judge a pair in both orders; returns both judgments and whether they are consistent."""
        pair = _pair(query, response_1, response_2, messages, label)
        result = services.audit.audit(pair, seed=whole(seed, "seed"))
        return {"consistent": result.agree, "banner": views.audit_banner(result),
                "original": _judged(result.original), "swapped": _judged(result.swapped)}

    @one_line_errors
    def correct(judgment_id: int, verdict: int, author: str = "", note: str = "", marks: str = "",
                request: gr.Request = None) -> dict:  # type: ignore[assignment]
        """Record (or edit) a person's verdict on a judgment; marks: JSON {"3": "right", "5": "wrong"}.
        With a login on, the author is the logged-in user whatever `author` says."""
        record = services.review.correct(_row_id(judgment_id, name="judgment_id"), verdict=_verdict(verdict),
                                  author=user_of(request) or text(author, "author") or "api",
                                  note=text(note, "note"), marks=_marks(text(marks, "marks")))
        return {"correction_id": record.id, "judgment_id": record.judgment_id, "verdict": record.verdict,
                "author": record.author, "revision": record.revision,
                "marks": {str(k): v for k, v in record.marks.items()},
                "preference_example_ids": list(record.preference_example_ids),
                "reflection_pair_ids": list(record.reflection_pair_ids)}

    @one_line_errors
    def rejudge(judgment_id: int, strategy: str) -> dict:
        """A stored judgment re-aggregated with another strategy (generates only what it lacks)."""
        result = services.judging.reaggregate(_row_id(judgment_id, name="judgment_id"), text(strategy, "strategy"))
        return {"judgment_id": judgment_id, "generated": result.generated, "judgment": result.judgment.to_dict()}

    gr.api(judge, api_name="judge", concurrency_limit=4)
    gr.api(audit, api_name="audit", concurrency_limit=4)
    gr.api(correct, api_name="correct", concurrency_limit=8)
    gr.api(rejudge, api_name="rejudge", concurrency_limit=4)
