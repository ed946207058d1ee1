"""Parse a judge's output into (analysis, choice, status). Never raises on model output.

The expected format is ``<Analysis>...</Analysis>`` then ``<Result>Response 1 is better than
Response 2</Result>`` (``Critique k ...`` for the reflection task). The parser copes with case,
whitespace, markdown emphasis, a missing closing tag, the "Response 2 is better than Response 1"
ordering, "worse than" statements and a bare "Response 2". A result that names both candidates as
winners, or no valid candidate, is `INVALID_RESULT`: the model's output is data, and ambiguity is
not resolved by guessing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from reflectrm.core.prompts import Task
from reflectrm.core.types import Choice, ParseStatus

_ANALYSIS_OPEN = re.compile(r"<\s*analysis\s*>", re.IGNORECASE)
_ANALYSIS_CLOSE = re.compile(r"<\s*/\s*analysis\s*>", re.IGNORECASE)
_RESULT_OPEN = re.compile(r"<\s*result\s*>", re.IGNORECASE)
_RESULT_CLOSE = re.compile(r"<\s*/\s*result\s*>", re.IGNORECASE)
_EMPHASIS = re.compile(r"[*_`#\"']")
_SPACES = re.compile(r"\s+")
# "response 1 is better than response 2", "response 2 is slightly better than response 1",
# "response 1 is worse than response 2". Bounded gaps keep matching linear on hostile input.
_COMPARISON = r"{noun}\s?#?([0-9]+)\s(?:is|was)?\s?(?:\w+\s){{0,2}}?(better|worse)\s(?:than|to)\s{noun}\s?#?([0-9]+)"
_BARE = r"^(?:{noun}\s?#?)?([0-9]+)\.?$"
# Prefix words that turn a statement into its negation ("not Response 1 is better ...") are not
# handled: a judge trained on this format does not write them, and INVALID is safer than a guess.


@dataclass(frozen=True, slots=True)
class ParsedOutput:
    """A parsed judge output.

    Attributes:
        analysis: the analysis text (stripped); "" when there is none.
        choice: the preferred candidate, 1 or 2; None when unparseable.
        status: how it parsed; `status.parseable` iff `choice` is not None.
    """

    analysis: str
    choice: Choice | None
    status: ParseStatus


def _normalise(text: str) -> str:
    return _SPACES.sub(" ", _EMPHASIS.sub("", text)).strip().lower()


def _choices_in(statement: str, noun: str) -> list[int]:
    """Every winner the statement declares, in order; 0 for a malformed comparison."""
    winners = []
    for m in re.finditer(_COMPARISON.format(noun=noun), statement):
        a, word, b = int(m.group(1)), m.group(2), int(m.group(3))
        if {a, b} != {1, 2}:
            winners.append(0)
        else:
            winners.append(a if word == "better" else b)
    return winners


def _choice_from_statement(statement: str, noun: str) -> tuple[Choice | None, bool]:
    """(choice, repaired) from a result statement; (None, False) when invalid."""
    s = _normalise(statement)
    winners = _choices_in(s, noun)
    if winners:
        if 0 in winners or len(set(winners)) != 1:
            return None, False
        return winners[0], False  # type: ignore[return-value]
    bare = re.match(_BARE.format(noun=noun), s)
    if bare and bare.group(1) in ("1", "2"):
        return int(bare.group(1)), True  # type: ignore[return-value]
    return None, False


def _split_analysis(text: str) -> tuple[str, str, bool]:
    """(analysis, rest after the analysis, repaired) from the raw text."""
    start = _ANALYSIS_OPEN.search(text)
    result = _RESULT_OPEN.search(text)
    body_from = start.end() if start else 0
    close = _ANALYSIS_CLOSE.search(text, body_from)
    if close and (result is None or close.start() < result.start()):
        return text[body_from : close.start()].strip(), text[close.end() :], start is None
    # No closing tag before the result: the analysis runs up to <Result> (or to the end).
    end = result.start() if result else len(text)
    if result is None and start is None:
        return text.strip(), "", True
    return text[body_from:end].strip(), text[end:], True


def parse_output(text: str, *, task: Task = Task.RESPONSE) -> ParsedOutput:
    """Parse one model output for `task`. Never raises on any string."""
    if not isinstance(text, str) or not text.strip():
        return ParsedOutput("", None, ParseStatus.EMPTY)
    noun = task.noun.lower()
    analysis, rest, repaired = _split_analysis(text)
    results = list(_RESULT_OPEN.finditer(text))
    if not results:
        # No <Result> tag: accept one unambiguous statement written after a closed analysis.
        choice, _ = _choice_from_statement(rest, noun) if rest.strip() else (None, False)
        if choice is None:
            return ParsedOutput(analysis, None, ParseStatus.NO_RESULT)
        return ParsedOutput(analysis, choice, ParseStatus.REPAIRED)
    choices = set()
    for m in results:
        close = _RESULT_CLOSE.search(text, m.end())
        nxt = _RESULT_OPEN.search(text, m.end())
        end = close.start() if close and (nxt is None or close.start() < nxt.start()) else (
            nxt.start() if nxt else len(text)
        )
        repaired = repaired or close is None
        choice, bare = _choice_from_statement(text[m.end() : end], noun)
        repaired = repaired or bare
        choices.add(choice)
    if None in choices or len(choices) != 1:
        return ParsedOutput(analysis, None, ParseStatus.INVALID_RESULT)
    status = ParseStatus.REPAIRED if repaired or len(results) > 1 else ParseStatus.OK
    return ParsedOutput(analysis, choices.pop(), status)
