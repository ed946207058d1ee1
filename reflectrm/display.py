"""Text from data, made safe to show: one function for every line a command prints and every Markdown report.

    print(printable(f"imported {n} pair(s) from {path}"))        # one line: a newline in the data shows as \\u000a
    print(printable(json.dumps(obj, indent=2), lines=True))      # many lines: newlines and tabs kept

A pair's text, a model's output, an id, a data-set name or a message quoting any of them can hold
characters a terminal obeys instead of drawing: ESC and CSI sequences (clear the screen, recolour,
set the window title, rewrite the scroll-back), BEL, backspace and carriage return (overwrite what
was printed), NUL. Bidirectional controls (U+202A-U+202E, U+2066-U+2069, U+200E, U+200F, U+061C)
reorder how a terminal or a Markdown viewer draws a line, so a verdict or an id could read as another;
they are shown too. Right-to-left letters themselves (Arabic, Hebrew) are drawn as they are.

Each such character is shown as its JSON escape (ESC as \\u001b): readable, and still valid inside a
JSON string, so JSON output passed through `printable` parses to the same values. A lone surrogate
(which no UTF-8 stream can carry) is shown the same way. Backslashes are left as they are: the text
is for reading, not for parsing back.
"""

from __future__ import annotations

import re

_SHOWN = r"\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
"""DEL, the C1 controls (\\x9b is a one-byte CSI on many terminals), the bidirectional controls and lone surrogates
(no UTF-8 stream can carry one): shown in every text."""
_ONE_LINE = re.compile(rf"[\x00-\x1f{_SHOWN}]")  # every C0 control, newline and tab included
_LINES = re.compile(rf"[\x00-\x08\x0b-\x1f{_SHOWN}]")  # keeps tab (\x09) and newline (\x0a); \r is shown


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def printable(text: object, *, lines: bool = False) -> str:
    """`text` with every control character shown as its `\\uXXXX` escape; other text is left as it is.

    Args:
        text: any value (shown as `str(text)`).
        lines: the text legitimately spans lines (a rendered judgment, a report, indented JSON): keep newline
            and tab. Otherwise every control is shown, newline and tab too, so one field stays on one line.
    """
    return (_LINES if lines else _ONE_LINE).sub(_escape, str(text))


def escape_unencodable(error: UnicodeError) -> tuple[str, int]:
    """A codec error handler: what a stream's encoding cannot write is written as JSON escapes (past U+FFFF as a
    surrogate pair), so printed JSON stays JSON whatever the terminal's encoding (`\\U0001f600`, what Python's
    `backslashreplace` writes, is not JSON)."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    escaped = []
    for char in error.object[error.start:error.end]:
        code = ord(char)
        if code > 0xFFFF:
            code -= 0x10000
            escaped.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
        else:
            escaped.append(f"\\u{code:04x}")
    return "".join(escaped), error.end
