"""Review rounds as a team works them: reviewers and roles, rounds with overlap, each reviewer's items (blind
rounds enforced here, not only in a view), answers, agreement, the adjudicator's queue, exports of the answers.

The Reviewers view, the Review tab's round mode and `reflectrm round ...` / `reflectrm reviewers ...` all call
this room. `by` names the person acting (the login name); `by=None` is the operator at the store itself (the
command line, which has the database in hand), who may do what an admin may.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reflectrm_app.services.runtime import Runtime
from reflectrm_db.derivation import Mark
from reflectrm_db.records import (
    AnswerRecord, CorrectionRecord, ReviewerRecord, RoundLabelRecord, RoundProgress, RoundRecord, SnapshotRecord,
    StoredJudgment,
)
from reflectrm_db.rounds import LABEL_RULES, LETTERS, ROLES, RoundConfig, SnapshotRule
from reflectrm_db.services import JudgmentStore
from reflectrm.core.types import Choice
from reflectrm.errors import InputError, RoleError

__all__ = ("ANSWER_FORMATS", "LABEL_RULES", "ROLES", "DisputedItem", "RoundConfig", "RoundItemView", "RoundService",
           "SnapshotRule")  # the UI builds a round's config and a snapshot's rule from these (it reads no store module)

ANSWER_FORMATS = ("jsonl", "parquet")
"""What `export_answers` writes: one row per answer, with the reviewer's name and role."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundItemView:
    """One item of a round as one reviewer may see it.

    Attributes:
        mine: the reviewer's own assignment (and answer, once given).
        others: the other reviewers' answers; () while `hidden`.
        corrections: the judgment's corrections from before (and outside) the round; () while `hidden`.
        hidden: a blind round and the reviewer has not answered the item yet: others' answers and the earlier
            corrections are withheld.
        label: the item's label once agreed or adjudicated (None while hidden, too).
    """

    round: RoundRecord
    stored: StoredJudgment
    mine: AnswerRecord
    others: tuple[AnswerRecord, ...]
    corrections: tuple[CorrectionRecord, ...]
    hidden: bool
    label: RoundLabelRecord | None


@dataclass(frozen=True, slots=True, kw_only=True)
class DisputedItem:
    """An item waiting for an adjudicator: every answer side by side with the stored judgment."""

    round: RoundRecord
    stored: StoredJudgment
    answers: tuple[AnswerRecord, ...]


@dataclass
class RoundService:
    """Review rounds over the store (`store`: the runtime's, or the one a command opened)."""

    store: JudgmentStore

    @classmethod
    def over(cls, runtime: Runtime) -> RoundService:
        return cls(runtime.store)

    # --- reviewers -----------------------------------------------------------------------------------------

    def reviewers(self) -> list[ReviewerRecord]:
        return self.store.reviewers()

    def reviewer(self, name: str) -> ReviewerRecord | None:
        """The login name's reviewer row; None keeps the plain review queue (no rounds) for that login."""
        return self.store.reviewer(name)

    def set_reviewer(self, name: str, *, role: str, by: str | None = None) -> tuple[ReviewerRecord, str | None]:
        """Add a reviewer or change a role (an admin's act); (the reviewer, the role before or None)."""
        self._require_admin(by, "manage reviewers")
        return self.store.set_reviewer(name, role=role)

    # --- rounds --------------------------------------------------------------------------------------------

    def open_round(self, config: RoundConfig, *, by: str | None = None) -> RoundRecord:
        self._require_admin(by, "open a round")
        return self.store.open_round(config, opened_by=by or "operator")

    def rounds(self) -> list[RoundRecord]:
        return self.store.rounds()

    def progress(self, name: str) -> RoundProgress:
        return self.store.round_progress(name)

    def release(self, name: str, *, reviewer: str, judgment_id: int | None = None,
                by: str | None = None) -> list[int]:
        """Take back a reviewer's unanswered items (an admin's act, or the reviewer's own)."""
        if by != reviewer:
            self._require_admin(by, "release another reviewer's items")
        return self.store.release_round_items(name, reviewer=reviewer, judgment_id=judgment_id)

    def reassign(self, name: str, judgment_id: int, *, reviewer: str, to: str, by: str | None = None) -> AnswerRecord:
        self._require_admin(by, "reassign items")
        return self.store.reassign_round_item(name, judgment_id, reviewer=reviewer, to=to)

    # --- a reviewer's work -----------------------------------------------------------------------------------

    def next_item(self, name: str, *, reviewer: str) -> RoundItemView | None:
        """The reviewer's next item in the round (an unanswered one of theirs first); None when nothing is left."""
        judgment_id = self.store.take_round_item(name, reviewer=reviewer)
        return None if judgment_id is None else self.item(name, judgment_id, reviewer=reviewer)

    def item(self, name: str, judgment_id: int, *, reviewer: str) -> RoundItemView:
        """One item assigned to the reviewer; in a blind round, others' answers and earlier corrections are
        withheld until the reviewer answered it."""
        rnd = self.store.round(name)
        mine = self.store.round_assignment(name, int(judgment_id), reviewer=reviewer)
        if mine is None:
            raise RoleError(f"judgment {int(judgment_id)} is not assigned to {reviewer!r} in round {rnd.name!r}: "
                            "take the next item of the round instead")
        hidden = rnd.blind and not mine.answered
        others = () if hidden else tuple(a for a in self.store.round_answers(name, judgment_id=mine.judgment_id)
                                         if a.reviewer != reviewer)
        earlier = () if hidden else tuple(self.store.corrections(judgment_id=mine.judgment_id))
        return RoundItemView(round=rnd, stored=self.store.load(mine.judgment_id), mine=mine, others=others,
                             corrections=earlier, hidden=hidden,
                             label=None if hidden else self.store.round_label(name, mine.judgment_id))

    def answer(self, name: str, judgment_id: int, *, reviewer: str, verdict: Choice,
               marks: Mapping[int, Mark] | None = None, note: str = "") -> tuple[AnswerRecord, RoundLabelRecord | None]:
        """Save the reviewer's answer; the item is labelled when it was the last and all agree."""
        return self.store.answer_round_item(name, int(judgment_id), reviewer=reviewer, verdict=verdict,
                                            marks=marks, note=note)

    # --- adjudication and agreement --------------------------------------------------------------------------

    def adjudication_queue(self, name: str, *, by: str | None = None) -> list[DisputedItem]:
        """The round's disputed items, each with every answer and the stored judgment (adjudicators only)."""
        self._require_adjudicator(by)
        rnd = self.store.round(name)
        ids = self.store.disputed_items(name)
        given: dict[int, list[AnswerRecord]] = {}
        for answer in self.store.round_answers(name):
            given.setdefault(answer.judgment_id, []).append(answer)
        return [DisputedItem(round=rnd, stored=stored, answers=tuple(given.get(stored.id, ())))
                for stored in self.store.load_many(ids)]

    def adjudicate(self, name: str, judgment_id: int, *, by: str, verdict: Choice,
                   marks: Mapping[int, Mark] | None = None, note: str = "") -> RoundLabelRecord:
        """The adjudicator's decision: the item's label, recorded with who decided and what it overruled."""
        return self.store.adjudicate(name, int(judgment_id), by=by, verdict=verdict, marks=marks, note=note)

    def agreement(self, name: str, *, resamples: int = 2000, seed: int = 0) -> Any:
        """The round's agreement (`reflectrm.agreement.AgreementReport`): overall, per reviewer pair, per item, at
        the verdict and the analyses level."""
        from reflectrm.agreement import Answer, agreement_report

        given = [Answer(item=a.judgment_id, reviewer=a.reviewer, verdict=LETTERS.get(a.verdict or 0), marks=a.marks)
                 for a in self.store.round_answers(name)]
        if not given:
            raise InputError(f"round {name!r} has no answer yet: agreement needs reviewers' answers")
        return agreement_report(given, resamples=resamples, seed=seed)

    # --- training from agreement, and the answers for outside analysis ------------------------------------------

    def snapshot(self, name: str, *, rule: SnapshotRule, note: str = "") -> SnapshotRecord:
        """A snapshot of the examples of round labels the rule takes (it records its rule)."""
        return self.store.snapshot_by_rule(name.strip(), rule=rule, note=note)

    def export_answers(self, name: str, *, fmt: str, out: Path) -> int:
        """Write the round's answers, one row per reviewer and item with their role and the item's label."""
        from reflectrm_db.exporting import write_rows

        if fmt not in ANSWER_FORMATS:
            raise InputError(f"answers export as {' or '.join(ANSWER_FORMATS)}, not {fmt!r}")
        roles = {r.name: r.role for r in self.store.reviewers()}
        labels = {lab.judgment_id: lab for lab in self.store.round_labels(name)}
        rows = [_answer_row(a, role=roles.get(a.reviewer, ""), label=labels.get(a.judgment_id), nested=fmt == "jsonl")
                for a in self.store.round_answers(name)]
        return write_rows(rows, fmt=fmt, out=Path(out), schema=_answer_schema() if fmt == "parquet" else None,
                          nothing=f"round {name!r} has no answer to export")

    # --- who may ---------------------------------------------------------------------------------------------

    def _require_admin(self, by: str | None, what: str) -> None:
        if by is None:
            return
        found = self.store.reviewer(by)
        if found is None or found.role != "admin":
            role = "not a reviewer" if found is None else found.role
            raise RoleError(f"{by!r} is {role}, and only an admin may {what}: ask an admin")

    def _require_adjudicator(self, by: str | None) -> None:
        if by is None:
            return
        found = self.store.reviewer(by)
        if found is None or not found.adjudicates:
            role = "not a reviewer" if found is None else found.role
            raise RoleError(f"{by!r} is {role}, and only an adjudicator or admin may see the adjudication queue: "
                            "ask an admin to change the role")


def _answer_row(a: AnswerRecord, *, role: str, label: RoundLabelRecord | None, nested: bool) -> dict[str, Any]:
    marks = {str(k): v for k, v in sorted(a.marks.items())}
    return {"round": a.round, "judgment_id": a.judgment_id, "reviewer": a.reviewer, "role": role,
            "verdict": a.verdict, "marks": marks if nested else json.dumps(marks), "note": a.note,
            "assigned_at": a.assigned_at.isoformat(), "answered_at": a.answered_at.isoformat() if a.answered_at else None,
            "label": label.verdict if label else None, "label_kind": label.kind if label else ""}


def _answer_schema() -> Any:
    """The Arrow schema of an answer row in Parquet (marks as JSON text: their keys vary from row to row)."""
    import pyarrow as pa

    text, number = pa.string(), pa.int64()
    return pa.schema([("round", text), ("judgment_id", number), ("reviewer", text), ("role", text),
                      ("verdict", number), ("marks", text), ("note", text), ("assigned_at", text),
                      ("answered_at", text), ("label", number), ("label_kind", text)])
