"""Read pairs from JSONL, CSV or Parquet with a column mapping. Pure file reading: no database.

    pairs = read_pair_file(Path("hs3.csv"), mapping=parse_mapping("query=prompt,response_1=a,response_2=b"))

Every row is validated before anything is stored: a malformed row raises `InputError` naming the
file and the row (its 1-based line in a JSONL file, its 1-based data row in CSV and Parquet).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from db.formats import IMPORT_FIELDS, IMPORT_SUFFIXES
from reflectrm.core.types import PreferencePair
from reflectrm.errors import InputError, require

_OPTIONAL = ("id", "messages", "label", "source", "subset")


def parse_mapping(text: str | None) -> dict[str, str]:
    """`"query=question,response_1=a"` -> {"query": "question", "response_1": "a"}."""
    mapping: dict[str, str] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        field, sep, column = (part.strip() for part in item.partition("="))
        if not sep or not field or not column:
            raise InputError(
                f"--map item {item.strip()!r} is not FIELD=COLUMN: write e.g. --map query=question,response_1=a"
            )
        if field not in IMPORT_FIELDS:
            raise InputError(f"--map field {field!r} is unknown: map one of {', '.join(IMPORT_FIELDS)}")
        if field in mapping:
            raise InputError(f"--map names {field!r} twice: map each field once")
        mapping[field] = column
    return mapping


def read_pair_file(
    path: Path, *, mapping: Mapping[str, str] | None = None, source: str | None = None
) -> list[PreferencePair]:
    """Every pair of a file, validated; `source` applies to rows that give none (default: the file's stem).

    Raises:
        InputError: the file is missing, of an unknown type, empty, or a row is malformed (named by number).
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"import file {str(path)!r} does not exist: check the path")
    kind = IMPORT_SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise InputError(f"{path.name}: unknown file type {path.suffix!r}: import .jsonl, .csv or .parquet")
    mapping = dict(mapping or {})
    default_source = source if source is not None else path.stem
    pairs, seen = [], {}
    rows = {"jsonl": _jsonl_rows, "csv": _csv_rows, "parquet": _parquet_rows}[kind](path)
    for number, row in rows:
        try:
            pair = PreferencePair.from_dict(_record(row, mapping, default_source))
        except InputError as exc:
            raise InputError(f"{path}: row {number}: {exc}") from exc
        if pair.id in seen:
            raise InputError(
                f"{path}: row {number}: id {pair.id!r} is also row {seen[pair.id]}: give every pair a unique id"
            )
        seen[pair.id] = number
        pairs.append(pair)
    if not pairs:
        raise InputError(f"{path} holds no rows: add rows with a query, response_1 and response_2")
    return pairs


def _record(row: Mapping[str, Any], mapping: Mapping[str, str], default_source: str) -> dict[str, Any]:
    """The pair fields of one row, named as `PreferencePair.from_dict` expects."""
    record: dict[str, Any] = {}
    for field in IMPORT_FIELDS:
        column = mapping.get(field, field)
        if column not in row:
            if field in mapping:
                raise InputError(f"no column {column!r} (from --map {field}={column}): fix the mapping or the file")
            continue
        value = _clean(row[column])
        if value is None or (value == "" and field in _OPTIONAL):  # an empty CSV cell is a missing value
            continue
        record[field] = value
    if isinstance(record.get("messages"), str):
        try:
            record["messages"] = json.loads(record["messages"])
        except json.JSONDecodeError as exc:
            raise InputError(f"'messages' is not a JSON list ({exc.msg}): give a list of {{role, content}}") from exc
    if "label" in record:
        record["label"] = _label(record["label"])
    if "id" in record and not isinstance(record["id"], str):
        record["id"] = str(record["id"])
    record.setdefault("source", default_source)
    return record


def _clean(value: Any) -> Any:
    """None for a missing cell (None, or NaN from a numeric Parquet column)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def _label(value: Any) -> Any:
    if isinstance(value, str):
        value = value.strip()
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}: row {number}: not valid JSON ({exc.msg}): fix or remove the line") from exc
            if not isinstance(row, dict):
                raise InputError(f"{path}: row {number}: a row must be a JSON object, got {type(row).__name__}")
            yield number, row


def _csv_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh, strict=True)
        try:
            for number, row in enumerate(reader, 1):
                if None in row:
                    raise InputError(
                        f"{path}: row {number}: more cells than header columns: quote cells that hold commas"
                    )
                if any(v is None for v in row.values()):
                    raise InputError(f"{path}: row {number}: fewer cells than header columns: fill every column")
                yield number, row
        except csv.Error as exc:
            raise InputError(f"{path}: line {reader.line_num}: not valid CSV ({exc}): fix the quoting") from exc


def _parquet_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    pq = require("pyarrow.parquet", extra="store")
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowIOError / ArrowInvalid
        raise InputError(f"{path}: not a readable Parquet file ({exc}): export it again") from exc
    yield from enumerate(table.to_pylist(), 1)
