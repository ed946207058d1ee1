"""Preference labels as data sets write them, read into (label, tie).

    read_label("A>B") -> (1, False);  read_label("tie") -> (None, True);  read_label(-2, "score") -> (1, False)

A scheme says how numbers are meant; strings that name a side ("A", "model_b", "B>A",
"response_1") are read the same under every named scheme. A value map says what each value means,
for sets coded in their own way (Auto-J: 0 = the first is better, 1 = the second, 2 = a tie):

    read_label(2, "0=1,1=2,2=tie") -> (None, True);  read_label("x", "0=1,1=2,2=tie") -> InputError

Under a value map only the values it names are read (an empty cell is unlabelled). A refusal says what
kind of value the cell holds, never the value (`value_kind`): the file may not be the caller's to read.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from reflectrm.core.types import Choice, value_kind
from reflectrm.errors import InputError

LABEL_SCHEMES = {
    "auto": "1/2 (also A/B, 'A>B', model_a/model_b, 'tie'); 0 is refused as ambiguous",
    "index0": "0 = response_1, 1 = response_2 (0-based, as `datasets` ClassLabel columns)",
    "012": "0 = tie, 1 = response_1, 2 = response_2",
    "score": "a signed preference score: < 0 prefers response_1, 0 is a tie, > 0 prefers response_2 (HelpSteer3)",
}
"""How a label column's numbers are read (`--labels SCHEME`); `--labels VALUE=MEANING,...` is a value map."""

LABEL_MAP_HELP = "VALUE=MEANING,...: each value and what it means (1, 2, tie or none), e.g. 0=1,1=2,2=tie (Auto-J)"

_NAMED = {
    "1": 1, "2": 2, "a": 1, "b": 2, "a>b": 1, "b>a": 2, "a>>b": 1, "b>>a": 2, "a<b": 2, "b<a": 1,
    "model_a": 1, "model_b": 2, "response_1": 1, "response_2": 2, "response1": 1, "response2": 2,
    "response a": 1, "response b": 2, "output_1": 1, "output_2": 2,
}
_TIES = {"tie", "draw", "a=b", "a==b", "b=a", "equal", "tie (bothbad)", "both_bad", "both bad", "tie(bothbad)"}


_MEANINGS: dict[str, tuple[Choice | None, bool]] = {
    "1": (1, False), "first": (1, False), "a": (1, False), "response_1": (1, False),
    "2": (2, False), "second": (2, False), "b": (2, False), "response_2": (2, False),
    "tie": (None, True), "none": (None, False),
}
_MAP_HINT = "write --labels VALUE=MEANING,... with meanings 1, 2, tie or none, e.g. --labels 0=1,1=2,2=tie"
SUGGESTED_MAP = "--labels 0=1,1=2,2=tie (Auto-J: 0 = first better, 1 = second, 2 = tie)"


def check_scheme(scheme: str) -> None:
    """Raise `InputError` unless `scheme` is a named scheme or a valid value map."""
    if "=" in scheme:
        parse_value_map(scheme)
    elif scheme not in LABEL_SCHEMES:
        raise InputError(f"label scheme {scheme!r} is unknown: use one of {', '.join(LABEL_SCHEMES)}, "
                         f"or a value map ({_MAP_HINT})")


@functools.lru_cache(maxsize=32)  # read once per file, not once per cell
def parse_value_map(text: str) -> dict[str, tuple[Choice | None, bool]]:
    """`"0=1,1=2,2=tie"` -> {"0": (1, False), "1": (2, False), "2": (None, True)}, keys written by `_key`."""
    out: dict[str, tuple[Choice | None, bool]] = {}
    for item in text.split(","):
        value, sep, meaning = (part.strip() for part in item.partition("="))
        if not sep or not value or meaning.lower() not in _MEANINGS:
            raise InputError(f"--labels item {item.strip()!r} is not VALUE=MEANING: {_MAP_HINT}")
        if _key(value) in out:
            raise InputError(f"--labels names the value {value!r} twice: give each value one meaning")
        out[_key(value)] = _MEANINGS[meaning.lower()]
    return out


def _key(value: Any) -> str:
    """A cell as a value-map key: numbers by value (0, 0.0 and "0" alike), text trimmed and lower-cased."""
    if isinstance(value, bool):
        return str(value).lower()
    text = value.strip().lower() if isinstance(value, str) else str(value)
    try:
        number = float(text)
    except ValueError:
        return text
    return str(int(number)) if number.is_integer() else str(number)


def read_label(value: Any, scheme: str = "auto") -> tuple[Choice | None, bool]:
    """(label, tie) for one cell; (None, False) for an empty cell.

    Raises:
        InputError: the value names no side under `scheme` (the message lists what is accepted).
    """
    check_scheme(scheme)
    if value is None or (isinstance(value, float) and math.isnan(value)) or (isinstance(value, str)
                                                                               and not value.strip()):
        return None, False
    if "=" in scheme:
        table = parse_value_map(scheme)
        if _key(value) not in table:
            raise InputError(f"label ({value_kind(value)}) is not in --labels {scheme}: add what it means to the map")
        return table[_key(value)]
    if isinstance(value, bool):
        raise InputError("label is a boolean: give 1/2, A/B or a --labels scheme that says what it means")
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
                "label must be 1 or 2 (or A/B, 'A>B', model_a/model_b, 'tie'), got text that names no side: fix the cell"
            ) from None
    return _numeric(value, scheme)


def _numeric(value: Any, scheme: str) -> tuple[Choice | None, bool]:
    if not isinstance(value, (int, float)):
        raise InputError(f"label is {value_kind(value)}: give a number or a side name")
    if scheme == "score":
        return (None, True) if value == 0 else ((1, False) if value < 0 else (2, False))
    table = {"auto": {1: 1, 2: 2}, "index0": {0: 1, 1: 2}, "012": {1: 1, 2: 2}}[scheme]
    if scheme == "012" and value == 0:
        return None, True
    if float(value).is_integer() and int(value) in table:
        return table[int(value)], False  # type: ignore[return-value]
    if scheme == "auto" and value == 0:
        raise InputError(f"label 0 is ambiguous: say what each value means with a value map, e.g. {SUGGESTED_MAP}")
    if scheme == "auto":
        raise InputError("label must be 1 or 2 (or A/B, 'A>B', model_a/model_b, 'tie'), got another number; "
                         f"or say what each value means, e.g. {SUGGESTED_MAP}")
    raise InputError(f"label ({value_kind(value)}) is not valid under --labels {scheme} ({LABEL_SCHEMES[scheme]}); "
                     f"say what each value means instead, e.g. {SUGGESTED_MAP}")
