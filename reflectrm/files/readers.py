"""Rows of labelled pairs from a file or folder, with a column mapping that also maps label values.

    pairs = read_pairs(Path("hs3.csv"), mapping={"query": "prompt", "label": "overall preference"}, labels="score")

Formats: JSONL, a JSON array, CSV (a UTF-8 byte-order mark, as Excel writes it, is dropped), Parquet,
and a folder written by `datasets`' `save_to_disk`. Column names may hold spaces. Every row is
validated before anything is returned: a malformed row raises `InputError` naming the file and
the row (its line in a JSONL file, its 1-based position in the other formats). Every read is bounded
before it happens (`reflectrm.files.inputs`): a FIFO or device is refused at once, a line or a file past its
bound is refused after reading the bound, and Parquet is checked from its metadata and read in batches.
An id is kept as written (`0`, `false` and `0.0` are ids, never replaced by a content hash).
A refusal names the row and the field, never a cell's value: a reader may be pointed at a file its
caller may not read (the app's Evaluate tab), and a message is all it would see of it.
"""

from __future__ import annotations

import csv
import math
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reflectrm.core.types import MAX_PAIR_CHARS, Choice, PreferencePair, id_text, value_kind
from reflectrm.errors import InputError, require
from reflectrm.files.labels import check_scheme, read_label
from reflectrm.files.inputs import MAX_ROWS, byte_lines, check_head, check_text, decode, loads, open_regular, read_text

PAIR_FIELDS = ("id", "query", "messages", "response_1", "response_2", "label", "source", "subset")
"""Pair fields a column can map to (`--map FIELD=COLUMN`); an unmapped field is read from its own column."""

SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv", ".parquet": "parquet",
            ".jsonl.gz": "jsonl"}
_OPTIONAL = ("id", "messages", "label", "source", "subset")
JOINABLE = ("query", "label")
"""Fields that may name several columns joined by '+' (`query=instruction+input`, `label=a1+a2+a3`)."""

Row = dict[str, Any]
_PARQUET_BATCH = 4096  # rows converted to Python at a time


def file_kind(path: Path) -> str | None:
    """'jsonl', 'json', 'csv', 'parquet' or 'datasets' (a saved folder); None for anything else."""
    if path.is_dir():
        return "datasets" if any((path / n).exists() for n in ("dataset_info.json", "dataset_dict.json",
                                                               "state.json")) else None
    name = path.name.lower()
    return next((k for s, k in SUFFIXES.items() if name.endswith(s) and (s != ".json" or not name.endswith(".jsonl"))),
                None)


def read_rows(path: Path, *, split: str | None = None) -> Iterator[tuple[int, Row]]:
    """(row number, row) for every row of a file or saved `datasets` folder.

    Raises:
        InputError: the path is missing, of an unknown type, or not readable as its type, or a row is not one.
    """
    return _raising(path, rows_or_errors(path, split=split))  # the path is checked now, the rows as they come


def _raising(path: Path, rows: Iterator[tuple[int, Row | InputError]]) -> Iterator[tuple[int, Row]]:
    for number, row in rows:
        if isinstance(row, InputError):
            raise InputError(f"{path}: row {number}: {row}")
        yield number, row


def rows_or_errors(path: Path, *, split: str | None = None) -> Iterator[tuple[int, Row | InputError]]:
    """As `read_rows`, but a row that is not one (bad JSON, wrong cell count) comes as its `InputError`.

    Raises:
        InputError: the file as a whole cannot be read (missing, unknown type, not a regular file, past a bound).
    """
    path = Path(path)
    if not os.path.lexists(path):
        raise InputError(f"data file {str(path)!r} does not exist: check the path")
    kind = file_kind(path)
    if kind is None and path.is_dir():
        raise InputError(f"{str(path)!r} is a folder, not a `datasets` folder (saved with save_to_disk): "
                         "check the path")
    if kind is None:
        raise InputError(f"{path.name}: unknown file type: give .jsonl, .json, .csv, .parquet or a `datasets` folder")
    if kind == "datasets":
        return _bounded(path, _datasets_rows(path, split))
    return _bounded(path, {"jsonl": _jsonl_rows, "json": _json_rows, "csv": _csv_rows,
                           "parquet": _parquet_rows}[kind](path))


def _bounded(path: Path, rows: Iterator[tuple[int, Row]]) -> Iterator[tuple[int, Row]]:
    for count, item in enumerate(rows, 1):
        if count > MAX_ROWS:
            raise InputError(f"{path}: over {MAX_ROWS:,} rows: split the file")
        yield item


@dataclass(frozen=True, slots=True)
class PairFile:
    """The pairs read from a file, and the rows skipped (with `skip_invalid`) as (row number, reason)."""

    pairs: list[PreferencePair]
    skipped: list[tuple[int, str]]

    def label_counts(self) -> dict[str, int]:
        """Pairs per label: first, second, tie, none (so a wrong --labels mapping shows at once)."""
        return label_counts(self.pairs)


def label_counts(pairs: Iterable[PreferencePair]) -> dict[str, int]:
    """{"first": n, "second": n, "tie": n, "none": n} over `pairs`."""
    counts = dict.fromkeys(("first", "second", "tie", "none"), 0)
    for p in pairs:
        counts["tie" if p.tie else {1: "first", 2: "second"}.get(p.label, "none")] += 1  # type: ignore[arg-type]
    return counts


def format_counts(counts: Mapping[str, int]) -> str:
    """`labels: first 3, second 2, tie 1, none 0`."""
    return "labels: " + ", ".join(f"{k} {v}" for k, v in counts.items())


def read_pairs(
    path: Path,
    *,
    mapping: Mapping[str, str] | None = None,
    labels: str = "auto",
    source: str | None = None,
    split: str | None = None,
    for_judging: bool = True,
) -> list[PreferencePair]:
    """Every pair of a file, validated; `source` applies to rows that give none (default: the file's stem).
    `for_judging` refuses text a model cannot read (a lone surrogate); the store keeps such text as written.

    Raises:
        InputError: as `read_rows`, or the file is empty, a row is malformed, or two rows share an id.
    """
    return load_pairs(path, mapping=mapping, labels=labels, source=source, split=split,
                      for_judging=for_judging).pairs


def load_pairs(
    path: Path,
    *,
    mapping: Mapping[str, str] | None = None,
    labels: str = "auto",
    source: str | None = None,
    split: str | None = None,
    skip_invalid: bool = False,
    for_judging: bool = True,
) -> PairFile:
    """`read_pairs` with its skipped rows: strict by default; `skip_invalid` skips each invalid row with its reason.

    Raises:
        InputError: as `read_pairs` (with `skip_invalid`, only for the file as a whole, or no valid row).
    """
    path = Path(path)
    mapping = dict(mapping or {})
    check_scheme(labels)  # a bad --labels fails before a row is read
    default_source = source if source is not None else path.name.split(".")[0]
    pairs: list[PreferencePair] = []
    skipped: list[tuple[int, str]] = []
    seen: dict[str, int] = {}
    for number, row in rows_or_errors(path, split=split):
        try:
            if isinstance(row, InputError):
                raise row
            pair = PreferencePair.from_dict(record(row, mapping, labels=labels, default_source=default_source))
            for text in (*(m.content for m in pair.conversation), pair.response_1, pair.response_2) \
                    if for_judging else ():
                check_text(text, where="")
            if pair.id in seen:
                raise InputError(f"its id is also row {seen[pair.id]}'s: give every pair a unique id")
        except InputError as exc:
            if not skip_invalid:
                raise InputError(f"{path}: row {number}: {exc}") from None
            skipped.append((number, str(exc)))
            continue
        seen[pair.id] = number
        pairs.append(pair)
    if not pairs:
        why = f" ({len(skipped)} invalid row(s) skipped, the first: row {skipped[0][0]}: {skipped[0][1]})" \
            if skipped else ""
        kind = "valid pairs" if skipped else "pairs"
        raise InputError(f"{path} holds no {kind}{why}: add rows with a query, response_1 and response_2")
    return PairFile(pairs=pairs, skipped=skipped)


def parse_mapping(text: str | None) -> dict[str, str]:
    """`"query=question,response_1=answer a"` -> {"query": "question", "response_1": "answer a"}."""
    mapping: dict[str, str] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        field, sep, column = (part.strip() for part in item.partition("="))
        if not sep or not field or not column:
            raise InputError(
                f"--map item {item.strip()!r} is not FIELD=COLUMN: write e.g. --map query=question,response_1=a"
            )
        if field not in PAIR_FIELDS:
            raise InputError(f"--map field {field!r} is unknown: map one of {', '.join(PAIR_FIELDS)}")
        if field in mapping:
            raise InputError(f"--map names {field!r} twice: map each field once")
        mapping[field] = column
    return mapping


def record(row: Mapping[str, Any], mapping: Mapping[str, str], *, labels: str, default_source: str) -> dict[str, Any]:
    """The pair fields of one row, named as `PreferencePair.from_dict` expects, the label read by `labels`.

    `query=instruction+input` joins the non-empty cells into the prompt (blank line between);
    `label=annotator1+annotator2+annotator3` takes the annotators' majority, a tie when they split.
    """
    out: dict[str, Any] = {}
    for field in PAIR_FIELDS:
        column = mapping.get(field, field)
        if column not in row and field in JOINABLE and "+" in column:
            parts = [c.strip() for c in column.split("+")]
            if missing := [c for c in parts if c not in row]:
                raise InputError(f"no column {missing[0]!r} (from --map {field}={column}): fix the mapping or the file")
            if field == "label":
                out["label"], out["tie"] = majority([read_label(_clean(row[c]), labels) for c in parts])
            else:
                out[field] = "\n\n".join(_part(v, c) for c in parts if (v := _clean(row[c])) not in (None, ""))
            continue
        if column not in row:
            if field in mapping:
                raise InputError(f"no column {column!r} (from --map {field}={column}): fix the mapping or the file")
            continue
        value = _clean(row[column])
        if value is None or (value == "" and field in _OPTIONAL):  # an empty CSV cell is a missing value
            continue
        out[field] = value
    if _truthy(_clean(row.get("tie"))) and "tie" not in out:  # `tie: true` as `judge --input` reads it
        if out.get("label") not in (None, "", "tie"):
            raise InputError("'tie' is true but a label is given: drop one")
        out.pop("label", None)
        out["tie"] = True
    if isinstance(out.get("messages"), str):  # a CSV cell or a string column holding the list as JSON
        out["messages"] = loads(out["messages"], where="'messages'")
    if "label" in out and "tie" not in out:
        label, tie = read_label(out.pop("label"), labels)
        out["label"], out["tie"] = label, tie
    if "id" in out:
        out["id"] = id_text(out["id"])
    out.setdefault("source", default_source)
    return out


def _part(value: Any, column: str) -> str:
    """One cell of a joined field (`query=instruction+input`): text only, never a repr of another type."""
    if not isinstance(value, str):
        raise InputError(f"column {column!r} must hold text, got {value_kind(value)}: write it as a string")
    return value


def majority(votes: Sequence[tuple[Choice | None, bool]]) -> tuple[Choice | None, bool]:
    """Several annotators' (label, tie) as one: the most-voted side or tie; a tie when the top is shared.

    Empty cells do not vote; no votes at all is unlabelled.
    """
    tally = Counter("tie" if tie else label for label, tie in votes if tie or label is not None)
    if not tally:
        return None, False
    (top, count), *rest = tally.most_common()
    if top == "tie" or (rest and rest[0][1] == count):
        return None, True
    return top, False  # type: ignore[return-value]


def _truthy(value: Any) -> bool:
    if value is None or value is False or value == "":
        return False
    if value is True or (isinstance(value, str) and value.strip().lower() in ("true", "1", "yes")):
        return True
    if isinstance(value, str) and value.strip().lower() in ("false", "0", "no"):
        return False
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    raise InputError(f"'tie' must be true or false, got {value_kind(value)}")


def _clean(value: Any) -> Any:
    """None for a missing cell (None, or NaN from a numeric column)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def _jsonl_rows(path: Path) -> Iterator[tuple[int, Row | InputError]]:
    """Rows, or the `InputError` of a row that is not one (a caller skipping invalid rows reads on)."""
    for number, raw in byte_lines(path):
        try:
            line = decode(raw, where="")
            if number == 1:
                line = line.removeprefix("\ufeff")  # the byte-order mark Notepad and Excel write
            if not line.strip():
                continue
            row = loads(line, where="")
            if not isinstance(row, dict):
                raise InputError(f"a row must be a JSON object, got {type(row).__name__}")
        except InputError as exc:
            yield number, exc
            continue
        yield number, row


def _json_rows(path: Path) -> Iterator[tuple[int, Row]]:
    data = loads(read_text(path), where=str(path))
    if not isinstance(data, list):
        raise InputError(f"{path}: a .json file must hold an array of objects, got {type(data).__name__}: "
                         "write an array, or JSONL with one object a line")
    for number, row in enumerate(data, 1):
        if not isinstance(row, dict):
            raise InputError(f"{path}: row {number}: a row must be a JSON object, got {type(row).__name__}")
        yield number, row


def _csv_text(path: Path) -> Iterator[str]:
    for number, raw in byte_lines(path):
        text = decode(raw, where=f"{path}: line {number}")
        yield text.removeprefix("\ufeff") if number == 1 else text  # Excel's byte-order mark is not a column name


def _csv_rows(path: Path) -> Iterator[tuple[int, Row]]:
    # a cell may hold a whole pair: the csv module's default 128 KB cell limit refused pairs far under the cap
    csv.field_size_limit(max(csv.field_size_limit(), MAX_PAIR_CHARS))
    reader = csv.DictReader(_csv_text(path), strict=True)
    try:
        for number, row in enumerate(reader, 1):
            if None in row:
                yield number, InputError("more cells than header columns: quote cells that hold commas")
            elif any(v is None for v in row.values()):
                yield number, InputError("fewer cells than header columns: fill every column")
            else:
                yield number, row
    except csv.Error as exc:
        if "field larger than field limit" in str(exc):
            raise InputError(f"{path}: line {reader.line_num}: a cell is over {MAX_PAIR_CHARS:,} characters, more "
                             "than a whole pair may hold: shorten it (or check for an unclosed quote)") from None
        raise InputError(f"{path}: line {reader.line_num}: not valid CSV ({exc}): fix the quoting") from None


def _parquet_rows(path: Path) -> Iterator[tuple[int, Row]]:
    pq = require("pyarrow.parquet", extra="store")
    fh = open_regular(path)
    try:
        with fh:
            head = fh.read(16)
            if not head.startswith(b"PAR1"):  # a compressed file or text named .parquet: say what it is
                check_head(head, where=str(path))
            fh.seek(0)
            parquet = pq.ParquetFile(fh)
            rows = parquet.metadata.num_rows
            if rows > MAX_ROWS:  # from the footer, before a row is read: 20 million rows fit in 196 KB
                raise InputError(f"{path}: {rows:,} rows, over the limit of {MAX_ROWS:,}: split the file")
            number = 0
            for batch in parquet.iter_batches(batch_size=_PARQUET_BATCH):
                for row in batch.to_pylist():
                    number += 1
                    yield number, row
    except (OSError, ValueError) as exc:  # pyarrow's ArrowIOError / ArrowInvalid (InputError is caught above it)
        if isinstance(exc, InputError):
            raise
        raise InputError(f"{path}: not a readable Parquet file ({exc}): export it again") from None


def _datasets_rows(path: Path, split: str | None) -> Iterator[tuple[int, Row]]:
    datasets = require("datasets", extra="train")
    try:
        loaded = datasets.load_from_disk(str(path))
    except (OSError, ValueError, FileNotFoundError) as exc:
        raise InputError(f"{path}: not a readable `datasets` folder ({exc}): save it with save_to_disk") from exc
    if isinstance(loaded, datasets.DatasetDict):
        names = list(loaded)
        chosen = split or ("test" if "test" in names else names[0] if len(names) == 1 else None)
        if chosen not in loaded:
            raise InputError(f"{path} holds splits {', '.join(names)}: pick one with --split")
        loaded = loaded[chosen]
    if len(loaded) > MAX_ROWS:
        raise InputError(f"{path}: {len(loaded):,} rows, over the limit of {MAX_ROWS:,}: select fewer and save again")
    yield from enumerate(loaded, 1)
