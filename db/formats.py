"""What the store imports and exports: field names, file types, export kinds and formats.

Standard library only, so the CLI can build its parser without loading SQLAlchemy.
"""

from __future__ import annotations

from reflectrm.errors import InputError
from reflectrm.files.readers import PAIR_FIELDS, SUFFIXES

IMPORT_FIELDS = PAIR_FIELDS
"""Pair fields a column can map to (`--map FIELD=COLUMN`); an unmapped field is read from its own column."""

IMPORT_SUFFIXES = SUFFIXES
"""File endings the importer reads (and a folder saved by `datasets`)."""

EXPORT_KINDS = ("pairs", "judgments", "corrections", "preference-examples", "reflection-pairs", "training")
EXPORT_FORMATS = ("jsonl", "parquet", "hf")
HF_KINDS = ("preference-examples", "reflection-pairs", "training")
"""Kinds the `hf` format writes: TRL GRPOTrainer rows (prompt, label, task)."""


def check_export(kind: str, fmt: str) -> None:
    """Raise `InputError` naming a bad kind or format."""
    if kind not in EXPORT_KINDS:
        raise InputError(f"export kind {kind!r} is unknown: use one of {', '.join(EXPORT_KINDS)}")
    if fmt not in EXPORT_FORMATS:
        raise InputError(f"export format {fmt!r} is unknown: use one of {', '.join(EXPORT_FORMATS)}")
    if fmt == "hf" and kind not in HF_KINDS:
        raise InputError(
            f"the hf format holds training prompts: export {kind} as jsonl or parquet, or use {', '.join(HF_KINDS)}"
        )
