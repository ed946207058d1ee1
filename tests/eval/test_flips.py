"""The pure parts of a comparison's flips (`reflectrm.eval.flips`): which items flipped and which way, the template
rule (numbers masked, whitespace normalised) and what a pair shares with flipped ones. Tables of cases."""

from __future__ import annotations

import pytest

from reflectrm.core.types import ChatMessage, PreferencePair
from reflectrm.eval.flips import (
    BROKEN, FIXED, PROBLEM, TEMPLATE, Keys, SharedKeys, flipped_items, pair_keys, problem_template, template_key,
)
from reflectrm.eval.scoring import ItemResult


def _turns(*texts: str) -> tuple[ChatMessage, ...]:
    """User turns, or "role: text" for another role."""
    out = []
    for t in texts:
        role, _, text = t.partition(": ") if t.startswith(("system: ", "assistant: ")) else ("user", "", t)
        out.append(ChatMessage(role=role, content=text))
    return tuple(out)


# --- the template: numbers masked, whitespace normalised -------------------------------------------------------

@pytest.mark.parametrize(("conversation", "template"), [
    pytest.param(_turns("A counter shows 9. Step 1: add 13."), "user: A counter shows #. Step #: add #.",
                 id="every-digit-run-masked"),
    pytest.param(_turns("Pay 3.50 in 2024"), "user: Pay #.# in #", id="a-decimal-is-two-runs"),
    pytest.param(_turns("x2 and 007"), "user: x# and #", id="digits-inside-a-word-and-leading-zeros"),
    pytest.param(_turns("add -5"), "user: add -#", id="the-sign-is-kept"),
    pytest.param(_turns("  a \n\n b\t c  "), "user: a b c", id="whitespace-one-space"),
    pytest.param(_turns("no numbers"), "user: no numbers", id="nothing-to-mask"),
    pytest.param(_turns("system: Be terse 2", "What is 4?"), "system: Be terse # user: What is #?",
                 id="each-turn-with-its-role"),
    pytest.param(_turns("١٢ apples"), "user: # apples", id="other-scripts-digits-too"),
])
def test_the_template_masks_numbers_and_normalises_whitespace(conversation, template) -> None:  # noqa: ANN001
    assert problem_template(conversation) == template


@pytest.mark.parametrize(("one", "other", "same"), [
    pytest.param(_turns("A counter shows 9. Step 1: add 3."), _turns("A counter shows 12. Step 1: add 8."), True,
                 id="other-numbers-one-shape"),
    pytest.param(_turns("A counter shows 9.  Step 1: add 3."), _turns("A counter shows 9.\nStep 1: add 3."), True,
                 id="other-spacing-one-shape"),
    pytest.param(_turns("A counter shows 9. Step 1: add 3."),
                 _turns("A counter shows 9. Step 1: add 3. Step 2: add 1."), False, id="one-more-step-another-shape"),
    pytest.param(_turns("A counter shows 9."), _turns("A meter reads 9."), False, id="another-wording"),
    pytest.param(_turns("A counter shows 9."), _turns("a counter shows 9."), False, id="case-is-kept"),
    pytest.param(_turns("What is 4?"), _turns("system: Be terse", "What is 4?"), False, id="a-history-is-part-of-it"),
    pytest.param(_turns("system: What is 4?"), _turns("What is 4?"), False, id="the-role-is-part-of-it"),
])
def test_same_shape_groups_another_shape_does_not(one, other, same: bool) -> None:  # noqa: ANN001
    assert (template_key(one) == template_key(other)) is same


def test_a_pairs_problem_is_its_conversation_and_its_template_ignores_the_numbers() -> None:
    def pair(query: str, r1: str = "GOOD", r2: str = "BAD") -> PreferencePair:
        return PreferencePair(conversation=_turns(query), response_1=r1, response_2=r2, label=1)

    base = pair_keys(pair("A counter shows 9."))
    assert pair_keys(pair("A counter shows 9.", "other", "responses")) == base  # responses are not the problem
    renumbered = pair_keys(pair("A counter shows 10."))
    assert renumbered.problem != base.problem and renumbered.template == base.template


# --- which items flipped, which way ------------------------------------------------------------------------------

def _item(item_id: str = "p", *, verdict: int | None = 1, label: int | None = 1, swapped: bool = False,
          strategy: str = "greedy", skipped: str = "", tie: bool = False, jid: int | None = 1) -> ItemResult:
    return ItemResult(item_id=item_id, strategy=strategy, swapped=swapped, subset="", label=label, tie=tie,
                      verdict=verdict, skipped=skipped, judgment_id=jid)


@pytest.mark.parametrize(("a", "b", "expected"), [
    pytest.param([_item(verdict=1)], [_item(verdict=2, jid=2)], [("p", False, BROKEN, 1, 2)], id="right-to-wrong"),
    pytest.param([_item(verdict=2)], [_item(verdict=1, jid=2)], [("p", False, FIXED, 1, 2)], id="wrong-to-right"),
    pytest.param([_item(verdict=1)], [_item(verdict=1)], [], id="both-right-no-flip"),
    pytest.param([_item(verdict=2)], [_item(verdict=2)], [], id="both-wrong-no-flip"),
    # an abstention on a labelled pair counts wrong, as accuracy counts it
    pytest.param([_item(verdict=1)], [_item(verdict=None, jid=2)], [("p", False, BROKEN, 1, 2)],
                 id="abstaining-is-wrong"),
    pytest.param([_item(verdict=None)], [_item(verdict=None)], [], id="both-abstain-no-flip"),
    # not scored: never flips
    pytest.param([_item(verdict=1)], [_item(verdict=2, skipped="too long")], [], id="skipped-not-scored"),
    pytest.param([_item(verdict=1, label=None, tie=True)], [_item(verdict=2, label=None, tie=True)], [],
                 id="a-tie-not-scored"),
    pytest.param([_item(verdict=1, label=None)], [_item(verdict=2, label=None)], [], id="unlabelled-not-scored"),
    # paired by pair, strategy and order
    pytest.param([_item("p")], [_item("q", verdict=2)], [], id="another-pair-is-not-its-twin"),
    pytest.param([_item(strategy="greedy")], [_item(strategy="reflectrm", verdict=2)], [],
                 id="another-strategy-is-not-its-twin"),
    pytest.param([_item(swapped=False), _item(swapped=True, verdict=2, jid=3)],
                 [_item(swapped=False, verdict=2, jid=2), _item(swapped=True, verdict=2, jid=4)],
                 [("p", False, BROKEN, 1, 2)], id="each-order-on-its-own"),
    pytest.param([_item("b"), _item("a"), _item("a", swapped=True)],
                 [_item("a", swapped=True, verdict=2), _item("b", verdict=2), _item("a", verdict=2)],
                 [("a", False, BROKEN, 1, 1), ("a", True, BROKEN, 1, 1), ("b", False, BROKEN, 1, 1)],
                 id="ordered-by-pair-and-order-whatever-the-runs-order"),
    pytest.param([_item(verdict=2, jid=None)], [_item(verdict=1, jid=None)], [("p", False, FIXED, None, None)],
                 id="no-judgment-kept-still-flips"),
])
def test_flipped_items(a: list[ItemResult], b: list[ItemResult], expected: list[tuple]) -> None:
    assert [(f.item_id, f.swapped, f.direction, f.judgment_a, f.judgment_b) for f in flipped_items(a, b)] == expected


# --- what a pair shares with the flipped ones ------------------------------------------------------------------

FLIPPED = {"a": Keys("P1", "T1"), "b": Keys("P2", "T1"), "c": Keys("P3", "T2")}


@pytest.mark.parametrize(("candidate", "expected"), [
    pytest.param(Keys("P1", "T1"), (PROBLEM, ("a",)), id="the-problem-is-said-before-the-template"),
    pytest.param(Keys("P9", "T1"), (TEMPLATE, ("a", "b")), id="a-template-names-every-pair-of-it"),
    pytest.param(Keys("P3", "T2"), (PROBLEM, ("c",)), id="a-problem-alone-in-its-template"),
    pytest.param(Keys("P9", "T9"), None, id="shares-neither"),
    pytest.param(Keys("T1", "P1"), None, id="a-problem-key-is-never-matched-as-a-template"),
])
def test_what_a_candidate_shares(candidate: Keys, expected: tuple | None) -> None:
    got = SharedKeys(FLIPPED).relate(candidate)
    assert (None if got is None else (got.shares, got.with_items)) == expected
