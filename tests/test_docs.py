"""The README and docs/ keep up with the code: the CLI reference is fresh, every command and flag they name
exists, every link resolves, and no page points where a user cannot follow."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from tests.test_architecture import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
WRITTEN = [p for p in PAGES if p.name != "cli.md"]  # cli.md is generated from the parser itself
FIRST_LINES = [
    "python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e '.[ui,train,dev]' && .venv/bin/reflectrm app",
    ".venv/bin/python -m pytest -q",
]


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in paths]


def test_the_cli_reference_is_what_the_parser_prints_now():
    from reflectrm_app.commands.reference import PAGE, render

    assert PAGE.read_text(encoding="utf-8") == render(), "docs/cli.md is stale: python -m reflectrm_app.commands.reference"


def test_the_cli_reference_covers_every_command_and_sub_command():
    from reflectrm_app.cli import build_parser
    from reflectrm_app.commands.reference import walk

    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    for path, _ in walk(build_parser()):
        assert f"## `{' '.join(('reflectrm',) + path)}`" in text


def test_the_readme_opens_with_the_two_commands_and_stays_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert lines[2:6] == ["```bash", *FIRST_LINES, "```"]
    assert len(lines) <= 250


def _sub(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


def code(text: str) -> list[str]:
    """The code a page shows: fenced blocks (continuation lines joined), indented lines and inline spans."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.M | re.S)
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.M | re.S)
    indented = [line for line in prose.splitlines() if line.startswith("    ") and not line.lstrip().startswith("-")]
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"\n", " ", prose))
    return [re.sub(r"\\\n\s*", " ", block) for block in blocks] + indented + spans


def command_lines(text: str) -> list[str]:
    """Every `reflectrm COMMAND ...` a page shows as code, up to the line's end or a comment."""
    return [m.group(1) for snippet in code(text)
            for m in re.finditer(r"(?<![\w.\-/\[])reflectrm ([a-z][a-z-]*[^\n#|]*)", snippet)]


def unknown_flags(line: str, parser: argparse.ArgumentParser) -> list[str]:
    """The flags in one command line that its (sub-)command does not define; an unknown command is one too."""
    words = line.split()
    subs = _sub(parser)
    if words[0] not in subs:
        return [f"command {words[0]!r}"]
    command = subs[words[0]]
    if len(words) > 1 and words[1] in _sub(command):
        command = _sub(command)[words[1]]
    known = _flags(command)
    return [f for f in re.findall(r"(?<!\S)(--[a-z][a-z0-9-]*)", line) if f not in known]


@pytest.mark.parametrize("page", WRITTEN, ids=_ids(WRITTEN))
def test_every_command_and_flag_a_page_names_exists(page):
    from reflectrm_app.cli import build_parser

    parser = build_parser()
    bad = {line.strip(): unknown for line in command_lines(page.read_text(encoding="utf-8"))
           if (unknown := unknown_flags(line, parser))}
    assert bad == {}


@pytest.mark.parametrize("line, want", [
    pytest.param("judge --query Q --response-1 A", [], id="known"),
    pytest.param("judge --no-such-flag", ["--no-such-flag"], id="unknown-flag"),
    pytest.param("db backup copy.db --nope", ["--nope"], id="sub-command-flags"),
    pytest.param("frobnicate --x", ["command 'frobnicate'"], id="unknown-command"),
])
def test_the_flag_check_itself_catches_what_it_should(line, want):
    from reflectrm_app.cli import build_parser

    assert unknown_flags(line, build_parser()) == want


def test_command_lines_join_continuations_and_stop_at_comments_and_code_spans():
    text = ("`reflectrm judge --json` then (reflectrm strategy) in prose\n```bash\nreflectrm train --data d \\\n"
            "    --lr 1  # --not-a-flag\n```\n")
    assert sorted(line.split() for line in command_lines(text)) == [["judge", "--json"],
                                                                    ["train", "--data", "d", "--lr", "1"]]


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    headings = re.findall(r"^#+ (.+)$", prose, re.M)  # not a shell comment in a code block
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_every_relative_link_resolves(page):
    text = page.read_text(encoding="utf-8")
    missing = []
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", text):
        if "://" in target:
            continue
        linked = page.parent / target if target else page
        if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in _anchors(linked)):
            missing.append(f"{target}#{anchor}" if anchor else target)
    assert missing == []


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_no_page_points_where_a_user_cannot_follow(page):
    text = page.read_text(encoding="utf-8")
    assert "../shared" not in text
    assert not re.findall(r"(?i)\bissues? #?\d+", text)


SCRATCH = re.compile(r"(?<![\w.@-])(b0|b2|c1|c2|r1)(?![\w-])")  # labels of builds that were never shipped


@pytest.mark.parametrize("page", [p for p in WRITTEN if "experiments" not in p.parts],
                         ids=_ids([p for p in WRITTEN if "experiments" not in p.parts]))
def test_reference_pages_name_no_scratch_model(page):
    assert SCRATCH.findall(page.read_text(encoding="utf-8")) == []
