"""The parser never raises on model output and reads only what the model unambiguously said."""

import pytest

from reflectrm.core.parsing import parse_output
from reflectrm.core.prompts import Task
from reflectrm.core.types import ParseStatus

OK, REP, NO, BAD, EMPTY = (ParseStatus.OK, ParseStatus.REPAIRED, ParseStatus.NO_RESULT,
                           ParseStatus.INVALID_RESULT, ParseStatus.EMPTY)

CASES = [
    pytest.param("<Analysis>a</Analysis><Result>Response 1 is better than Response 2</Result>", 1, OK, "a", id="canonical-1"),
    pytest.param("<Analysis>a</Analysis>\n<Result>Response 2 is better than Response 1</Result>", 2, OK, "a",
                 id="reversed-order"),  # trap: the first number mentioned is not always 1
    pytest.param("<analysis> x </ANALYSIS><result>response 2 IS BETTER THAN response 1</result>", 2, OK, "x",
                 id="case-insensitive"),
    pytest.param("<Analysis>\n\n a \n</Analysis>\n\n<Result>\n  Response   1  is  better   than Response 2 \n</Result>\n",
                 1, OK, "a", id="whitespace"),
    pytest.param("< Analysis >a< /Analysis >< Result >Response 1 is better than Response 2< / Result >", 1, OK, "a",
                 id="spaces-inside-tags"),
    pytest.param("<Analysis>a</Analysis><Result>Response 1 is better than Response 2", 1, REP, "a",
                 id="missing-result-close"),  # truncated at max_new_tokens after the statement
    pytest.param("<Analysis>a<Result>Response 2 is better than Response 1</Result>", 2, REP, "a",
                 id="missing-analysis-close"),
    pytest.param("<Analysis>a</Analysis><Result>**Response 2** is better than **Response 1**</Result>", 2, OK, "a",
                 id="markdown-bold"),
    pytest.param("<Analysis>a</Analysis><Result>Response 1 is worse than Response 2</Result>", 2, OK, "a",
                 id="worse-than"),  # trap: "worse" flips the winner
    pytest.param("<Analysis>a</Analysis><Result>Response 2 is slightly better than Response 1</Result>", 2, OK, "a",
                 id="adverb"),
    pytest.param("<Analysis>a</Analysis><Result>Response 2</Result>", 2, REP, "a", id="bare-candidate"),
    pytest.param("<Analysis>a</Analysis><Result>1</Result>", 1, REP, "a", id="bare-digit"),
    pytest.param("<Analysis>a</Analysis><Result>Response 1 is better than Response 1</Result>", None, BAD, "a",
                 id="self-comparison"),
    pytest.param("<Analysis>a</Analysis><Result>Response 3 is better than Response 1</Result>", None, BAD, "a",
                 id="no-such-candidate"),
    pytest.param("<Analysis>a</Analysis><Result>Response 12 is better than Response 2</Result>", None, BAD, "a",
                 id="multi-digit"),  # trap: must not read "1" out of "12"
    pytest.param("<Analysis>a</Analysis><Result>Response 1 is better than Response 2. Response 2 is better than "
                 "Response 1.</Result>", None, BAD, "a", id="contradiction-in-result"),
    pytest.param("<Analysis>a</Analysis><Result>Response 1 is better than Response 2</Result>"
                 "<Result>Response 2 is better than Response 1</Result>", None, BAD, "a", id="two-conflicting-results"),
    pytest.param("<Analysis>a</Analysis><Result>Response 1 is better than Response 2</Result>"
                 "<Result>Response 1 is better than Response 2</Result>", 1, REP, "a", id="two-agreeing-results"),
    pytest.param("<Analysis>a</Analysis><Result>They are equally good.</Result>", None, BAD, "a", id="tie"),
    pytest.param("<Analysis>a</Analysis><Result></Result>", None, BAD, "a", id="empty-result"),
    pytest.param("<Analysis>Response 2 is better than Response 1 at first sight, but</Analysis>", None, NO,
                 "Response 2 is better than Response 1 at first sight, but", id="statement-only-inside-analysis"),
    pytest.param("<Analysis>a</Analysis> So Response 2 is better than Response 1.", 2, REP, "a",
                 id="statement-after-analysis-without-tag"),
    pytest.param("Response 1 is better than Response 2", None, NO, "Response 1 is better than Response 2",
                 id="no-tags-at-all"),  # untagged prose is an analysis, not a verdict
    pytest.param("", None, EMPTY, "", id="empty"),
    pytest.param("   \n\t ", None, EMPTY, "", id="whitespace-only"),
    pytest.param("<Analysis>a</Analysis><Result>Critique 1 is better than Critique 2</Result>", None, BAD, "a",
                 id="wrong-noun-for-task"),  # a reflection verdict is no response verdict
    pytest.param("<Analysis>\x00<script>alert(1)</script></Analysis><Result>Response 1 is better than Response 2</Result>",
                 1, OK, "\x00<script>alert(1)</script>", id="hostile-analysis-kept-verbatim"),
    pytest.param("<Analysis>" + "a" * 200_000 + "</Analysis><Result>Response 2 is better than Response 1</Result>",
                 2, OK, "a" * 200_000, id="huge"),
    pytest.param("<Result>Response 2 is better than Response 1</Result>", 2, REP, "", id="result-without-analysis"),
    pytest.param("<Analysis>a</Analysis><Result>Response #1 is better than Response #2</Result>", 1, OK, "a", id="hash-sign"),
    pytest.param("<Analysis>a</Analysis><Result>response1 is better than response2</Result>", 1, OK, "a", id="no-space"),
    pytest.param("<Analysis>a</Analysis><Result>Response ２ is better than Response １</Result>", None, BAD, "a",
                 id="fullwidth-digits"),  # not guessed
]


@pytest.mark.parametrize(("text", "choice", "status", "analysis"), CASES)
def test_parse_response_task(text, choice, status, analysis):
    out = parse_output(text, task=Task.RESPONSE)
    assert (out.choice, out.status, out.analysis) == (choice, status, analysis)
    assert out.status.parseable == (out.choice is not None)


def test_parser_survives_random_garbage():
    import random

    rng = random.Random(7)
    alphabet = "<>/ ResultAnalysiponeCritq12 \n\x00é😀"
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        out = parse_output(text)
        assert out.choice in (None, 1, 2)


def test_non_string_is_empty_not_an_exception():
    assert parse_output(None).status is ParseStatus.EMPTY  # type: ignore[arg-type]
