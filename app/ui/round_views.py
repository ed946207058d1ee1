"""Review rounds as the workbench shows them: which rounds a user works in, their progress, the answers side by
side, the agreement tables and a snapshot's rule. Plain text and plain tables only: reviewers' notes and the
judge's analyses are data, shown as cell text, never as HTML.

The Review tab's "My rounds" and the Reviewers tab format with these; they hold no state and call no service.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from reflectrm.errors import InputError
from reflectrm_db.records import AnswerRecord, ReviewerRecord, RoundLabelRecord, RoundProgress, RoundRecord

HIDDEN = "hidden until you answer (blind round)"
"""What a blind round shows in place of other reviewers' answers and earlier corrections before one answers."""


def works_in(rnd: RoundRecord, reviewer: ReviewerRecord | None) -> bool:
    """Whether `reviewer` may take items of `rnd`: a reviewing role, and named by the round (or it names nobody)."""
    if reviewer is None or not reviewer.reviews:
        return False
    return not rnd.reviewers or reviewer.name.casefold() in {r.casefold() for r in rnd.reviewers}


def my_progress(p: RoundProgress, reviewer: str) -> tuple[int, int]:
    """(answered, assigned) of `reviewer` in the round; (0, 0) before they took an item."""
    for r in p.reviewers:
        if r.reviewer == reviewer:
            return r.answered, r.assigned
    return 0, 0


def progress_text(p: RoundProgress, reviewer: str) -> str:
    """One reviewer's line: "2 of 3 answered in round 'r1'" plus what is left for the round as a whole."""
    answered, assigned = my_progress(p, reviewer)
    left = p.needed - p.assigned
    return (f"{answered} of {assigned} answered by you in round {p.round.name!r}; "
            f"{left} answer(s) of the round not handed out yet")


def round_choice(rnd: RoundRecord) -> str:
    """The round's entry in a dropdown (its name is the value)."""
    return f"{rnd.name} ({rnd.items} items, overlap {rnd.overlap}{', blind' if rnd.blind else ''})"


def verdict_cell(verdict: int | None) -> str:
    return "" if verdict is None else f"Response {int(verdict)}"


def marks_cell(marks: Mapping[int, str]) -> str:
    """{0: "right", 3: "wrong"} -> "#0 right, #3 wrong" (positions in order)."""
    return ", ".join(f"#{int(k)} {v}" for k, v in sorted(marks.items()))


def answers_frame(answers: Sequence[AnswerRecord], *, analyses: int) -> pd.DataFrame:
    """Every answer side by side: one column per reviewer; rows: the verdict, each analysis's mark, the note."""
    rows: list[dict[str, str]] = [{"": "verdict", **{a.reviewer: verdict_cell(a.verdict) for a in answers}}]
    for k in range(analyses):
        rows.append({"": f"analysis #{k}", **{a.reviewer: a.marks.get(k, "") for a in answers}})
    rows.append({"": "note", **{a.reviewer: a.note for a in answers}})
    return pd.DataFrame(rows, columns=["", *(a.reviewer for a in answers)])


def others_frame(others: Sequence[AnswerRecord], *, hidden: bool) -> pd.DataFrame:
    """Other reviewers' answers to the item, one row each; one row saying so while the round withholds them."""
    columns = ["reviewer", "verdict", "marks", "note"]
    if hidden:
        return pd.DataFrame([{"reviewer": HIDDEN, "verdict": "", "marks": "", "note": ""}], columns=columns)
    return pd.DataFrame([{"reviewer": a.reviewer, "verdict": verdict_cell(a.verdict), "marks": marks_cell(a.marks),
                          "note": a.note} for a in others if a.answered_at is not None], columns=columns)


def label_text(label: RoundLabelRecord | None, *, hidden: bool) -> str:
    if hidden:
        return HIDDEN
    if label is None:
        return "no label yet: waiting for the other answers (or an adjudicator)"
    return f"{label.kind}: {verdict_cell(label.verdict)} (decided by {label.decided_by})"


def rounds_frame(progress: Sequence[RoundProgress]) -> pd.DataFrame:
    """The rounds table: one row per round, with each reviewer's "answered/assigned"."""
    columns = ["round", "items", "overlap", "blind", "answered", "agreed", "adjudicated", "disputed", "reviewers"]
    return pd.DataFrame([{
        "round": p.round.name, "items": p.round.items, "overlap": p.round.overlap, "blind": "yes" if p.round.blind
        else "no", "answered": f"{p.answered}/{p.needed}", "agreed": p.agreed, "adjudicated": p.adjudicated,
        "disputed": p.disputed,
        "reviewers": ", ".join(f"{r.reviewer} {r.answered}/{r.assigned}" for r in p.reviewers),
    } for p in progress], columns=columns)


def reviewers_frame(reviewers: Sequence[ReviewerRecord]) -> pd.DataFrame:
    return pd.DataFrame([{"reviewer": r.name, "role": r.role, "added": r.created_at.strftime("%Y-%m-%d %H:%M")}
                         for r in reviewers], columns=["reviewer", "role", "added"])


def agreement_frames(tables: Mapping[str, Sequence[Mapping[str, Any]]]) -> tuple[pd.DataFrame, ...]:
    """`AgreementReport.rows()` as three tables (overall, per reviewer pair, per item); empty frames when absent."""
    return tuple(pd.DataFrame(list(tables.get(part, ()))) for part in ("overall", "pairs", "items"))


def rule_text(rule: Mapping[str, Any] | None) -> str:
    """A snapshot's rule in words: "" for every active example; else which round labels it froze."""
    if not rule:
        return ""
    where = f"round {rule['round']!r}" if rule.get("round") else "every round"
    share = float(rule.get("min_agreement") or 0.0)
    least = f", agreement at least {share:g}" if share > 0 else ""
    return f"{rule.get('labels', '')} labels of {where}{least}"


def reviewer_names(text: str) -> tuple[str, ...]:
    """"ana, ben  cy" -> ("ana", "ben", "cy"): the names typed for a round (checked by `RoundConfig`)."""
    return tuple(t for t in text.replace(",", " ").split() if t)


def parse_top(text: str) -> int | None:
    """The "first N judgments" field: blank for all, else a whole number (`RoundConfig` checks it is at least 1)."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise InputError("first N judgments must be a whole number such as 50, or blank for all") from None
