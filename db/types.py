"""Column types that store any Python string losslessly on SQLite and PostgreSQL.

PostgreSQL `text` cannot hold NUL (U+0000), and neither PostgreSQL nor SQLite's UTF-8 encoding
can hold a lone surrogate (U+D800..U+DFFF, which Python strings allow). Model outputs and imported
data may contain both. `LosslessText` stores such a string as a marker followed by its JSON
encoding (`"\\u0000"`, `"\\ud800"`), and decodes it on the way out. Every other string is stored as
is, so the database stays readable with plain SQL. A string that happens to begin with the marker
is escaped too, which keeps the encoding unambiguous. The same encoding is used on both databases,
so a row means the same thing whichever database holds it.

JSON columns (`JSONText`) are text holding `json.dumps` output: JSON escapes NUL, and PostgreSQL's
`jsonb` would reject `\\u0000`, so the store does not use it.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime, Text
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

ESCAPE_MARKER = "\ufdd0json:"
"""Prefix of an escaped string. U+FDD0 is a Unicode noncharacter, so real text rarely starts with it."""

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def encode_text(value: str) -> str:
    """The stored form of `value` (itself unless it holds NUL, a lone surrogate, or starts with the marker)."""
    if _UNSTORABLE.search(value) is None and not value.startswith(ESCAPE_MARKER):
        return value
    return ESCAPE_MARKER + json.dumps(value, ensure_ascii=_SURROGATE.search(value) is not None)


def decode_text(stored: str) -> str:
    """Inverse of `encode_text`."""
    if stored.startswith(ESCAPE_MARKER):
        return json.loads(stored[len(ESCAPE_MARKER) :])
    return stored


def dumps_json(value: Any) -> str:
    """JSON text storable on both databases (NUL is escaped by JSON; lone surrogates too, when present)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if _SURROGATE.search(text) is not None:
        text = json.dumps(value, separators=(",", ":"))
    return text


class LosslessText(TypeDecorator[str]):
    """Text that round-trips every Python string, NUL and lone surrogates included."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return None if value is None else encode_text(value)

    def process_result_value(self, value: str | None, dialect: Dialect) -> str | None:
        return None if value is None else decode_text(value)


class JSONText(TypeDecorator[Any]):
    """A JSON value stored as text (see the module docstring for why not `json`/`jsonb`)."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        return None if value is None else dumps_json(value)

    def process_result_value(self, value: str | None, dialect: Dialect) -> Any:
        return None if value is None else json.loads(value)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp (SQLite stores it naive; it comes back aware)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("timestamps must be timezone-aware: use datetime.now(UTC)")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)
