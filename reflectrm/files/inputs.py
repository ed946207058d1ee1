"""Reading user-named files with every read bounded before it happens.

    for number, raw in byte_lines(Path("pairs.jsonl.gz")):   # each line at most MAX_LINE_BYTES
        row = loads_row(raw, where=f"pairs.jsonl.gz:{number}")

A path must name a regular file: a FIFO, a device (`/dev/zero`, or a link to it), a socket or a
folder is refused when opened, without blocking (the file is opened non-blocking and checked with
`fstat`, so nothing is read from it). A line is read at most `MAX_LINE_BYTES` at a time and a file
at most `MAX_FILE_BYTES` in all (after decompression), so a 3 GB file of one line or a gzip bomb
is refused after reading a few megabytes. A truncated or damaged `.gz`, a JSON integer too long
to convert, or JSON nested too deeply is one `InputError`, never a traceback.

A path that someone else names (a reviewer in the app, through a web page) is confined first:

    path = confine("judgebench/gpt.jsonl", root=Path("/srv/data"), setting="set REFLECTRM_DATA_ROOT")

`confine` resolves it (relative to the root; symbolic links followed) and refuses, in one line that is the
same whether or not the path exists, what lies outside the root, and a folder holding a link out of it.
"""

from __future__ import annotations

import fcntl
import gzip
import json
import os
import stat
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from reflectrm.core.types import MAX_PAIR_CHARS
from reflectrm.errors import InputError

MAX_LINE_BYTES = 6 * MAX_PAIR_CHARS + (1 << 20)
"""The longest line read (13 MB): a pair at the character cap, every character a 6-byte JSON escape."""

MAX_FILE_BYTES = 1 << 30
"""The most bytes read from one file (1 GiB, counted after decompression): far over any benchmark."""

MAX_ROWS = 1_000_000
"""The most rows read from one file (Parquet checks its metadata before reading a row)."""

MAX_INT_DIGITS = sys.get_int_max_str_digits() or 4300
"""The longest JSON integer read (Python's own conversion limit)."""

MAX_PATH_CHARS = 1024
"""The longest path `confine` takes (a data file's path is far shorter; the OS allows 4096 bytes)."""

MAX_FOLDER_ENTRIES = 100_000
"""The most entries `confine` looks at in a named folder (checking each for a link out of the root)."""

_KINDS = {stat.S_ISDIR: "a folder", stat.S_ISFIFO: "a FIFO (named pipe)", stat.S_ISCHR: "a character device",
          stat.S_ISBLK: "a block device", stat.S_ISSOCK: "a socket"}


def open_regular(path: Path) -> BinaryIO:
    """`path` opened for binary reading, or `InputError` at once when it is not a regular file.

    Opened with O_NONBLOCK, so a FIFO with no writer does not block the open, then checked with fstat.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(f"{str(path)!r} does not exist: check the path") from None
    except OSError as exc:
        raise InputError(f"{str(path)!r} cannot be opened ({exc.strerror}): check the path and its permissions") \
            from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = next((name for test, name in _KINDS.items() if test(mode)), "not a regular file")
        raise InputError(f"{str(path)!r} is {kind}, not a file: give a data file saved on disk")
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return os.fdopen(fd, "rb")


def confine(text: str, *, root: Path, setting: str) -> Path:
    """The real path of `text` (relative to `root`, or absolute), checked to lie inside `root`.

    A folder is walked (at most `MAX_FOLDER_ENTRIES` entries, links not followed): every link in it must
    point inside `root`, and it may hold no FIFO, device or socket (a reader would block on one). Nothing
    is opened or read. The refusal of a path outside is the same whether or not it exists.

    Args:
        text: the path as typed.
        root: the folder paths must lie in (resolved here).
        setting: how the operator moves the root, for the messages ("set REFLECTRM_DATA_ROOT").

    Raises:
        InputError: empty, over `MAX_PATH_CHARS`, a NUL or control character, outside `root` (a `..`, an
            absolute path elsewhere, a link out at any depth), a root that is not a folder.
    """
    text = text.strip()
    if not text:
        raise InputError("the path is empty: give a file or folder inside the data folder")
    if len(text) > MAX_PATH_CHARS:
        raise InputError(f"the path is {len(text):,} characters, over the limit of {MAX_PATH_CHARS:,}: "
                         "give a shorter path inside the data folder")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise InputError("the path holds a control character (a NUL, a line break): type the path again")
    check_text(text, where="the path")
    base = Path(os.path.realpath(root))
    resolved = Path(os.path.realpath(base / os.path.expanduser(text)))  # an absolute path replaces the base
    if not resolved.is_relative_to(base):
        raise InputError(f"the path is outside the app's data folder: give a path inside it (relative to it), "
                         f"or {setting}")
    if not base.is_dir():
        raise InputError(f"the app's data folder is not there: create it, or {setting}")
    if resolved.is_dir():
        _check_folder(resolved, base)
    return resolved


def _check_folder(folder: Path, base: Path) -> None:
    """Refuse a folder holding a link out of `base`, or a FIFO, device or socket (checked without following)."""
    seen = 0
    for top, dirs, files in os.walk(folder, followlinks=False):
        seen += len(dirs) + len(files)
        if seen > MAX_FOLDER_ENTRIES:
            raise InputError(f"the folder holds over {MAX_FOLDER_ENTRIES:,} entries: name a smaller folder")
        for name in (*dirs, *files):
            entry = Path(top) / name
            try:
                mode = os.lstat(entry).st_mode
            except OSError:  # gone since it was listed: nothing to read there
                continue
            if stat.S_ISLNK(mode) and not Path(os.path.realpath(entry)).is_relative_to(base):
                where = entry.relative_to(folder)
                raise InputError(f"{str(where)!r} in the folder links outside the app's data folder: "
                                 "copy the file in instead of linking to it")
            if not (stat.S_ISLNK(mode) or stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                kind = next((n for test, n in _KINDS.items() if test(mode)), "not a regular file")
                raise InputError(f"{str(entry.relative_to(folder))!r} in the folder is {kind}, not a file: "
                                 "remove it, or name a file")


def byte_lines(path: Path, *, max_line: int = MAX_LINE_BYTES, max_total: int = MAX_FILE_BYTES
               ) -> Iterator[tuple[int, bytes]]:
    """(line number, raw line) for every line of a regular file (`.gz` decompressed), each read bounded.

    Raises:
        InputError: not a regular file; a line over `max_line` bytes; over `max_total` bytes in all;
            a truncated or damaged gzip stream.
    """
    raw = open_regular(path)
    stream: BinaryIO = gzip.GzipFile(fileobj=raw, mode="rb") if path.name.lower().endswith(".gz") else raw
    total, number = 0, 0
    with raw, stream:
        while True:
            line = _read_line(stream, max_line + 1, path)
            if not line:
                return
            number += 1
            if number == 1:
                check_head(line, where=str(path))
            if len(line) > max_line:
                raise InputError(f"{path}: line {number} is over the limit of {max_line:,} bytes, more than a pair of "
                                 f"{MAX_PAIR_CHARS:,} characters can take: is this the right file?")
            total += len(line)
            if total > max_total:
                raise InputError(f"{path}: over the limit of {max_total:,} bytes (read up to line {number}): "
                                 "split the file")
            yield number, line


def _read_line(stream: BinaryIO, limit: int, path: Path) -> bytes:
    try:
        return stream.readline(limit)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:  # a truncated or damaged .gz
        raise InputError(f"{path}: the gzip data is truncated or damaged ({exc}): compress the file again") \
            from None


def read_text(path: Path, *, max_total: int = MAX_FILE_BYTES) -> str:
    """A whole regular file as UTF-8 text (a byte-order mark dropped), refused past `max_total` bytes."""
    with open_regular(path) as fh:
        data = fh.read(max_total + 1)
    check_head(data, where=str(path))
    if len(data) > max_total:
        raise InputError(f"{path}: over {max_total:,} bytes: split the file, or write JSONL (one pair a line)")
    return decode(data, where=str(path)).removeprefix("\ufeff")


# A data file's first bytes when it is not UTF-8 text (a file's "magic number"), and what the user should hear.
_BINARY = "not text but {}: "
_WIDE = "not UTF-8 text but {} (it starts with its byte-order mark): save the file as UTF-8"
_MAGIC = (
    (b"\x1f\x8b", _BINARY.format("a gzip file") + "decompress it first (gunzip), or name a JSONL file .jsonl.gz"),
    (b"PK\x03\x04", _BINARY.format("a zip archive") + "extract the data file from it first (unzip)"),
    (b"BZh", _BINARY.format("a bzip2 file") + "decompress it first (bunzip2)"),
    (b"\xfd7zXZ\x00", _BINARY.format("an xz file") + "decompress it first (unxz)"),
    (b"(\xb5/\xfd", _BINARY.format("a zstd file") + "decompress it first (unzstd)"),
    (b"7z\xbc\xaf\x27\x1c", _BINARY.format("a 7-Zip archive") + "extract the data file from it first"),
    (b"PAR1", _BINARY.format("a Parquet file") + "name it .parquet"),
    (b"SQLite format 3\x00", _BINARY.format("a SQLite database") + "export the pairs from it as JSONL or CSV"),
    (b"\xff\xfe\x00\x00", _WIDE.format("UTF-32")),
    (b"\x00\x00\xfe\xff", _WIDE.format("UTF-32")),
    (b"\xff\xfe", _WIDE.format("UTF-16")),
    (b"\xfe\xff", _WIDE.format("UTF-16")),
)


def check_head(head: bytes, *, where: str) -> None:
    """Refuse a text file that is not text: a compressed file, an archive, a Parquet or SQLite file, UTF-16 or -32.

    Such bytes would otherwise read as "not UTF-8" (the advice to save a gzip file as UTF-8 helps no one).
    """
    for magic, message in _MAGIC:
        if head.startswith(magic):
            raise InputError(f"{_at(where)}{message}")
    if len(head) >= 4 and b"\x00" in head[:4] and head[:4].strip(b"\x00"):  # '{"' as UTF-16 without a mark
        raise InputError(f"{_at(where)}not UTF-8 text but, by its NUL bytes, UTF-16 or UTF-32: save the file as UTF-8")


def decode(raw: bytes, *, where: str) -> str:
    """UTF-8 text, or `InputError` naming where the first bad byte is (not its value: the file's content)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        hint = ", as Latin-1 or Windows-1252 write an accented letter" if _single_byte(raw, exc.start) else ""
        raise InputError(f"{_at(where)}not UTF-8 text (a bad byte at offset {exc.start}{hint}): "
                         "save the file as UTF-8") from None


def _single_byte(raw: bytes, at: int) -> bool:
    """A byte over 0x7f that no UTF-8 continuation follows: text in a one-byte encoding (Latin-1, cp1252)."""
    return raw[at] >= 0xA0 and not (at + 1 < len(raw) and 0x80 <= raw[at + 1] <= 0xBF)


def check_text(text: str, *, where: str) -> None:
    """Refuse text a model cannot read: a lone surrogate (a JSON escape like \\ud800, or undecodable argv bytes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"{_at(where)}holds {text[exc.start]!r}, a lone surrogate that is not a character: "
                         "fix the text (an unpaired \\uD800-\\uDFFF escape, or bytes that are not UTF-8)") from None


def loads(text: str | bytes, *, where: str) -> Any:
    """`json.loads`, every failure an `InputError` naming `where` ("" names nothing: the caller adds the row)."""
    try:
        return json.loads(text, parse_int=_int, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as exc:
        raise InputError(f"{_at(where)}not valid JSON ({exc.msg} at column {exc.colno}): fix or remove it") from None
    except RecursionError:
        raise InputError(f"{_at(where)}JSON nested too deeply to be a pair: fix or remove it") from None
    except InputError as exc:
        raise InputError(f"{_at(where)}{exc}") from None


def unique_keys(items: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object (`json.loads`' `object_pairs_hook`), refused when it names a key twice.

    `json.loads` keeps the last value silently: {"label": 1, "label": 2} read as label 2, whichever was meant.
    """
    out = dict(items)
    if len(out) < len(items):
        seen: set[str] = set()
        key = next(k for k, _ in items if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise InputError(f"an object gives key {key[:60]!r} twice (JSON keeps only one): give each key once")
    return out


def _at(where: str) -> str:
    return f"{where}: " if where else ""


def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise InputError(f"a JSON integer of {digits:,} digits (at most {MAX_INT_DIGITS:,} are read): "
                         "write it as a string")
    return int(text)
