"""Preference labels as data sets write them, read into (label, tie).

    read_label("A>B") -> (1, False);  read_label("tie") -> (None, True);  read_label(-2, "score") -> (1, False)

A scheme says how numbers are meant; strings that name a side ("A", "model_b", "B>A",
"response_1") are read the same under every scheme.
"""

from __future__ import annotations

import math
from typing import Any

from reflectrm.core.types import Choice
from reflectrm.errors import InputError

LABEL_SCHEMES = {
    "auto": "1/2 (also A/B, 'A>B', model_a/model_b, 'tie'); 0 is refused as ambiguous",
    "index0": "0 = response_1, 1 = response_2 (0-based, as `datasets` ClassLabel columns)",
    "012": "0 = tie, 1 = response_1, 2 = response_2",
    "score": "a signed preference score: < 0 prefers response_1, 0 is a tie, > 0 prefers response_2 (HelpSteer3)",
}
"""How a label column's numbers are read (`--labels SCHEME`)."""

_NAMED = {
    "1": 1, "2": 2, "a": 1, "b": 2, "a>b": 1, "b>a": 2, "a>>b": 1, "b>>a": 2, "a<b": 2, "b<a": 1,
    "model_a": 1, "model_b": 2, "response_1": 1, "response_2": 2, "response1": 1, "response2": 2,
    "response a": 1, "response b": 2, "output_1": 1, "output_2": 2,
}
_TIES = {"tie", "draw", "a=b", "a==b", "b=a", "equal", "tie (bothbad)", "both_bad", "both bad", "tie(bothbad)"}


def read_label(value: Any, scheme: str = "auto") -> tuple[Choice | None, bool]:
    """(label, tie) for one cell; (None, False) for an empty cell.

    Raises:
        InputError: the value names no side under `scheme` (the message lists what is accepted).
    """
    if scheme not in LABEL_SCHEMES:
        raise InputError(f"label scheme {scheme!r} is unknown: use one of {', '.join(LABEL_SCHEMES)}")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None, False
    if isinstance(value, bool):
        raise InputError(f"label {value!r} is a boolean: give 1/2, A/B or a --labels scheme that says what it means")
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "":
            return None, False
        if text in _TIES:
            return None, True
        if text in _NAMED and not (scheme != "auto" and text in ("1", "2")):
            return _NAMED[text], False  # type: ignore[return-value]
        try:
            value = float(text)
        except ValueError:
            raise InputError(
                f"label must be 1 or 2 (or A/B, 'A>B', model_a/model_b, 'tie'), got {value!r}: fix the cell"
            ) from None
    return _numeric(value, scheme)


def _numeric(value: Any, scheme: str) -> tuple[Choice | None, bool]:
    if not isinstance(value, (int, float)):
        raise InputError(f"label {value!r} is a {type(value).__name__}: give a number or a side name")
    if scheme == "score":
        return (None, True) if value == 0 else ((1, False) if value < 0 else (2, False))
    table = {"auto": {1: 1, 2: 2}, "index0": {0: 1, 1: 2}, "012": {1: 1, 2: 2}}[scheme]
    if scheme == "012" and value == 0:
        return None, True
    if float(value).is_integer() and int(value) in table:
        return table[int(value)], False  # type: ignore[return-value]
    if scheme == "auto" and value == 0:
        raise InputError("label 0 is ambiguous: pass --labels index0 (0 = response_1) or --labels 012 (0 = tie)")
    if scheme == "auto":
        raise InputError(f"label must be 1 or 2 (or A/B, 'A>B', model_a/model_b, 'tie'), got {value!r}")
    raise InputError(f"label {value!r} is not valid under --labels {scheme} ({LABEL_SCHEMES[scheme]})")
