"""Every reader of a user-named pair file bounds what it reads before reading it, never blocks, and fails in one line.

The classes: not a regular file (FIFO, device), a line past its bound (one huge line, a gzip bomb), a damaged
stream (truncated .gz), numbers past Python's conversion limit, a CSV cell over the csv module's default limit,
Parquet past the row bound, and ids that are falsy.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from reflectrm_app.commands import judge
from reflectrm.core.types import MAX_PAIR_CHARS
from reflectrm.errors import InputError
from reflectrm.files.readers import read_pairs
from reflectrm.files.inputs import MAX_LINE_BYTES

PAIR = {"query": "q", "response_1": "a", "response_2": "b", "label": 1}
READERS = [pytest.param(read_pairs, id="import-eval-reader"), pytest.param(judge.read_pairs, id="judge-input")]


def _zeros_gz(path: Path, mib: int) -> Path:
    """A gzip of `mib` MiB of zero bytes (a few hundred bytes per MiB compressed): no newline anywhere."""
    comp = zlib.compressobj(1, zlib.DEFLATED, 31)
    with path.open("wb") as fh:
        for _ in range(mib):
            fh.write(comp.compress(b"\0" * (1 << 20)))
        fh.write(comp.flush())
    return path


def _one_line(path: Path, size: int) -> Path:
    with path.open("wb") as fh:  # sparse: no disk used, and not one newline
        fh.truncate(size)
    return path


def _truncated_gz(folder: Path) -> Path:
    path = folder / "cut.jsonl.gz"
    data = gzip.compress((json.dumps(PAIR) + "\n").encode() * 50)
    path.write_bytes(data[: len(data) // 2])
    return path


def _huge_int(folder: Path) -> Path:
    path = folder / "int.jsonl"
    path.write_text('{"id": ' + "9" * 5000 + ', "query": "q", "response_1": "a", "response_2": "b"}\n')
    return path


def _dev_zero_link(path: Path) -> Path:
    path.symlink_to("/dev/zero")
    return path


# each builder makes one hostile file; the reader must refuse it with one InputError naming the problem
HOSTILE = [
    pytest.param(lambda d: _one_line(d / "huge.jsonl", MAX_LINE_BYTES + 10), "over the limit of", id="one-huge-line"),
    pytest.param(lambda d: _zeros_gz(d / "bomb.jsonl.gz", 20), "over the limit of", id="gzip-bomb"),
    pytest.param(lambda d: _dev_zero_link(d / "zero.jsonl"), "character device, not a file", id="link-to-dev-zero"),
    pytest.param(_truncated_gz, "truncated or damaged", id="truncated-gz"),  # trap: EOFError traceback
    pytest.param(_huge_int, "5,000 digits", id="5000-digit-integer"),  # trap: ValueError from int()
]


@pytest.mark.parametrize(("reader",), [(p.values[0],) for p in READERS], ids=[p.id for p in READERS])
@pytest.mark.parametrize(("build", "message"), HOSTILE)
def test_a_hostile_file_is_one_input_error(tmp_path: Path, reader, build, message: str) -> None:
    path = build(tmp_path)
    with pytest.raises(InputError, match=message):
        reader(path)


@pytest.mark.parametrize(("kind",), [("jsonl",), ("csv",), ("json",), ("parquet",)])
def test_a_fifo_is_refused_at_once_without_a_writer(tmp_path: Path, kind: str) -> None:
    fifo = tmp_path / f"pipe.{kind}"
    os.mkfifo(fifo)
    code = ("import sys; from pathlib import Path; from reflectrm.files.readers import read_pairs; "
            "from reflectrm.errors import InputError\n"
            "try:\n    read_pairs(Path(sys.argv[1]))\nexcept InputError as e:\n    print(e)")
    # a blocked open would never return: the bounded wait is the test's own guard, not a timing assertion
    done = subprocess.run([sys.executable, "-c", code, str(fifo)], capture_output=True, text=True, timeout=60)
    assert "FIFO (named pipe), not a file" in done.stdout, done.stderr


def test_the_judge_input_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    code = ("import sys; from pathlib import Path; from reflectrm_app.commands.judge import read_pairs; "
            "from reflectrm.errors import InputError\n"
            "try:\n    read_pairs(Path(sys.argv[1]))\nexcept InputError as e:\n    print(e)")
    done = subprocess.run([sys.executable, "-c", code, str(fifo)], capture_output=True, text=True, timeout=60)
    assert "FIFO" in done.stdout, done.stderr


_BOUNDED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[2]), int(sys.argv[2])))
from pathlib import Path
from reflectrm.files.readers import read_pairs
from reflectrm.errors import InputError
try:
    read_pairs(Path(sys.argv[1]))
    print("READ")
except InputError as exc:
    print("REFUSED", exc)
"""


def _many_rows_parquet(path: Path, rows: int) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = {k: pa.repeat(pa.scalar(v), rows) for k, v in (("query", "q"), ("response_1", "a"), ("response_2", "b"))}
    pq.write_table(pa.table(cols), path)  # a few KB on disk: dictionary- and run-length-encoded
    return path


@pytest.mark.parametrize(
    ("build", "limit_mb", "message"),
    [
        # 3 GB of one line (sparse): the old reader read it whole (5.9 GB in 11 s)
        pytest.param(lambda d: _one_line(d / "huge.jsonl", 3 << 30), 300, "over the limit of", id="3GB-one-line"),
        pytest.param(lambda d: _zeros_gz(d / "bomb.jsonl.gz", 256), 300, "over the limit of", id="gzip-bomb-256MB"),
        pytest.param(lambda d: _dev_zero_link(d / "zero.jsonl"), 300, "character device", id="dev-zero"),
        # 2 million rows in a few KB: refused from the footer's row count (pyarrow itself maps ~200 MB)
        pytest.param(lambda d: _many_rows_parquet(d / "many.parquet", 2_000_000), 700, "2,000,000 rows",
                     id="parquet-2M-rows"),
    ],
)
def test_bombs_are_refused_under_a_small_address_space_limit(tmp_path: Path, build, limit_mb: int,
                                                             message: str) -> None:
    path = build(tmp_path)
    done = subprocess.run([sys.executable, "-c", _BOUNDED, str(path), str(limit_mb << 20)], capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.startswith("REFUSED") and message in done.stdout, (done.stdout, done.stderr[-2000:])


def test_a_csv_cell_over_128kb_is_read_when_the_pair_is_under_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "long.csv"
    long = "x" * 300_000  # over the csv module's default 131,072-character cell limit
    path.write_text(f'query,response_1,response_2,label\nq,"{long}",b,1\n')
    (pair,) = read_pairs(path)
    assert pair.response_1 == long


def test_a_csv_cell_over_the_pair_cap_names_the_cap_not_the_quoting(tmp_path: Path) -> None:
    path = tmp_path / "huge.csv"
    path.write_text(f'query,response_1,response_2,label\nq,"{"x" * (MAX_PAIR_CHARS + 10)}",b,1\n')
    with pytest.raises(InputError, match="a cell is over 2,000,000 characters"):
        read_pairs(path)


# ids as data sets write them: each falsy one is an id, never "no id" (which becomes a content hash)
FALSY_IDS = [
    pytest.param(0, "0", id="zero"),
    pytest.param(False, "false", id="false"),
    pytest.param(0.0, "0.0", id="zero-float"),
    pytest.param("0", "0", id="zero-string"),
]


@pytest.mark.parametrize(("reader",), [(p.values[0],) for p in READERS], ids=[p.id for p in READERS])
@pytest.mark.parametrize(("given", "kept"), FALSY_IDS)
def test_a_falsy_id_is_kept_as_written(tmp_path: Path, reader, given, kept: str) -> None:
    path = tmp_path / "ids.jsonl"
    path.write_text(json.dumps({**PAIR, "id": given}) + "\n" + json.dumps({**PAIR, "id": "other"}) + "\n")
    assert [p.id for p in reader(path)] == [kept, "other"]


def test_a_falsy_id_is_kept_from_json_csv_and_parquet(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "a.json").write_text(json.dumps([{**PAIR, "id": 0}, {**PAIR, "id": False, "response_2": "c"}]))
    (tmp_path / "a.csv").write_text("id,query,response_1,response_2\n0,q,a,b\n")
    pq.write_table(pa.table({"id": [0], "query": ["q"], "response_1": ["a"], "response_2": ["b"]}),
                   tmp_path / "a.parquet")
    assert [p.id for p in read_pairs(tmp_path / "a.json")] == ["0", "false"]
    assert [p.id for p in read_pairs(tmp_path / "a.csv")] == ["0"]
    assert [p.id for p in read_pairs(tmp_path / "a.parquet")] == ["0"]
