"""Form fields to typed values: what the tabs and the named API read from text, numbers and checkboxes.

The services take typed values (a `PreferencePair`, ids, dates, marks); a field that does not parse is refused
here in one line that names the field and the fix. No Gradio here: the API and the tests parse alike.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import date
from typing import Any

from reflectrm_app.records import TrainRequest
from reflectrm.core.types import Choice, PreferencePair
from reflectrm.errors import InputError
from reflectrm.files.inputs import unique_keys
from reflectrm.training.recipe import Mark

MAX_INPUT_CHARS = 100_000
"""Characters a pair from the form or the API may hold in all (checked before any tokenising)."""


def build_pair(
    *,
    query: str,
    messages: str,
    response_1: str,
    response_2: str,
    label: Choice | None = None,
    base: Mapping[str, Any] | None = None,
) -> PreferencePair:
    """The pair the Judge form describes.

    Args:
        messages: a JSON list of {role, content} turns ending in a user turn; overrides `query` when given.
        base: the data-set pair the form was filled from; its id, source and subset are kept while the
            texts are unchanged.
    """
    size = len(query) + len(messages) + len(response_1) + len(response_2)
    if size > MAX_INPUT_CHARS:
        raise InputError(f"the pair holds {size:,} characters, over the app's limit of {MAX_INPUT_CHARS:,}: "
                         "shorten the texts (or judge long pairs with `reflectrm judge --input`)")
    fields: dict[str, Any] = {"response_1": response_1, "response_2": response_2, "label": label}
    if messages.strip():
        try:
            fields["messages"] = json.loads(messages, object_pairs_hook=unique_keys)  # a key given twice: refused
        except json.JSONDecodeError as exc:
            raise InputError(f"the conversation is not valid JSON ({exc.msg}): give a list of "
                             '{"role": ..., "content": ...} turns ending in a user turn') from exc
    else:
        fields["query"] = query
    pair = PreferencePair.from_dict(fields)
    if base and PreferencePair.from_dict(base).fingerprint() == pair.fingerprint():
        _refuse_a_relabelled_copy(PreferencePair.from_dict(base), label)
        pair = replace(pair, id=base.get("id") or pair.id, source=base.get("source") or "", subset=base.get("subset") or "")
    elif not pair.source:
        pair = replace(pair, source="manual")
    return pair


def _refuse_a_relabelled_copy(picked: PreferencePair, label: Choice | None) -> None:
    """Judging a picked pair under another known label would store a second copy of it with that label."""
    if label != picked.label:
        known = "unknown" if picked.label is None else f"Response {picked.label}"
        raise InputError(f"pair {picked.id or '(no id)'} of data set {picked.source or '(none)'} is labelled {known} "
                         f"there; judging it as another label would add a second copy: set Known better response "
                         f"back to {known} (to say the label is wrong, judge it and correct it in the Review queue)")


def parse_marks(right: Sequence[int], wrong: Sequence[int]) -> dict[int, Mark]:
    """Marks keyed by rollout position from the two checkbox groups; one analysis cannot be both."""
    both = sorted(set(right) & set(wrong))
    if both:
        raise InputError(f"analysis #{both[0]} is marked both right and wrong: untick one of them")
    return {**{int(i): "right" for i in right}, **{int(i): "wrong" for i in wrong}}


def parse_ids(text: str) -> list[int]:
    """"3, 5 7" -> [3, 5, 7]."""
    try:
        return [int(t) for t in text.replace(",", " ").split()]
    except ValueError as exc:
        raise InputError(f"example ids must be whole numbers separated by commas, got {text!r}") from exc


def parse_day(text: str, what: str) -> date | None:
    if not text.strip():
        return None
    try:
        return date.fromisoformat(text.strip())
    except ValueError as exc:
        raise InputError(f"{what} must be a date like 2026-11-30, got {text!r}") from exc


def whole(value: Any, what: str, *, minimum: int | None = None) -> int:
    """A form number that must be a whole number (a clear error instead of a silent cut)."""
    if value is None or value == "":
        raise InputError(f"{what} is empty: give a whole number")
    if float(value) != int(float(value)):
        raise InputError(f"{what} must be a whole number, got {value!r}")
    number = int(float(value))
    if minimum is not None and number < minimum:
        raise InputError(f"{what} must be at least {minimum}, got {number}")
    return number


def judgment_number(value: Any) -> int | None:
    """A judgment id typed or shown in a form: None when empty (never 0 for "no judgment")."""
    if value is None or str(value).strip().lstrip("#") == "":
        return None
    try:
        number = int(str(value).strip().lstrip("#"))
    except ValueError as exc:
        raise InputError(f"a judgment number is a whole number like 12, got {value!r}") from exc
    if number < 1:
        raise InputError(f"judgment numbers start at 1, got {number}")
    return number


def run_number(value: Any, field: str) -> int:
    """A run id typed or clicked into a form field (named in the error when it is empty or not a number)."""
    text = "" if value is None else str(value).strip()
    if not text:
        raise InputError(f'"{field}" is empty: click a run in Runs (or type its number)')
    if not text.isdigit() or int(text) < 1:
        raise InputError(f'"{field}" must be a run number like 3, got {text!r}')
    return int(text)


def train_request(snap: Any, model: Any, steps: Any, rate: Any, use_lora: Any, prompts: Any, size: Any, tokens: Any,
                  every: Any, ckpt: Any, budget: Any, decayed: Any, dtype: Any, chosen_mix: Any,
                  both: Any = False) -> TrainRequest:
    """The Train form's fields (in `train.FORM_FIELDS`' order) as a request; a size that is not a whole number is
    named."""
    return TrainRequest.from_form(
        snapshot=snap or "", base_model=model or "", max_steps=whole(steps, "max steps", minimum=1),
        learning_rate=float(rate or 0), lora=bool(use_lora),
        batch_size=whole(prompts, "prompts per step", minimum=1),
        num_generations=whole(size, "group size", minimum=2),
        max_completion_length=whole(tokens, "max completion tokens", minimum=1),
        save_steps=whole(every, "checkpoint every N steps", minimum=1), gradient_checkpointing=bool(ckpt),
        max_minutes=float(budget or 0), decay_over_time=bool(decayed), precision=dtype or "auto",
        mix=chosen_mix or "paper", both_orders=bool(both))
