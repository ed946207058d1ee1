"""What the store's services return: frozen values, never ORM objects (sessions end with the call)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from reflectrm_db.derivation import Mark
from reflectrm.core.types import Choice, Judgment, PreferencePair

ExampleKind = Literal["preference", "reflection"]
ExampleState = Literal["active", "excluded", "withdrawn"]

REVIEW_FLAGS = ("abstained", "label_disagrees", "flipped", "overturned", "split_vote")
"""Signals that put a judgment ahead in the review queue (see `JudgmentStore.review_queue`)."""


@dataclass(frozen=True, slots=True)
class StoredPair:
    id: int
    pair: PreferencePair
    created_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredJudgment:
    """A judgment as recorded, with its database handles.

    Attributes:
        id: the judgment's row id.
        pair_id: the pair's row id.
        judgment: equal (==) to the `reflectrm.Judgment` that was recorded.
        sample_ids: row ids parallel to `judgment.rollouts` (marks and reflection pairs refer to them).
        twin_id: the other order of a swap audit, if any.
        swapped: True for the swapped-order twin.
        created_at: when it was recorded.
    """

    id: int
    pair_id: int
    judgment: Judgment
    sample_ids: tuple[int, ...]
    twin_id: int | None
    swapped: bool
    created_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class JudgmentSummary:
    """One row of a judgment list or the review queue.

    Attributes:
        flags: the `REVIEW_FLAGS` that hold, in that order.
        correction_id: the active correction, if a person corrected it.
    """

    id: int
    pair_id: int
    query: str  # the last user turn, cut to 200 characters
    source: str
    label: Choice | None
    verdict: Choice | None
    strategy: str
    model: str
    anchor_confidence: float | None  # None: no anchor, or -inf
    flags: tuple[str, ...]
    twin_id: int | None
    correction_id: int | None
    created_at: datetime
    swapped: bool = False  # judged with the responses in swapped order (an audit's twin): `label` is in that order


@dataclass(frozen=True, slots=True, kw_only=True)
class CorrectionRecord:
    """A correction and what it derived.

    Attributes:
        marks: rollout position (in `Judgment.rollouts`) -> "right" / "wrong".
        active: False once withdrawn.
        preference_example_ids / reflection_pair_ids: the derived examples now in force (none once withdrawn).
    """

    id: int
    judgment_id: int
    author: str
    verdict: Choice
    note: str
    marks: dict[int, Mark]
    active: bool
    revision: int
    derivation_seed: int
    max_pairs: int
    created_at: datetime
    updated_at: datetime
    withdrawn_at: datetime | None
    preference_example_ids: tuple[int, ...]
    reflection_pair_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class CorrectedPair:
    """An active correction with the pair it corrects (`JudgmentStore.corrected_pairs`): no marks, no examples."""

    id: int  # the correction's
    judgment_id: int
    author: str
    verdict: Choice
    created_at: datetime
    pair: PreferencePair


@dataclass(frozen=True, slots=True, kw_only=True)
class ExampleRecord:
    """A derived training example with its provenance.

    Attributes:
        critiques: for reflection pairs, the (Critique 1, Critique 2) sample ids; () for preference examples.
        label: the better response (preference) or critique (reflection).
    """

    kind: ExampleKind
    id: int
    pair_id: int
    label: Choice
    state: ExampleState
    correction_id: int | None
    judgment_id: int | None
    critiques: tuple[int, ...]
    content_hash: str
    created_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotRecord:
    id: int
    name: str
    note: str
    content_hash: str
    num_preference: int
    num_reflection: int
    created_at: datetime
    rule: dict[str, Any] | None = None  # which examples it froze when not every active one (`SnapshotRule`)


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What an import did: pairs added, and pairs that were already stored (the same content and label)."""

    added: int
    already_present: int
    pair_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class LabelledDerivation:
    """What deriving the paper's examples from labelled judgments did (`JudgmentStore.derive_from_labels`).

    Attributes:
        judgments: labelled pairs' judgments read (the newest in the pair's own order, one per pair).
        easy: of those, judgments whose every sample was right (the paper drops them: nothing to learn).
        corrected: pairs left out because a person corrected one of their judgments (their word stands).
        preference, reflection: examples added.
        already_present: examples derived before (kept as they are, excluded ones stay excluded).
    """

    judgments: int
    easy: int
    corrected: int
    preference: int
    reflection: int
    already_present: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingRunRecord:
    """A training run as stored (the run folder holds the live detail: `reflectrm.training.runs`).

    Attributes:
        snapshot_name: the snapshot it trained on ("" when none).
        config: the `TrainConfig` as a dict.
        status: one of `reflectrm_db.models.TRAINING_STATES`.
        output_model: the newest loadable model folder (final/, else the last checkpoint); "" before any.
        metrics: the latest figures (loss, reward, mean reward, elapsed seconds).
        log_tail: the end of the worker's log, kept when the run ended.
    """

    id: int
    snapshot_id: int | None
    snapshot_name: str
    base_model: str
    output_model: str
    run_dir: str
    config: dict[str, Any]
    status: str
    step: int
    total_steps: int | None
    metrics: dict[str, Any]
    error: str
    log_tail: str
    created_at: datetime
    updated_at: datetime | None
    finished_at: datetime | None

    @property
    def active(self) -> bool:
        """Whether the run was last seen starting or running."""
        return self.status in ("starting", "running")


@dataclass(frozen=True, slots=True, kw_only=True)
class PromotionRecord:
    """A recorded promotion (`reflectrm_db.models.Promotion`)."""

    id: int
    model: str
    previous: str
    promoted_by: str
    verdict: str
    overridden: bool
    judge_run_id: int | None
    checkpoint_run_id: int | None
    lines: tuple[str, ...]
    created_at: datetime


# --- review rounds -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReviewerRecord:
    """A reviewer and their role (`reflectrm_db.models.REVIEWER_ROLES`)."""

    name: str
    role: str
    created_at: datetime

    @property
    def reviews(self) -> bool:
        """Whether they take a round's items (reviewer, admin)."""
        return self.role in ("reviewer", "admin")

    @property
    def adjudicates(self) -> bool:
        """Whether they decide disputed items (adjudicator, admin)."""
        return self.role in ("adjudicator", "admin")


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundRecord:
    """A review round as stored.

    Attributes:
        reviewers: who may take its items; () = every reviewer.
        selection: how its items were chosen (`RoundConfig.selection()`).
        items: judgments in it.
    """

    id: int
    name: str
    overlap: int
    blind: bool
    reviewers: tuple[str, ...]
    selection: dict[str, Any]
    opened_by: str
    items: int
    created_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerRecord:
    """One assignment of a round's item to a reviewer, and their answer once given.

    Attributes:
        id: the assignment's id (a label's `overruled` names these).
        verdict: the better response (1 or 2) in the judgment's order; None while unanswered.
        marks: rollout position -> "right" / "wrong".
    """

    id: int
    round: str
    judgment_id: int
    reviewer: str
    verdict: Choice | None
    marks: dict[int, Mark]
    note: str
    assigned_at: datetime
    answered_at: datetime | None

    @property
    def answered(self) -> bool:
        return self.answered_at is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundLabelRecord:
    """An item's label from a round: agreed by every answer or decided by an adjudicator, saved as a correction.

    Attributes:
        kind: "agreed" or "adjudicated".
        agreement: the share of reviewer pairs that gave the same verdict.
        decided_by: the reviewers who agreed (comma-separated), or the adjudicator.
        overruled: the ids of the answers (`AnswerRecord.id`) the decision went against.
    """

    round: str
    judgment_id: int
    kind: str
    verdict: Choice
    marks: dict[int, Mark]
    agreement: float
    decided_by: str
    overruled: tuple[int, ...]
    correction_id: int
    created_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class ReviewerProgress:
    """One reviewer's part of a round: items handed to them, answered, and still open."""

    reviewer: str
    assigned: int
    answered: int

    @property
    def open(self) -> int:
        return self.assigned - self.answered


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundProgress:
    """How far a round is.

    Attributes:
        needed: answers the round needs (items x overlap); `assigned`, `answered`: of those, handed out, given.
        complete: items with every answer in; `agreed`, `adjudicated`: labelled items; `disputed`: complete items
            waiting for an adjudicator.
    """

    round: RoundRecord
    needed: int
    assigned: int
    answered: int
    complete: int
    agreed: int
    adjudicated: int
    disputed: int
    reviewers: tuple[ReviewerProgress, ...]
