"""`reflectrm import`, `reflectrm export` and `reflectrm db ...`: a thin shell over `reflectrm_db.services`.

`reflectrm_app.cli` calls `register(sub)` to add these sub-commands. Every command takes `--db URL`
(`reflectrm_app.commands.options.add_store_flag`: default REFLECTRM_DATABASE_URL, else the SQLite file ./reflectrm.db).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from reflectrm_db.formats import EXPORT_FORMATS, EXPORT_KINDS
from reflectrm_db.importing import format_counts, load_pair_file, parse_mapping
from reflectrm_app.commands.options import add_file_reading_flags, add_store_flag
from reflectrm.display import printable
from reflectrm.files.locks import exclusive

if TYPE_CHECKING:
    from reflectrm_db.services import JudgmentStore

def register(sub: argparse._SubParsersAction) -> None:
    """Add the store's sub-commands to the `reflectrm` parser."""
    p = sub.add_parser(
        "import",
        help="import pairs from JSONL, JSON, CSV, Parquet or a `datasets` folder into the store",
        description="Import pairs: all rows, or none when a row is malformed.",
    )
    p.add_argument("file", type=Path, help="a .jsonl, .json (array), .csv or .parquet file, or a `datasets` folder")
    add_file_reading_flags(p, title="reading the file")
    p.add_argument("--split", help="the split of a `datasets` folder that holds several (default: test)")
    p.add_argument("--source", help="source name for rows without one (default: the file name up to its first dot)")
    add_store_flag(p)
    p.set_defaults(func=cmd_import)

    p = sub.add_parser(
        "export",
        help="export judgments, corrections or training data",
        description="Export stored records. `training` (and --format hf) writes TRL GRPOTrainer prompts.",
    )
    p.add_argument("kind", choices=EXPORT_KINDS, help="what to export")
    p.add_argument(
        "--format",
        dest="fmt",
        choices=EXPORT_FORMATS,
        default="jsonl",
        help="jsonl, parquet or hf (datasets.save_to_disk)",
    )
    p.add_argument("--out", type=Path, required=True, help="output file (folder for hf); must not exist")
    p.add_argument("--snapshot", help="export this snapshot's examples instead of the active ones")
    p.add_argument("--include-inactive", action="store_true", help="also export excluded and withdrawn examples")
    p.add_argument("--both-orders", action="store_true",
                   help="training rows: each example followed by its other order (for train --both-orders)")
    add_store_flag(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("db", help="database maintenance: upgrade, backup")
    db_sub = p.add_subparsers(dest="db_command", required=True)
    up = db_sub.add_parser("upgrade", help="migrate the database to this version's schema (creates a new one)")
    add_store_flag(up)
    up.set_defaults(func=cmd_upgrade)
    backup = db_sub.add_parser("backup", help="copy a SQLite store with the online backup API (safe while in use)")
    backup.add_argument("path", type=Path, help="the backup file to create")
    add_store_flag(backup)
    backup.set_defaults(func=cmd_backup)


def _store(url: str | None, *, read_only: bool = False, older_ok: bool = False) -> JudgmentStore:
    from reflectrm_db.services import JudgmentStore  # late: `reflectrm --help` need not load SQLAlchemy

    # a command's store must outlive it: an in-memory one would report records that are already gone
    return JudgmentStore.open(url, read_only=read_only, older_ok=older_ok, in_memory_ok=False)


def cmd_import(args: argparse.Namespace) -> int:
    mapping = parse_mapping(args.mapping)
    # the file is read and validated before the store is opened: a failed import creates no store file
    read = load_pair_file(args.file, mapping=mapping, source=args.source, labels=args.labels, split=args.split,
                          skip_invalid=args.skip_invalid)
    for number, reason in read.skipped:
        print(printable(f"skipped row {number}: {reason}"), file=sys.stderr)
    with _store(args.db) as store:
        report = store.add_pairs(read.pairs)
    skipped = f"; {len(read.skipped)} invalid row(s) skipped" if args.skip_invalid else ""
    print(printable(f"imported {report.added} new pair(s) from {args.file} ({report.already_present} already stored"
                    f"{skipped})"))
    print(printable(format_counts(read.label_counts())))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    # one writer per --out; the store is only read (reading a store never creates or changes one)
    with exclusive(args.out, flag="--out"), _store(args.db, read_only=True) as store:
        count = store.export(
            args.kind, fmt=args.fmt, out=args.out, include_inactive=args.include_inactive, snapshot=args.snapshot,
            both_orders=args.both_orders,
        )
    print(printable(f"exported {count} {args.kind} row(s) to {args.out}"))
    return 0


def cmd_upgrade(args: argparse.Namespace) -> int:
    from alembic.util.exc import CommandError

    from reflectrm_db.services import upgrade_store
    from reflectrm.errors import ConfigError

    try:
        url, before, after = upgrade_store(args.db, in_memory_ok=False)
    except CommandError as exc:  # e.g. a revision this version does not know
        raise ConfigError(f"cannot upgrade the store ({exc}): is it from a newer reflectrm? upgrade reflectrm") from exc
    print(printable(f"{url}: schema {before or 'empty'} -> {after}" if before != after
                    else f"{url}: schema already at {after}"))
    return 0


def cmd_backup(args: argparse.Namespace) -> int:
    from reflectrm_db.settings import load_store_settings, normalise_url
    from reflectrm.errors import InputError

    url = load_store_settings().database_url if args.db is None else normalise_url(args.db)
    if not url.startswith("sqlite"):  # said before connecting: the server may hold anything
        raise InputError("backup copies SQLite files: back up PostgreSQL with pg_dump")
    # the source is only read, at whatever revision: "back it up, then upgrade" must work on an older store
    with exclusive(args.path, flag="backup path"), _store(args.db, read_only=True, older_ok=True) as store:
        store.backup(args.path)
    print(printable(f"backed up to {args.path}"))
    return 0
