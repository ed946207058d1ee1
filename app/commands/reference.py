"""Writes docs/cli.md, the command-line reference, from the `--help` of every command and sub-command.

    python -m reflectrm_app.commands.reference            # rewrite docs/cli.md
    python -m reflectrm_app.commands.reference --check    # exit 1 when docs/cli.md is stale

The help is formatted at a fixed width so the page does not depend on the terminal that wrote it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path

WIDTH = 100
PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
HEADER = """# Command-line reference

Generated from `--help` by `python -m reflectrm_app.commands.reference`; do not edit by hand
(`tests/test_docs.py` fails when this page falls behind the code). Commands whose extra is not
installed are left out of `reflectrm --help`; this page is written with every extra installed.
"""


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str]]:
    """Every (command path, help text) under `parser`, the parser itself first."""
    yield path, parser.format_help()
    for name, sub in _subcommands(parser).items():
        yield from walk(sub, path + (name,))


def render() -> str:
    """The whole page, from the `reflectrm` parser as installed."""
    from reflectrm_app.cli import build_parser

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH)  # argparse's formatter reads the width from here
    try:
        sections = [HEADER]
        for path, text in walk(build_parser()):
            title = " ".join(("reflectrm",) + path)
            sections.append(f"## `{title}`\n\n```text\n{text.rstrip()}\n```\n")
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous
    return "\n".join(sections)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the page is stale; write nothing")
    parser.add_argument("--out", type=Path, default=PAGE, help="the page to write or check")
    args = parser.parse_args(argv)
    page = render()
    if args.check:
        if not args.out.is_file() or args.out.read_text(encoding="utf-8") != page:
            print(f"error: {args.out} is stale: rerun `python -m reflectrm_app.commands.reference`", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(page, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
