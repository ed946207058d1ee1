"""Parse a judge's output into (analysis, choice, status). Never raises on model output.

The judge is asked for ``<Analysis>...</Analysis>`` then ``<Result>Response 1 is better than
Response 2</Result>`` (``Critique k`` for the reflection task). The parser reads a verdict only
when the result is one statement of the grammar below; everything else is `INVALID_RESULT`. It
never guesses: a negation ("is not better"), a tie ("equally good", "neither", "both"), a question,
a second sentence or an explanation after the verdict is outside the grammar, so it is invalid
rather than read as the opposite verdict.

Grammar (matched against the whole block, after normalisation)::

    normalise   lower-case; drop markdown emphasis and quotes (* _ ` # " '); collapse whitespace;
                strip; drop trailing "." and "!"
    statement   := [lead " "] verdict
    lead        := ("so" | "thus" | "therefore" | "hence" | "overall" | "in conclusion" | "in summary"
                   | "verdict" | "final verdict" | "result" | "answer" | "final answer") [":" | ","]
    verdict     := comparison                                  -> ok (repaired after a lead)
                 | ref " is " [adverb " "] "better"            -> repaired ("Response 1 is better.")
                 | ref " is the better" [" one" | " " noun]    -> repaired
                 | "the better " (noun | "one") " is " ref     -> repaired ("The better response is Response 2")
                 | ref | digit                                 -> repaired ("**Response 2**", "2")
    comparison  := ref " " ("is" | "was") " " [adverb " "] ("better" | "worse") " than " ref
                   with the two refs naming 1 and 2 once each; "worse" names the other one
    ref         := noun [" "] digit          (no letter or digit of any script right after it)
    noun        := "response" (response task) | "critique" (reflection task); the other task's noun is invalid
    digit       := "1" | "2"                 (ASCII only: fullwidth or Arabic-Indic digits are invalid)
    adverb      := slightly | somewhat | much | far | clearly | significantly | marginally | overall
                 | definitely | probably | likely | arguably | generally

A hedge ("probably better") keeps the verdict's direction, so it is read; any other word between
"is" and "better" ("not", "no", "never") is not. Several ``<Result>`` blocks must each be in the
grammar and agree (repaired); one invalid or disagreeing block makes the whole output invalid.
Without any ``<Result>`` tag, one statement of the grammar standing alone after ``</Analysis>`` is
read (repaired); untagged prose with no analysis tags is an analysis, not a verdict.

Status: `OK` for a comparison in one closed ``<Result>`` after a closed analysis; `REPAIRED` for
any other accepted form or a missing tag; `NO_RESULT`, `INVALID_RESULT`, `EMPTY` otherwise. Every
regular expression here is bounded and anchored, and tags are found in one pass, so parsing is
linear in the length of the output, hostile output included.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from reflectrm.core.prompts import Task
from reflectrm.core.types import Choice, ParseStatus

_ANALYSIS_OPEN = re.compile(r"<\s{0,8}analysis\s{0,8}>", re.IGNORECASE)
_ANALYSIS_CLOSE = re.compile(r"<\s{0,8}/\s{0,8}analysis\s{0,8}>", re.IGNORECASE)
_RESULT_OPEN = re.compile(r"<\s{0,8}result\s{0,8}>", re.IGNORECASE)
_RESULT_CLOSE = re.compile(r"<\s{0,8}/\s{0,8}result\s{0,8}>", re.IGNORECASE)
_EMPHASIS = re.compile(r"[*_`#\"']")
_SPACES = re.compile(r"\s+")

ADVERBS = ("slightly", "somewhat", "much", "far", "clearly", "significantly", "marginally", "overall",
           "definitely", "probably", "likely", "arguably", "generally")
"""Words allowed between "is" and "better"/"worse": they grade or hedge a verdict, never reverse it."""

LEADS = ("so", "thus", "therefore", "hence", "overall", "in conclusion", "in summary", "verdict", "final verdict",
         "result", "answer", "final answer")
"""Words allowed before a verdict ("Therefore, Response 2 is better than Response 1")."""

_LEAD = rf"(?:(?:{'|'.join(LEADS)})[:,]? )"
_ADVERB = rf"(?:(?:{'|'.join(ADVERBS)}) )"


def _grammar(noun: str) -> dict[str, re.Pattern[str]]:
    ref = rf"{noun} ?([0-9])(?![0-9\w])"
    return {
        "comparison": re.compile(rf"{ref} (?:is|was) {_ADVERB}?(better|worse) than {noun} ?([0-9])(?![0-9\w])"),
        "better-alone": re.compile(rf"{ref} is (?:{_ADVERB}?better|the better(?: one| {noun})?)"),
        "better-is": re.compile(rf"the better (?:{noun}|one) is {ref}"),
        "bare": re.compile(rf"(?:{noun} ?)?([0-9])(?![0-9\w])"),
    }


_GRAMMARS = {task: _grammar(task.noun.lower()) for task in Task}
_LEAD_RE = re.compile(_LEAD)


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


@dataclass(frozen=True, slots=True)
class _Verdict:
    choice: Choice
    canonical: bool  # the comparison form with no lead: what the format asks for


def _normalise(text: str) -> str:
    # rstrip, not a "[.!]+$" regex: that one rescans a long run of dots from every position
    return _SPACES.sub(" ", _EMPHASIS.sub("", text)).strip().lower().rstrip(".! ")


def read_statement(statement: str, *, task: Task = Task.RESPONSE) -> tuple[Choice | None, bool]:
    """(choice, canonical) of one result statement under the grammar; (None, False) outside it."""
    verdict = _read(statement, task)
    return (None, False) if verdict is None else (verdict.choice, verdict.canonical)


def _read(statement: str, task: Task) -> _Verdict | None:
    s = _normalise(statement)
    lead = _LEAD_RE.match(s)
    body = s[lead.end() :] if lead else s
    grammar = _GRAMMARS[task]
    if m := grammar["comparison"].fullmatch(body):
        a, word, b = int(m.group(1)), m.group(2), int(m.group(3))
        if {a, b} != {1, 2}:
            return None
        return _Verdict(a if word == "better" else b, canonical=lead is None)  # type: ignore[arg-type]
    for form in ("better-alone", "better-is", "bare"):
        if (m := grammar[form].fullmatch(body)) and m.group(1) in ("1", "2"):
            return _Verdict(int(m.group(1)), canonical=False)  # type: ignore[arg-type]
    return None


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


def _result_blocks(text: str) -> list[tuple[str, bool]]:
    """(statement, closed) of every <Result> block, in one pass over the tags (linear on any input).

    A block ends at its closing tag, else at the next <Result>, else at the end of the text.
    """
    opens = list(_RESULT_OPEN.finditer(text))
    closes = [m.start() for m in _RESULT_CLOSE.finditer(text)]
    blocks = []
    for k, m in enumerate(opens):
        nxt = opens[k + 1].start() if k + 1 < len(opens) else len(text)
        i = bisect.bisect_left(closes, m.end())
        closed = i < len(closes) and closes[i] < nxt
        blocks.append((text[m.end() : closes[i] if closed else nxt], closed))
    return blocks


def parse_output(text: str, *, task: Task = Task.RESPONSE) -> ParsedOutput:
    """Parse one model output for `task`. Never raises on any string."""
    if not isinstance(text, str) or not text.strip():
        return ParsedOutput("", None, ParseStatus.EMPTY)
    analysis, rest, repaired = _split_analysis(text)
    blocks = _result_blocks(text)
    if not blocks:
        # No <Result> tag: accept one statement of the grammar standing alone after a closed analysis.
        verdict = _read(rest, task) if rest.strip() else None
        if verdict is None:
            return ParsedOutput(analysis, None, ParseStatus.NO_RESULT)
        return ParsedOutput(analysis, verdict.choice, ParseStatus.REPAIRED)
    verdicts = [v for statement, _ in blocks if (v := _read(statement, task)) is not None]
    if len(verdicts) != len(blocks) or len({v.choice for v in verdicts}) != 1:
        return ParsedOutput(analysis, None, ParseStatus.INVALID_RESULT)
    exact = not repaired and len(blocks) == 1 and blocks[0][1] and verdicts[0].canonical
    return ParsedOutput(analysis, verdicts[0].choice, ParseStatus.OK if exact else ParseStatus.REPAIRED)
