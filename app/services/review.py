"""The Review tab's service: the queue walked one item at a time under a lease, a person's verdict saved as a
correction (asked first when it contradicts what is known), withdrawn, released."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from reflectrm_app.records import ReviewItem, contest_reason
from reflectrm_app.resources import ReviewLeases
from reflectrm_app.services.runtime import Runtime
from reflectrm_db.derivation import Mark
from reflectrm_db.records import CorrectionRecord, JudgmentSummary
from reflectrm.core.types import Choice, Judgment
from reflectrm.errors import InputError, ReflectRMError

REVIEW_WINDOW = 5_000  # judgments of the review queue that Next walks through (in the queue's order)


class NeedsConfirmation(ReflectRMError):
    """A correction contradicts the known label or the judge's unanimous samples: ask before saving it."""


@dataclass
class ReviewService:
    """The review queue and corrections; `leases` keep two reviewers off the same item."""

    runtime: Runtime
    leases: ReviewLeases = field(default_factory=ReviewLeases)

    def next_for_review(
        self, *, reviewer: str, skip: Sequence[int] = (), after: int | None = None, source: str = "",
        keep_held: bool = False,
    ) -> ReviewItem | None:
        """The uncorrected judgment that follows `after` in the queue's order (Next walks the whole queue and
        wraps to its start, saying so; `after` itself comes last), leaving out what this reviewer skipped and
        what somebody else holds.

        The queue's order is kept by reading it with the corrected judgments in it: `after` may just have been
        corrected (and left the queue) and the walk still goes on from where it was.

        `keep_held` (the Review tab as it opens): a reviewer who holds an item keeps it and gets None, also one
        opened (by number) while the queue was read: checked in the same step as each lease is taken.
        """
        leave_out = set(skip)
        queue = self.runtime.store.review_queue(limit=REVIEW_WINDOW, source=source or None, include_corrected=True)
        ids = [s.id for s in queue]
        start = ids.index(after) + 1 if after in ids else 0
        walk = [(k >= start, s) for k, s in enumerate(queue)]
        candidates = [(ahead, s) for ahead, s in walk[start:] + walk[:start]
                      if s.correction_id is None and s.id not in leave_out]
        if not keep_held:
            self.leases.release(reviewer)
        open_ids = [s.id for _, s in walk if s.correction_id is None and s.id not in leave_out]
        for ahead, summary in candidates:
            if self.leases.take(summary.id, reviewer, unless_holding=keep_held):
                # remaining: this item and those after it, up to the end
                remaining = len(open_ids) - open_ids.index(summary.id)
                return self._review_item(summary, remaining=remaining, wrapped=start > 0 and not ahead)
            if keep_held and self.leases.holding(reviewer) is not None:
                return None
        return None

    def holding(self, reviewer: str) -> int | None:
        """The judgment this reviewer holds under a lease (None: none)."""
        return self.leases.holding(reviewer)

    def review_item(self, judgment_id: int, *, reviewer: str) -> ReviewItem:
        """One judgment for review, by id (also an already corrected one)."""
        summary = self.runtime.store.summary(int(judgment_id))
        self.leases.take(summary.id, reviewer)
        return self._review_item(summary, remaining=0)

    def _review_item(self, summary: JudgmentSummary, *, remaining: int, wrapped: bool = False) -> ReviewItem:
        stored = self.runtime.store.load(summary.id)
        active = self.runtime.store.corrections(judgment_id=summary.id, include_withdrawn=False)
        return ReviewItem(stored=stored, summary=summary, remaining=remaining, wrapped=wrapped,
                          correction=active[0] if active else None)

    def correct(
        self,
        judgment_id: int,
        *,
        verdict: Choice,
        author: str,
        note: str = "",
        marks: Mapping[int, Mark] | None = None,
        confirmed: bool = True,
        on_screen: int | None = None,
    ) -> CorrectionRecord:
        """Save a person's verdict (a new correction, or an edit with history of the judgment's active one).

        With `confirmed=False`, a verdict that contradicts the pair's known label or every one of the
        judge's parseable samples raises `NeedsConfirmation` instead (the UI asks; the API saves).
        With `on_screen` (the item the Review tab's session shows now), a verdict for another judgment is refused:
        a key pressed on one item that lands after the next one replaced it must not save either of them.
        """
        if verdict not in (1, 2):
            raise InputError(f"verdict must be 1 or 2 (the better response), got {verdict!r}")
        if on_screen is not None and int(on_screen) != int(judgment_id):
            raise InputError(f"nothing saved: judgment #{int(judgment_id)} is no longer the item on your screen "
                             f"(#{int(on_screen)} is shown now): read it, then press the key again")
        if not confirmed:
            judgment = self.runtime.store.load(int(judgment_id)).judgment
            reason = contest_reason(judgment, verdict)
            clash = marks_against_outcome(judgment, verdict, marks or {})
            # one question names everything the answer saves: a contested verdict and marks against the outcome
            if reason and clash:
                raise NeedsConfirmation(f"Response {verdict} contradicts what is known ({reason}; it is marked "
                                        f"contested in Curate), and {clash}: press the same key again to save both")
            if reason:
                raise NeedsConfirmation(f"Response {verdict} contradicts what is known ({reason}): press the same "
                                        "key again to save it anyway (it is marked contested in Curate)")
            if clash:
                raise NeedsConfirmation(f"{clash}: press the same key again to save the marks anyway")
        author = author.strip() or self.runtime.settings.app.author
        return self.runtime.store.correct(int(judgment_id), verdict=verdict, author=author, note=note,
                                  marks=dict(marks or {}), edit_active=True)

    def withdraw(self, judgment_id: int, *, author: str) -> CorrectionRecord:
        """Withdraw the judgment's active correction (its examples are withdrawn with it).

        Returns the correction as it stood before (what was withdrawn: its examples' ids)."""
        active = self.runtime.store.corrections(judgment_id=int(judgment_id), include_withdrawn=False)
        if not active:
            raise InputError(f"judgment {judgment_id} has no correction to withdraw")
        self.runtime.store.withdraw_correction(active[0].id, author=author.strip() or self.runtime.settings.app.author)
        return active[0]

    def release(self, reviewer: str) -> None:
        self.leases.release(reviewer)


def marks_against_outcome(judgment: Judgment, verdict: Choice, marks: Mapping[int, Mark]) -> str:
    """What marks that override the outcome rule (an analysis is right when it predicts the verdict) will teach
    ("" when none do): a reflection pair takes a "right" analysis as its better side."""
    said = []
    for k, mark in sorted(marks.items()):
        predicted = judgment.rollouts[k].prediction if 0 <= k < len(judgment.rollouts) else None
        if mark == "right" and predicted != verdict:
            said.append(f"analysis #{k} predicted {_named(predicted)}, not your Response {verdict}, yet is marked "
                        "right: reflection pairs will teach it as the better analysis")
        elif mark == "wrong" and predicted == verdict:
            said.append(f"analysis #{k} predicted your Response {verdict}, yet is marked wrong: reflection pairs "
                        "will teach it as the worse analysis")
    return "; ".join(said)


def _named(choice: Choice | None) -> str:
    return "nothing (unparseable)" if choice is None else f"Response {choice}"
