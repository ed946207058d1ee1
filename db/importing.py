"""Read pairs for the store: the library's generic reader (`reflectrm.files.readers`) under the store's names.

    pairs = read_pair_file(Path("hs3.csv"), mapping=parse_mapping("query=prompt,label=winner"), labels="auto")

JSONL, JSON arrays, CSV (with or without Excel's byte-order mark), Parquet and `datasets` folders;
labels as 1/2, 0/1 (`labels="index0"`), 0/1/2 with ties (`"012"`), A/B, "A>B", model_a/model_b or a
signed score (`"score"`); ties are kept as ties. Every row is validated before anything is stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from reflectrm.core.types import PreferencePair
from reflectrm.files.readers import PairFile, format_counts, load_pairs, parse_mapping, read_pairs

__all__ = ["PairFile", "format_counts", "load_pair_file", "parse_mapping", "read_pair_file"]


def read_pair_file(
    path: Path,
    *,
    mapping: Mapping[str, str] | None = None,
    source: str | None = None,
    labels: str = "auto",
    split: str | None = None,
) -> list[PreferencePair]:
    """Every pair of a file, validated; `source` applies to rows that give none (default: the file's stem).

    Raises:
        InputError: the file is missing, of an unknown type, empty, or a row is malformed (named by number).
    """
    return read_pairs(Path(path), mapping=mapping, labels=labels, source=source, split=split, for_judging=False)


def load_pair_file(
    path: Path,
    *,
    mapping: Mapping[str, str] | None = None,
    source: str | None = None,
    labels: str = "auto",
    split: str | None = None,
    skip_invalid: bool = False,
) -> PairFile:
    """`read_pair_file` with the rows skipped under `skip_invalid` (row number, reason) and the label counts."""
    return load_pairs(Path(path), mapping=mapping, labels=labels, source=source, split=split, for_judging=False,
                      skip_invalid=skip_invalid)
