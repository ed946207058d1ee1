"""The verdict grammar (reflectrm/core/parsing.py docstring), pinned by statements as judges write them.

Each case is one judge output; the expected choice is what the statement says, or None (INVALID)
when the statement is outside the grammar. The trap every negation case covers: a parser that
skips words between "is" and "better" reads "Response 1 is not better than Response 2" as 1.
"""

from __future__ import annotations

import time

import pytest

from reflectrm.core.parsing import ADVERBS, parse_output
from reflectrm.core.prompts import Task
from reflectrm.core.types import ParseStatus

OK, REP, BAD = ParseStatus.OK, ParseStatus.REPAIRED, ParseStatus.INVALID_RESULT
R, C = Task.RESPONSE, Task.ANALYSIS


def res(statement: str) -> str:
    """A well-formed output whose <Result> block holds `statement`."""
    return f"<Analysis>I compared both.</Analysis>\n<Result>{statement}</Result>"


def case(statement: str, choice: int | None, status: ParseStatus, *, task: Task = R, id: str, raw: bool = False):
    return pytest.param(statement if raw else res(statement), task, choice, status, id=id)


STATEMENTS = [
    # --- the canonical comparison, in both orders and with "worse" (trap: "worse" names the other one)
    case("Response 1 is better than Response 2", 1, OK, id="canonical-1"),
    case("Response 2 is better than Response 1", 2, OK, id="canonical-2"),
    case("Response 1 is worse than Response 2", 2, OK, id="worse-1"),
    case("Response 2 is worse than Response 1", 1, OK, id="worse-2"),
    case("Response 2 is better than Response 1.", 2, OK, id="trailing-period"),
    case("Response 1 was better than Response 2", 1, OK, id="past-tense"),
    case("RESPONSE 2 IS BETTER THAN RESPONSE 1", 2, OK, id="upper-case"),
    # --- negations: never the opposite verdict, never any verdict
    case("Response 1 is not better than Response 2", None, BAD, id="not-better-1"),
    case("Response 2 is not better than Response 1", None, BAD, id="not-better-2"),
    case("Response 2 isn't better than Response 1", None, BAD, id="isnt-better"),
    case("Response 2 isn’t better than Response 1", None, BAD, id="isnt-curly-apostrophe"),
    case("Response 1 is not worse than Response 2", None, BAD, id="not-worse"),  # means 1 >= 2: a tie is allowed
    case("Response 1 is no better than Response 2", None, BAD, id="no-better"),
    case("Response 2 is never better than Response 1", None, BAD, id="never-better"),
    case("Response 1 is hardly better than Response 2", None, BAD, id="hardly-better"),
    case("Response 1 is probably not better than Response 2", None, BAD, id="hedged-negation"),
    case("It is not the case that Response 1 is better than Response 2", None, BAD, id="negated-clause"),
    case("Not Response 1 is better than Response 2", None, BAD, id="leading-not"),
    case("Response 1 is not better", None, BAD, id="not-better-alone"),
    case("Response 2 is not the better response", None, BAD, id="not-the-better"),
    case("The better response is not Response 2", None, BAD, id="better-is-not"),
    # --- ties and refusals
    case("Neither response is better.", None, BAD, id="neither"),
    case("Both responses are equally good.", None, BAD, id="both-equally-good"),
    case("Response 1 and Response 2 are equally good", None, BAD, id="equally-good"),
    case("Response 1 is as good as Response 2", None, BAD, id="as-good-as"),
    case("Response 1 is equally good as Response 2", None, BAD, id="equally-good-as"),
    case("Both", None, BAD, id="both"),
    case("Tie", None, BAD, id="tie"),
    case("I cannot decide.", None, BAD, id="cannot-decide"),
    # --- hedges and grades keep the direction
    case("Response 2 is probably better than Response 1", 2, OK, id="probably"),
    case("Response 1 is likely better than Response 2", 1, OK, id="likely"),
    case("Response 2 is slightly better than Response 1", 2, OK, id="slightly"),
    case("Response 1 is much worse than Response 2", 2, OK, id="much-worse"),
    case("Response 1 is arguably slightly better than Response 2", None, BAD, id="two-adverbs"),
    case("Response 1 might be better than Response 2", None, BAD, id="might-be"),
    case("I think Response 1 is better than Response 2", None, BAD, id="i-think"),
    # --- short forms that say one thing (accepted, repaired)
    case("Response 1 is better.", 1, REP, id="better-alone-1"),
    case("Response 2 is better", 2, REP, id="better-alone-2"),
    case("Response 2 is clearly better.", 2, REP, id="adverb-better-alone"),
    case("Response 2 is the better one.", 2, REP, id="the-better-one"),
    case("Response 1 is the better response", 1, REP, id="the-better-response"),
    case("The better response is Response 2", 2, REP, id="the-better-response-is"),
    case("The better response is Response 2.", 2, REP, id="the-better-response-is-period"),
    case("The better one is Response 1", 1, REP, id="the-better-one-is"),
    case("The better response is Response 3", None, BAD, id="the-better-is-no-such"),
    case("Response 1 is worse.", None, BAD, id="worse-alone"),  # outside the grammar: not inferred
    case("The worse response is Response 1", None, BAD, id="the-worse-is"),
    case("Response 2", 2, REP, id="bare"),
    case("2", 2, REP, id="bare-digit"),
    # --- markdown and leads
    case("**Response 2**", 2, REP, id="bold-bare"),
    case("`Response 1`", 1, REP, id="code-bare"),
    case("**Response 1** is better than **Response 2**.", 1, OK, id="bold-comparison"),
    case("Response 2 is **much** better than Response 1", 2, OK, id="bold-adverb"),
    case("Therefore, Response 2 is better than Response 1.", 2, REP, id="lead-therefore"),
    case("Final verdict: Response 1 is better than Response 2", 1, REP, id="lead-final-verdict"),
    case("Verdict: **Response 2**", 2, REP, id="lead-bare"),
    case("Overall, Response 1 is slightly better than Response 2.", 1, REP, id="lead-overall-adverb"),
    case("Overall, Response 1 is not better than Response 2.", None, BAD, id="lead-negated"),
    case("However, Response 1 is better than Response 2", None, BAD, id="unknown-lead"),
    # --- numbers: only ASCII 1 and 2, never a digit read out of a longer token
    case("Response ２ is better than Response １", None, BAD, id="fullwidth"),
    case("Response ٢ is better than Response ١", None, BAD, id="arabic-indic"),
    case("Response २", None, BAD, id="devanagari-bare"),
    case("Response 1٢ is better than Response 2", None, BAD, id="mixed-script-number"),
    case("Response 12 is better than Response 2", None, BAD, id="multi-digit"),
    case("Response 2nd is better", None, BAD, id="ordinal"),
    case("Response ² is better than Response ¹", None, BAD, id="superscript"),
    case("Response 3 is better than Response 1", None, BAD, id="no-such-candidate"),
    case("Response 1 is better than Response 1", None, BAD, id="self-comparison"),
    case("Response A is better than Response B", None, BAD, id="letters"),
    # --- anything after or around the verdict
    case("Response 1 is better than Response 2 because it is correct.", 1, REP, id="explanation"),  # read since #30
    case("Response 1 is better than Response 2. Response 2 is worse than Response 1.", None, BAD, id="two-sentences"),
    case("Response 1 is better than Response 2?", None, BAD, id="question"),
    case("Response 1 is better than Response 2? No.", None, BAD, id="question-answered"),
    case("Response 1 is superior to Response 2", None, BAD, id="superior-to"),
    case("Response 1 > Response 2", None, BAD, id="symbol"),
    # --- several <Result> blocks
    case(res("Response 1 is better than Response 2") + "<Result>Response 2 is worse than Response 1</Result>",
         1, REP, raw=True, id="two-results-agree"),
    case(res("Response 1 is better than Response 2") + "<Result>Response 2 is better than Response 1</Result>",
         None, BAD, raw=True, id="two-results-disagree"),
    case(res("Response 2 is better than Response 1") + "<Result>Response 2 is not better than Response 1</Result>",
         None, BAD, raw=True, id="second-result-negated"),
    case(res("Response 2") + "<Result>Response 2</Result><Result>The better response is Response 2",
         2, REP, raw=True, id="three-results-last-unclosed"),
    # --- the reflection task names critiques
    case("Critique 2 is better than Critique 1", 2, OK, task=C, id="critique-canonical"),
    case("Critique 1 is worse than Critique 2", 2, OK, task=C, id="critique-worse"),
    case("Critique 1 is not better than Critique 2", None, BAD, task=C, id="critique-negated"),
    case("The better critique is Critique 1", 1, REP, task=C, id="critique-better-is"),
    case("**Critique 2**", 2, REP, task=C, id="critique-bold-bare"),
    case("Response 1 is better than Response 2", None, BAD, task=C, id="response-noun-on-reflection"),
    case("The better response is Response 1", None, BAD, task=C, id="response-better-is-on-reflection"),
    case("Critique 1 is better than Critique 2", None, BAD, task=R, id="critique-noun-on-response"),
    # --- no <Result> tag: one statement alone after the analysis
    case("<Analysis>a</Analysis>\nThe better response is Response 2.", 2, REP, raw=True, id="untagged-better-is"),
    case("<Analysis>a</Analysis>\nResponse 1 is not better than Response 2.", None, ParseStatus.NO_RESULT, raw=True,
         id="untagged-negated"),
]


@pytest.mark.parametrize(("text", "task", "choice", "status"), STATEMENTS)
def test_statement_table(text, task, choice, status):
    out = parse_output(text, task=task)
    assert (out.choice, out.status) == (choice, status)


# Verdicts as real judges (Qwen3, Llama) write them (issue 30): one verdict with a lead or an explanation is read;
# a negation, a tie, a condition or a second verdict anywhere in the block still makes it invalid.
REAL_JUDGES = [
    # --- a lead clause before the verdict
    case("After weighing accuracy and helpfulness, Response 2 is better than Response 1.", 2, REP, id="lead-weighing"),
    case("Based on the analysis, Response 1 is better than Response 2.", 1, REP, id="lead-based-on"),
    case("Considering correctness, Response 2 is better than Response 1", 2, REP, id="lead-considering"),
    case("Taking everything into account: Response 2 is better than Response 1", 2, REP, id="lead-colon"),
    case("- Response 2 is better than Response 1", 2, OK, id="list-bullet"),
    # --- an explanation after it
    case("Response 2 is better than Response 1 because it is more accurate.", 2, REP, id="because"),
    case("Response 2 is better than Response 1, since it cites the correct formula.", 2, REP, id="since"),
    case("Response 2 is better than Response 1 (more accurate)", 2, REP, id="parenthesis"),
    case("Response 1 is better than Response 2 in terms of accuracy.", 1, REP, id="in-terms-of"),
    case("Response 2 is better than Response 1 — it is correct.", 2, REP, id="em-dash"),
    case("Response 2 is better than Response 1 overall", 2, REP, id="overall-after"),
    case("Response 2 is better than Response 1. It is more accurate.", 2, REP, id="second-sentence"),
    case("Response 1 is better than Response 2 because Response 2 contains an error.", 1, REP,
         id="explanation-names-the-loser"),
    case("Response 2 is better because it is more accurate.", 2, REP, id="better-alone-because"),
    case("The better response is Response 2, as it answers the question.", 2, REP, id="better-is-explained"),
    # --- labels, punctuation, word order
    case("[Response 1] is better than [Response 2]", 1, OK, id="prompt-labels"),
    case("Response 2 is better than Response 1。", 2, OK, id="ideographic-full-stop"),
    case("Response 2 is better than Response 1;", 2, OK, id="semicolon"),
    case("Response 2 is better overall than Response 1", 2, OK, id="better-overall-than"),
    case("Response 2 is the better of the two.", 2, REP, id="better-of-the-two"),
    case("The better of the two responses is Response 1", 1, REP, id="the-better-of-the-two-is"),
    case("Critique 2 offers a more complete analysis. Critique 2 is better than Critique 1.", 2, REP, task=C,
         id="paper-reflection"),
    case("Critique 1 correctly spots the error. Therefore, Critique 1 is better than Critique 2.", 1, REP, task=C,
         id="paper-reflection-therefore"),
    # --- refused: a negation, tie, condition or second verdict anywhere (trap: each would be read, some inverted,
    #     by a parser that only looks for the first verdict)
    case("After weighing both, Response 2 is not better than Response 1.", None, BAD, id="lead-then-negation"),
    case("Response 2 is better than Response 1 because Response 1 is not correct.", None, BAD,
         id="negation-in-explanation"),
    case("Response 2 is better than Response 1, but Response 1 is better at formatting.", None, BAD,
         id="second-verdict-for-the-loser"),
    case("Response 2 seems better at first. However, Response 1 is better than Response 2.", None, BAD,
         id="lead-names-a-candidate-with-a-verdict-word"),
    case("Response 2 is better than Response 1, though Response 1 is shorter.", None, BAD,
         id="contrast-naming-the-loser"),
    case("Response 2 is better than Response 1 because Response 1 is more verbose.", None, BAD,
         id="loser-more"),
    case("Response 2 is better than Response 1. Response 1 is better.", None, BAD, id="second-sentence-contradicts"),
    case("Response 2 is better than Response 1. The first response is better.", None, BAD, id="ordinal-contradicts"),
    case("Response 2 is better than Response 1. Actually, the other one is better.", None, BAD,
         id="the-other-one"),
    case("Response 2 is better than Response 1 if accuracy matters most.", None, BAD, id="conditional"),
    case("Response 2 is better than Response 1, but they are equally helpful.", None, BAD, id="tie-in-explanation"),
    case("Response 2 is better than Response 1, isn't it?", None, BAD, id="tag-question"),
    case("Response 2 is better than Response 1 and Response 3.", None, BAD, id="third-candidate"),
    case("Based on the analysis, Response 2 is better than Response 1, and Response 2 is the better one.", None, BAD,
         id="two-agreeing-verdicts"),
    case("Critique 2 offers a more complete analysis. Critique 1 is better than Critique 2.", None, BAD, task=C,
         id="reflection-lead-contradicts"),
    case("The analysis " + "goes on " * 40 + "so Response 2 is better than Response 1", None, BAD,
         id="analysis-written-into-the-result"),  # more than MAX_STATEMENT_WORDS words
]


@pytest.mark.parametrize(("text", "task", "choice", "status"), REAL_JUDGES)
def test_real_judge_verdicts(text, task, choice, status):
    out = parse_output(text, task=task)
    assert (out.choice, out.status) == (choice, status)


THINKING = [
    # trap: a <Result> written while thinking was read, and cut the analysis short
    pytest.param("<think>Maybe <Result>Response 1 is better than Response 2</Result>? Let me check.</think>\n"
                 "<Analysis>a</Analysis><Result>Response 2 is better than Response 1</Result>", 2, OK, "a",
                 id="result-inside-thinking"),
    pytest.param("I think <Analysis>draft</Analysis> works.</think><Analysis>a</Analysis>"
                 "<Result>Response 1 is better than Response 2</Result>", 1, OK, "a", id="template-opened-thinking"),
    pytest.param("<think>still thinking, <Result>Response 1 is better than Response 2</Result>\n"
                 "<Analysis>a</Analysis><Result>Response 2 is better than Response 1</Result>", 2, OK, "a",
                 id="unclosed-thinking-then-answer"),
    pytest.param("<think>Response 1 is better than Response 2, I guess", None, ParseStatus.NO_RESULT, "",
                 id="unclosed-thinking-only"),  # truncated while thinking: no verdict, not "nothing generated"
    pytest.param("<think></think>\n\n<Analysis>a</Analysis><Result>Response 1 is better than Response 2</Result>",
                 1, OK, "a", id="empty-thinking"),
]


@pytest.mark.parametrize(("text", "choice", "status", "analysis"), THINKING)
def test_thinking_is_removed_before_tags(text, choice, status, analysis):
    out = parse_output(text)
    assert (out.choice, out.status, out.analysis) == (choice, status, analysis)


def test_table_is_large_enough():
    assert len(STATEMENTS) >= 60


NEGATORS = ("not", "no", "never", "hardly", "not really", "not at all", "in no way")


@pytest.mark.parametrize("negator", NEGATORS)
@pytest.mark.parametrize("comparative", ["better", "worse"])
@pytest.mark.parametrize("task", [R, C])
def test_no_negated_comparison_is_ever_read(negator, comparative, task):
    """Every comparison the grammar accepts, negated after "is" (with or without an adverb), is invalid."""
    noun = task.noun
    for a, b in ((1, 2), (2, 1)):
        for adverb in ("", *(f"{w} " for w in ADVERBS)):
            for text in (f"{noun} {a} is {negator} {adverb}{comparative} than {noun} {b}",
                         f"{noun} {a} is {adverb}{negator} {comparative} than {noun} {b}"):
                assert parse_output(res(text), task=task).choice is None, text


HOSTILE = {
    "result-tags": "<Result>" * (1 << 17),
    "unclosed-tags-with-spaces": "<Result      " * (1 << 17),
    "analysis-tags": "<Analysis></Result>" * (1 << 16),
    "statements": "<Result>" + "Response 1 is " * (1 << 17),
    "dots": "<Result>Response 1 is better than Response 2" + "." * (1 << 20) + "x</Result>",
    "spaces": "<Analysis>a</Analysis>" + " " * (1 << 20) + "Response 1",
    "digits": "<Result>Response " + "1" * (1 << 20),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_megabyte_parses_in_linear_time(name):
    """1 MB of adversarial input parses at the speed of a pass over it (a quadratic parser takes hours)."""
    text = HOSTILE[name]
    assert len(text) >= 1 << 20
    start = time.perf_counter()
    out = parse_output(text)
    elapsed = time.perf_counter() - start
    assert out.choice in (None, 1, 2)
    assert elapsed < 5.0, f"{name}: {elapsed:.1f} s for {len(text)} characters"


def test_the_documented_grammar_names_every_accepted_word():
    """The module docstring is the grammar's statement: it must name every adverb and lead the parser takes."""
    from reflectrm.core import parsing

    doc = parsing.__doc__ or ""
    assert all(f'"{w}"' in doc or f" {w}" in doc for w in ADVERBS)
    assert all(f'"{w}"' in doc for w in parsing.LEADS)
    refused = (*parsing.NEGATIONS[:12], *parsing.TIES, *parsing.CONDITIONS, *parsing.CONTRAST_LEADS)
    assert all(f'"{w}"' in doc for w in refused), [w for w in refused if f'"{w}"' not in doc]
