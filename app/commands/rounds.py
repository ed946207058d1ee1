"""`reflectrm reviewers ...` and `reflectrm round ...`: review rounds from the command line, a thin shell over
`reflectrm_app.services.rounds` (the operator at the store acts as an admin; adjudication names its adjudicator)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from reflectrm_app.commands.options import add_store_flag
from reflectrm.display import printable
from reflectrm.files.locks import exclusive

ROLES = ("reviewer", "adjudicator", "admin")  # as reflectrm_db.models.REVIEWER_ROLES (a test keeps them one)


def register(sub: argparse._SubParsersAction) -> None:
    """Add `reviewers` and `round` to the `reflectrm` parser."""
    p = sub.add_parser("reviewers", help="the store's reviewers and their roles (for review rounds)")
    rs = p.add_subparsers(dest="reviewers_command", required=True)
    add = rs.add_parser("add", help="add a reviewer (the login name), or change their role")
    add.add_argument("name", help="the reviewer's login name")
    add.add_argument("--role", choices=ROLES, default="reviewer",
                     help="reviewer: answers items; adjudicator: decides disputed ones; admin: both (default reviewer)")
    add_store_flag(add)
    add.set_defaults(func=cmd_reviewer_add)
    ls = rs.add_parser("list", help="list the reviewers and their roles")
    _json_flag(ls)
    add_store_flag(ls)
    ls.set_defaults(func=cmd_reviewer_list)

    p = sub.add_parser("round", help="review rounds: open, progress, agreement, adjudicate, release, export")
    rd = p.add_subparsers(dest="round_command", required=True)
    _register_open(rd)
    for name, func, text in (("progress", cmd_progress, "answers handed out and given, per round and reviewer"),
                             ("agreement", cmd_agreement, "agreement per round, reviewer pair and item, at the "
                                                          "verdict and the analyses level")):
        q = rd.add_parser(name, help=text)
        q.add_argument("name", help="the round")
        _json_flag(q)
        add_store_flag(q)
        q.set_defaults(func=func)
    _register_adjudicate(rd)
    _register_release(rd)
    ex = rd.add_parser("export", help="the round's answers with reviewer ids, for outside analysis")
    ex.add_argument("name", help="the round")
    ex.add_argument("--out", type=Path, required=True, help="output file; must not exist")
    ex.add_argument("--format", dest="fmt", choices=("jsonl", "parquet"), default="jsonl",
                    help="jsonl or parquet (default jsonl)")
    add_store_flag(ex)
    ex.set_defaults(func=cmd_export)


def _judgment_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--judgment", type=int, metavar="ID", help="one item of the round (a judgment id)")


def _json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _register_open(rd: argparse._SubParsersAction) -> None:
    op = rd.add_parser("open", help="open a round over the review queue's judgments (or a snapshot's)")
    op.add_argument("name", help="the round's name (unique in the store)")
    op.add_argument("--overlap", type=int, default=2, help="reviewers per item (default 2)")
    op.add_argument("--blind", action="store_true",
                    help="hide other reviewers' answers and earlier corrections until a reviewer answered")
    op.add_argument("--reviewer", dest="reviewers", action="append", default=[], metavar="NAME",
                    help="who may take its items (default: every reviewer); repeatable")
    op.add_argument("--source", help="only judgments of this data set (the review queue's filter)")
    op.add_argument("--snapshot", help="the judgments of this snapshot's examples instead of the review queue")
    op.add_argument("--top", type=int, help="the first N judgments in the queue's order (default: all)")
    op.add_argument("--include-corrected", action="store_true", help="also judgments a person corrected already")
    add_store_flag(op)
    op.set_defaults(func=cmd_open)


def _register_adjudicate(rd: argparse._SubParsersAction) -> None:
    q = rd.add_parser("adjudicate", help="decide a disputed item (lists the disputed items without --judgment)")
    q.add_argument("name", help="the round")
    _judgment_flag(q)
    q.add_argument("--verdict", type=int, choices=(1, 2), help="the better response")
    q.add_argument("--mark", dest="marks", action="append", default=[], metavar="INDEX=right|wrong",
                   help="a mark on one analysis; repeatable")
    q.add_argument("--as", dest="by", metavar="NAME", help="the adjudicator deciding (role adjudicator or admin)")
    add_store_flag(q)
    q.set_defaults(func=cmd_adjudicate)


def _register_release(rd: argparse._SubParsersAction) -> None:
    q = rd.add_parser("release", help="take back a reviewer's unanswered items, or hand one to another reviewer")
    q.add_argument("name", help="the round")
    q.add_argument("reviewer", help="whose unanswered items")
    _judgment_flag(q)
    q.add_argument("--to", metavar="NAME", help="hand the item (--judgment) to this reviewer instead")
    add_store_flag(q)
    q.set_defaults(func=cmd_release)


def _service(url: str | None, *, create: bool = False) -> Any:
    from reflectrm_app.services.rounds import RoundService
    from reflectrm_db.services import JudgmentStore

    return RoundService(JudgmentStore.open(url, in_memory_ok=False, create=create))  # only `reviewers add` makes a store


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(none)"
    keys = list(rows[0])
    cells = [[printable(str(r.get(k, ""))) for k in keys] for r in rows]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    lines = ["  ".join(k.ljust(w) for k, w in zip(keys, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def cmd_reviewer_add(args: argparse.Namespace) -> int:
    service = _service(args.db, create=True)
    with service.store:
        found, before = service.set_reviewer(args.name, role=args.role)
    said = "added" if before is None else f"changed from {before}" if before != found.role else "unchanged"
    print(printable(f"reviewer {found.name!r}: {found.role} ({said})"))
    return 0


def cmd_reviewer_list(args: argparse.Namespace) -> int:
    service = _service(args.db)
    with service.store:
        rows = [{"name": r.name, "role": r.role} for r in service.reviewers()]
    print(json.dumps(rows) if args.json else _table(rows))
    return 0


def cmd_open(args: argparse.Namespace) -> int:
    from reflectrm_db.rounds import RoundConfig

    config = RoundConfig(name=args.name, overlap=args.overlap, blind=args.blind, reviewers=tuple(args.reviewers),
                         source=args.source, snapshot=args.snapshot, top=args.top,
                         include_corrected=args.include_corrected)  # checked before the store is opened
    service = _service(args.db)
    with service.store:
        rnd = service.open_round(config)
    print(printable(f"opened round {rnd.name!r}: {rnd.items} judgment(s), each to {rnd.overlap} reviewer(s)"
                    f"{', blind' if rnd.blind else ''}"))
    return 0


def cmd_progress(args: argparse.Namespace) -> int:
    service = _service(args.db)
    with service.store:
        p = service.progress(args.name)
    if args.json:
        data = asdict(p)
        data["round"]["created_at"] = p.round.created_at.isoformat()
        print(json.dumps(data))
        return 0
    print(printable(f"round {p.round.name!r}: {p.answered}/{p.needed} answers ({p.assigned} handed out); "
                    f"{p.complete}/{p.round.items} items complete: {p.agreed} agreed, {p.adjudicated} adjudicated, "
                    f"{p.disputed} waiting for an adjudicator"))
    print(_table([{"reviewer": r.reviewer, "assigned": r.assigned, "answered": r.answered, "open": r.open}
                  for r in p.reviewers]))
    return 0


def cmd_agreement(args: argparse.Namespace) -> int:
    service = _service(args.db)
    with service.store:
        report = service.agreement(args.name)
    if args.json:
        print(json.dumps(report.to_dict()))
        return 0
    for part, rows in report.rows().items():
        print(f"{part}:")
        print(_table(rows))
    return 0


def cmd_adjudicate(args: argparse.Namespace) -> int:
    from reflectrm.errors import InputError

    service = _service(args.db)
    with service.store:
        if args.judgment is None:
            for item in service.adjudication_queue(args.name, by=args.by):
                given = ", ".join(f"{a.reviewer}: {a.verdict}" for a in item.answers)
                print(printable(f"judgment {item.stored.id} (judge said {item.stored.judgment.verdict}): {given}"))
            return 0
        if args.verdict is None or not args.by:
            raise InputError("deciding an item needs --verdict 1|2 and --as NAME (the adjudicator)")
        decided = service.adjudicate(args.name, args.judgment, by=args.by, verdict=args.verdict,
                                     marks=_marks(args.marks))
    print(printable(f"judgment {decided.judgment_id}: Response {decided.verdict}, decided by {decided.decided_by} "
                    f"({len(decided.overruled)} answer(s) overruled)"))
    return 0


def _marks(given: list[str]) -> dict[int, str]:
    from reflectrm.errors import InputError

    marks: dict[int, str] = {}
    for text in given:
        index, _, mark = text.partition("=")
        if not index.strip().isdigit() or mark.strip() not in ("right", "wrong"):
            raise InputError(f"--mark {printable(text[:40])!r} must be INDEX=right or INDEX=wrong (e.g. 3=wrong)")
        marks[int(index)] = mark.strip()
    return marks


def cmd_release(args: argparse.Namespace) -> int:
    from reflectrm.errors import InputError

    service = _service(args.db)
    with service.store:
        if args.to:
            if args.judgment is None:
                raise InputError("--to hands one item on: name it with --judgment")
            moved = service.reassign(args.name, args.judgment, reviewer=args.reviewer, to=args.to)
            print(printable(f"judgment {moved.judgment_id} now with {moved.reviewer!r}"))
            return 0
        released = service.release(args.name, reviewer=args.reviewer, judgment_id=args.judgment)
    print(printable(f"released {len(released)} item(s) of {args.reviewer!r}"))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    service = _service(args.db)
    with exclusive(args.out, flag="--out"), service.store:
        count = service.export_answers(args.name, fmt=args.fmt, out=args.out)
    print(printable(f"exported {count} answer(s) of round {args.name!r} to {args.out}"))
    return 0
