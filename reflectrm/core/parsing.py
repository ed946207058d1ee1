"""Parse a judge's output into (analysis, choice, status). Never raises on model output.

The judge is asked for ``<Analysis>...</Analysis>`` then ``<Result>Response 1 is better than
Response 2</Result>`` (``Critique k`` for the reflection task). The parser reads a verdict only
when the result is one verdict statement of the grammar below, with any lead clause before it and
any explanation after it; everything else is `INVALID_RESULT`. It never guesses and never inverts:
a negation ("is not better"), a tie ("equally good", "neither"), a question, a condition ("if"), or
a second verdict anywhere in the block makes it invalid rather than read as either choice.

Thinking: every ``<think>...</think>`` span is removed before the tags are looked for, so a
``<Result>`` written while thinking is never read. Text before a lone ``</think>`` (the chat
template opened the thinking) is thinking; an unclosed ``<think>`` runs to the first
``<Analysis>`` after it, else to the end.

Grammar (matched against the whole block, after normalisation)::

    normalise   lower-case; drop markdown emphasis, quotes and brackets (* _ ` # " ' [ ]);
                collapse whitespace; strip; drop a leading list bullet ("- ", "+ ", "• ");
                drop trailing end punctuation (. ! ; 。 ； ！)
    statement   := [lead] verdict [explanation]          (at most MAX_STATEMENT_WORDS words)
                 | [known-lead " "] bare
    lead        := known-lead [":" | ","] " "
                 | any clause ending in a separator (, : ; . ! — – - 。 ， ：) then " "
                   ("After weighing accuracy, ", "Based on the analysis, ",
                    "Critique 2 offers a more complete analysis. ")
    known-lead  := "so" | "thus" | "therefore" | "hence" | "overall" | "in conclusion" | "in summary"
                 | "verdict" | "final verdict" | "result" | "answer" | "final answer"
    verdict     := comparison                                       -> ok (alone), else repaired
                 | ref " is " [adverb " "] "better"                 -> repaired ("Response 1 is better.")
                 | ref " is the better" [" one" | " " noun | " of the two" [" " noun "s"]]
                 | "the better " (noun | "one" | "of the two" [" " noun "s"]) " is " ref
    comparison  := ref " " ("is" | "was") " " [adverb " "] ("better" | "worse") [" overall"] " than " ref
                   with the two refs naming 1 and 2 once each; "worse" names the other one
    explanation := anything after the verdict, from a word boundary (" because ...", ", since ...",
                   " (more accurate)", " in terms of accuracy", " — it is correct", " overall",
                   ". It is more accurate.")
    bare        := ref | digit                                      -> repaired ("**Response 2**", "2")
    ref         := noun [" "] digit          (no letter or digit of any script right after it)
    noun        := "response" (response task) | "critique" (reflection task); the other task's noun is invalid
    digit       := "1" | "2"                 (ASCII only: fullwidth or Arabic-Indic digits are invalid)
    adverb      := slightly | somewhat | much | far | clearly | significantly | marginally | overall
                 | definitely | probably | likely | arguably | generally

Refused anywhere in the block, whatever else it says (never read as either choice):

    negation    "not" "no" "never" "neither" "nor" "none" "nothing" "nobody" "hardly" "barely"
                "scarcely" "cannot", and any contraction in n't ("isn't", "isnt", "doesn't", ...)
    tie         "equally" "equal" "tie" "tied" "as good as" "as bad as" "either"
    condition   "if" "unless" "whether";  a question mark
    two verdicts  more than one verdict; a candidate named outside the verdict together with a
                verdict word (better, worse, best, worst, superior, inferior, prefer..., winner,
                win(s), outperform..., beat(s)); the other (losing) candidate named outside the verdict
                with "more" or "less", or after the verdict with a contrast (but, however, although,
                though, yet, whereas, while); a candidate numbered other than 1 or 2
    contrast lead  a block that opens with "however" "but" "yet" "still" "nevertheless" "nonetheless"
                "on the other hand" "that said" "even so" (it answers something the parser cannot see)
    other leads  a clause not set off by a separator ("I think Response 1 is better ...")

A hedge ("probably better") keeps the verdict's direction, so it is read; any other word between
"is" and "better" is not. Several ``<Result>`` blocks must each be in the grammar and agree
(repaired); one invalid or disagreeing block makes the whole output invalid. Without any
``<Result>`` tag, one statement of the grammar standing alone after ``</Analysis>`` is read
(repaired); untagged prose with no analysis tags is an analysis, not a verdict.

Status: `OK` for a comparison with nothing around it in one closed ``<Result>`` after a closed
analysis; `REPAIRED` for any other accepted form or a missing tag; `NO_RESULT`, `INVALID_RESULT`,
`EMPTY` otherwise. Every regular expression here is bounded and anchored or literal-led, and tags
are found in one pass, so parsing is linear in the length of the output, hostile output included.
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
_THINK_OPEN = re.compile(r"<\s{0,8}think\s{0,8}>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"<\s{0,8}/\s{0,8}think\s{0,8}>", re.IGNORECASE)
_EMPHASIS = re.compile(r"[*_`#\"'‘’“”\[\]]")
_SPACES = re.compile(r"\s+")
_BULLET = re.compile(r"(?:[-+•] )+")
_END_PUNCTUATION = ".!;。；！ "
_SEPARATORS = ",:;.!—–-。，：；！"

MAX_STATEMENT_WORDS = 60
"""Words in one result block, at most: a verdict with its lead and explanation is a sentence or
three; a longer block is an analysis written into the result, not one statement."""

ADVERBS = ("slightly", "somewhat", "much", "far", "clearly", "significantly", "marginally", "overall",
           "definitely", "probably", "likely", "arguably", "generally")
"""Words allowed between "is" and "better"/"worse": they grade or hedge a verdict, never reverse it."""

LEADS = ("so", "thus", "therefore", "hence", "overall", "in conclusion", "in summary", "verdict", "final verdict",
         "result", "answer", "final answer")
"""Words allowed before a verdict without a separator ("Therefore Response 2 ..."), and before a bare one."""

NEGATIONS = ("not", "no", "never", "neither", "nor", "none", "nothing", "nobody", "hardly", "barely", "scarcely",
             "cannot", "isnt", "arent", "wasnt", "werent", "doesnt", "dont", "didnt", "cant", "wont", "wouldnt",
             "shouldnt", "couldnt", "hasnt", "havent", "hadnt", "aint")
"""Words that make a block invalid wherever they stand (a contraction with an apostrophe is caught as n't)."""

TIES = ("equally", "equal", "tie", "tied", "as good as", "as bad as", "either")
CONDITIONS = ("if", "unless", "whether")
CONTRAST_LEADS = ("however", "but", "yet", "still", "nevertheless", "nonetheless", "on the other hand", "that said",
                  "even so")
_CONTRASTS = ("but", "however", "although", "though", "yet", "whereas", "while")
_VERDICT_WORDS = r"better|worse|best|worst|superior|inferior|prefer\w*|winner|wins?|outperform\w*|beats?"


def _words(words: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(rf"\b(?:{'|'.join(words)})\b")


_ADVERB = rf"(?:(?:{'|'.join(ADVERBS)}) )"
_KNOWN_LEAD = re.compile(rf"(?:{'|'.join(LEADS)})[:,]?")
_REFUSED = (re.compile(r"n['’]t\b"), _words(NEGATIONS), _words(TIES), _words(CONDITIONS), re.compile(r"[?？]"),
            re.compile(rf"(?:{'|'.join(CONTRAST_LEADS)})\b"))
_VERDICT_WORD = re.compile(rf"\b(?:{_VERDICT_WORDS})\b")
_MORE_LESS = _words(("more", "less"))
_CONTRAST = _words(_CONTRASTS)


@dataclass(frozen=True, slots=True)
class _Grammar:
    verdicts: re.Pattern[str]  # every verdict form, one alternation (the comparison tried first)
    bare: re.Pattern[str]
    refs: re.Pattern[str]  # the task's noun and the token after it, anywhere
    ordinals: re.Pattern[str]


def _grammar(noun: str) -> _Grammar:
    def ref(name: str) -> str:
        return rf"{noun} ?(?P<{name}>[0-9])(?![0-9\w])"

    two = rf"of the two(?: {noun}s)?"
    forms = (
        rf"{ref('a')} (?:is|was) {_ADVERB}?(?P<word>better|worse)(?: overall)? than {ref('b')}",
        rf"{ref('c')} is (?:{_ADVERB}?better|the better(?: one| {noun}| {two})?)(?!\w)",
        rf"the better (?:{noun}|one|{two}) is {ref('d')}",
    )
    return _Grammar(
        verdicts=re.compile(rf"(?<!\w)(?:(?P<comparison>{forms[0]})|{forms[1]}|{forms[2]})"),
        bare=re.compile(rf"(?:{_KNOWN_LEAD.pattern} )?(?:{noun} ?)?([0-9])(?![0-9\w])"),
        refs=re.compile(rf"(?<!\w){noun}s? ?(\w*)"),
        ordinals=re.compile(rf"\b(?:(first|second|other) (?:one|{noun})|the (former|latter))\b"),
    )


_GRAMMARS = {task: _grammar(task.noun.lower()) for task in Task}
_ORDINAL = {"first": 1, "former": 1, "second": 2, "latter": 2}


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
    canonical: bool  # the comparison form with nothing around it: what the format asks for


def _normalise(text: str) -> str:
    # rstrip, not a "[.!]+$" regex: that one rescans a long run of dots from every position
    s = _SPACES.sub(" ", _EMPHASIS.sub("", text)).strip().lower()
    if bullet := _BULLET.match(s):
        s = s[bullet.end() :]
    return s.rstrip(_END_PUNCTUATION)


def read_statement(statement: str, *, task: Task = Task.RESPONSE) -> tuple[Choice | None, bool]:
    """(choice, canonical) of one result statement under the grammar; (None, False) outside it."""
    verdict = _read(statement, task)
    return (None, False) if verdict is None else (verdict.choice, verdict.canonical)


def _read(statement: str, task: Task) -> _Verdict | None:
    s = _normalise(statement)
    if not s or len(s.split(maxsplit=MAX_STATEMENT_WORDS)) > MAX_STATEMENT_WORDS:
        return None
    if _REFUSED[0].search(statement.lower()) or any(p.search(s) for p in _REFUSED[1:-1]) or _REFUSED[-1].match(s):
        return None
    grammar = _GRAMMARS[task]
    matches = list(grammar.verdicts.finditer(s))
    if not matches:
        bare = grammar.bare.fullmatch(s)
        return _Verdict(int(bare.group(1)), canonical=False) if bare and bare.group(1) in "12" else None  # type: ignore[arg-type]
    if len(matches) > 1:
        return None
    m = matches[0]
    choice = _choice_of(m)
    lead, trail = s[: m.start()].strip(), s[m.end() :].strip()
    if choice is None or not _lead_allowed(lead) or not _rest_allowed(lead, trail, winner=choice, grammar=grammar):
        return None
    return _Verdict(choice, canonical=m.group("comparison") is not None and not lead and not trail)


def _choice_of(m: re.Match[str]) -> Choice | None:
    """The candidate one verdict match names; None when it names a candidate that does not exist."""
    if m.group("comparison") is not None:
        a, b = int(m.group("a")), int(m.group("b"))
        if {a, b} != {1, 2}:
            return None
        return a if m.group("word") == "better" else b  # type: ignore[return-value]
    digit = m.group("c") or m.group("d")
    return int(digit) if digit in ("1", "2") else None  # type: ignore[return-value]


def _lead_allowed(lead: str) -> bool:
    """A lead is a known lead word or a clause set off by a separator ("I think ..." is neither)."""
    return not lead or lead[-1] in _SEPARATORS or _KNOWN_LEAD.fullmatch(lead) is not None


def _rest_allowed(lead: str, trail: str, *, winner: Choice, grammar: _Grammar) -> bool:
    """No second verdict in the lead or explanation (see "two verdicts" in the module docstring)."""
    loser = 3 - winner
    rest = f"{lead} | {trail}"
    named: set[int] = set()
    for m in grammar.refs.finditer(rest):
        token = m.group(1)
        if token in ("1", "2"):
            named.add(int(token))
        elif token[:1].isdigit() or token[:1].isnumeric():
            return False  # "Response 3", "Response 12": a candidate that does not exist
    for m in grammar.ordinals.finditer(rest):
        named.add(_ORDINAL.get(m.group(1) or m.group(2), loser))  # "the other one" is the loser
    if named and _VERDICT_WORD.search(rest):
        return False
    if loser in named and (_MORE_LESS.search(rest) or _CONTRAST.search(trail)):
        return False
    return True


def strip_thinking(text: str) -> str:
    """`text` without its thinking (see the module docstring), in one pass over the think tags."""
    opens, closes = list(_THINK_OPEN.finditer(text)), [m.end() for m in _THINK_CLOSE.finditer(text)]
    close_starts = [m.start() for m in _THINK_CLOSE.finditer(text)]
    if not opens and not closes:
        return text
    pos = 0
    if close_starts and (not opens or close_starts[0] < opens[0].start()):
        pos = closes[0]  # a lone </think>: the template opened the thinking
    pieces = []
    for o in opens:
        if o.start() < pos:
            continue
        pieces.append(text[pos : o.start()])
        i = bisect.bisect_left(close_starts, o.end())
        if i < len(closes):
            pos = closes[i]
        else:  # unclosed: the thinking runs to the first <Analysis>, else to the end
            analysis = _ANALYSIS_OPEN.search(text, o.end())
            pos = analysis.start() if analysis else len(text)
    pieces.append(text[pos:])
    return "".join(pieces)


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
    text = strip_thinking(text)
    if not text.strip():
        return ParsedOutput("", None, ParseStatus.NO_RESULT)  # only thinking, never an answer
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
