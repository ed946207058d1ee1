"""SQLAlchemy 2 typed models: pairs, judgments and their samples and reflections, corrections,
derived training examples, dataset snapshots, training runs, and a placeholder for evaluation runs.

Rows that describe what happened (pairs, judgments, samples, reflections, example contents) are
never updated after they are written; what people change (corrections, example states) is
recorded with timestamps and kept. Text from models and users is `LosslessText` (see `reflectrm_db.types`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from reflectrm_db.types import JSONText, LosslessText, UTCDateTime, utcnow

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

EXAMPLE_STATES = ("active", "excluded", "withdrawn")
"""active: used by snapshots; excluded: set aside by a person; withdrawn: its correction was withdrawn or edited."""

MARKS = ("right", "wrong")

TRAINING_STATES = ("starting", "running", "completed", "cancelled", "failed", "interrupted")
"""As `reflectrm.training.runs.STATES`. interrupted: the run's process went away without recording an end."""


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    # Python type -> column type for `Mapped[...]` annotations (SQLAlchemy's declarative hook)
    type_annotation_map = {str: LosslessText(), dict[str, Any]: JSONText(), datetime: UTCDateTime()}  # noqa: RUF012


def _choice_check(column: str, *, nullable: bool = False) -> CheckConstraint:
    rule = f"{column} IN (1, 2)"
    return CheckConstraint(f"{column} IS NULL OR {rule}" if nullable else rule, name=f"{column}_is_1_or_2")


def _state_check() -> CheckConstraint:
    return CheckConstraint(f"state IN ({', '.join(repr(s) for s in EXAMPLE_STATES)})", name="state_known")


class Pair(Base):
    """A query (or conversation) with two responses, stored once per content and label (`repository.pair_key`)."""

    __tablename__ = "pairs"
    __table_args__ = (_choice_check("label", nullable=True), Index(None, "source", "source_id"))

    id: Mapped[int] = mapped_column(primary_key=True)
    pair_key: Mapped[str] = mapped_column(String(64), unique=True)  # repository.pair_key (older rows: every field)
    fingerprint: Mapped[str] = mapped_column(String(64), index=True)  # PreferencePair.fingerprint(): content only
    messages: Mapped[list[dict[str, str]]] = mapped_column(JSONText())  # [{role, content}], ending in the user query
    response_1: Mapped[str]
    response_2: Mapped[str]
    label: Mapped[int | None] = mapped_column(SmallInteger)  # the better response when known
    tie: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())  # judged equally good (no label)
    source: Mapped[str]  # data set name, "manual", ...
    source_id: Mapped[str]  # PreferencePair.id
    subset: Mapped[str]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Judgment(Base):
    """One judgment of one pair (`reflectrm.Judgment`), with the columns a review queue sorts on."""

    __tablename__ = "judgments"
    __table_args__ = (_choice_check("verdict", nullable=True),)

    id: Mapped[int] = mapped_column(primary_key=True)
    pair_id: Mapped[int] = mapped_column(ForeignKey("pairs.id"), index=True)
    twin_id: Mapped[int | None] = mapped_column(
        ForeignKey("judgments.id", ondelete="SET NULL")
    )  # the other order of a swap audit
    swapped: Mapped[bool] = mapped_column(Boolean, default=False)  # True for the swapped-order twin
    model: Mapped[str]
    model_revision: Mapped[str]  # a content hash or revision of the weights
    backend: Mapped[str]
    strategy: Mapped[str] = mapped_column(String(40), index=True)
    config: Mapped[dict[str, Any]]  # the full JudgeConfig, seeds included
    seed: Mapped[int] = mapped_column(BigInteger)
    timings: Mapped[dict[str, Any]]
    tokens_generated: Mapped[int] = mapped_column(Integer)
    verdict: Mapped[int | None] = mapped_column(SmallInteger)  # NULL: the judge abstained
    abstain_reason: Mapped[str]
    anchor: Mapped[int | None] = mapped_column(Integer)  # rollout index of the anchor (Eq. 6)
    winners: Mapped[list[int]] = mapped_column(JSONText())  # Eq. 8 winner group
    vote_counts: Mapped[list[float] | None] = mapped_column(JSONText())  # Eq. 9 tally; NULL without a vote
    vote_voters: Mapped[list[int] | None] = mapped_column(JSONText())
    vote_anchor_added: Mapped[bool | None] = mapped_column(Boolean)
    stage2_skipped: Mapped[bool] = mapped_column(Boolean)
    # sha256 of (pair, model, config, order) for judgments recorded idempotently (a resumable file run): the
    # store refuses a second row with the same key, so a rerun after a crash cannot duplicate. NULL otherwise.
    idempotency_key: Mapped[str | None] = mapped_column(String(64), unique=True)
    # sha256 of the question a judgment answers (pair content, prompt templates, model revision, sampling
    # settings, seed, order: `reflectrm.serving.cache.request_key`) for judgments the reward service stores:
    # every replica on the store answers that question from this row instead of generating it again. NULL otherwise.
    cache_key: Mapped[str | None] = mapped_column(String(64), unique=True)
    # Derived at record time for the review queue (a judgment never changes afterwards).
    anchor_confidence: Mapped[float | None] = mapped_column(Double)  # Eq. 5 of the anchor; NULL: no anchor or -inf
    split_vote: Mapped[bool] = mapped_column(Boolean)  # both responses got votes
    overturned: Mapped[bool] = mapped_column(Boolean)  # the verdict differs from the anchor's own prediction
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)


class Sample(Base):
    """One stage-1 output (`reflectrm.core.types.Rollout`)."""

    __tablename__ = "samples"
    __table_args__ = (UniqueConstraint("judgment_id", "position"), _choice_check("prediction", nullable=True))

    id: Mapped[int] = mapped_column(primary_key=True)
    judgment_id: Mapped[int] = mapped_column(ForeignKey("judgments.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)  # place in Judgment.rollouts
    idx: Mapped[int] = mapped_column(Integer)  # Rollout.index
    text: Mapped[str]  # the raw generated text
    analysis: Mapped[str]
    prediction: Mapped[int | None] = mapped_column(SmallInteger)  # NULL: unparseable
    status: Mapped[str] = mapped_column(String(20))  # ParseStatus value
    confidence: Mapped[float | None] = mapped_column(Double)  # Eq. 5; NULL means -inf (no generated token)
    num_tokens: Mapped[int] = mapped_column(Integer)
    greedy: Mapped[bool] = mapped_column(Boolean)
    finish_reason: Mapped[str] = mapped_column(String(20))


class Reflection(Base):
    """One stage-2 comparison of a sample with the anchor (`reflectrm.core.types.Reflection`)."""

    __tablename__ = "reflections"
    __table_args__ = (UniqueConstraint("judgment_id", "position"), _choice_check("choice", nullable=True))

    id: Mapped[int] = mapped_column(primary_key=True)
    judgment_id: Mapped[int] = mapped_column(ForeignKey("judgments.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)  # place in Judgment.reflections
    sample_idx: Mapped[int] = mapped_column(Integer)  # Reflection.sample (a rollout index)
    anchor_idx: Mapped[int] = mapped_column(Integer)
    critique_1: Mapped[int] = mapped_column(Integer)  # rollout index shown as Critique 1
    critique_2: Mapped[int] = mapped_column(Integer)
    text: Mapped[str]
    analysis: Mapped[str]
    choice: Mapped[int | None] = mapped_column(SmallInteger)  # NULL: unparseable
    status: Mapped[str] = mapped_column(String(20))
    num_tokens: Mapped[int] = mapped_column(Integer)


class Correction(Base):
    """A person's verdict on a judgment's pair. Edits keep the previous versions in `history`."""

    __tablename__ = "corrections"
    __table_args__ = (
        _choice_check("verdict"),
        CheckConstraint("active IS NULL OR active", name="active_true_or_null"),
        UniqueConstraint("judgment_id", "active"),  # at most one active correction per judgment
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    judgment_id: Mapped[int] = mapped_column(ForeignKey("judgments.id"), index=True)
    author: Mapped[str]
    verdict: Mapped[int] = mapped_column(SmallInteger)
    note: Mapped[str]
    active: Mapped[bool | None] = mapped_column(Boolean, default=True)  # True, or NULL once withdrawn
    revision: Mapped[int] = mapped_column(Integer, default=1)
    history: Mapped[list[dict[str, Any]]] = mapped_column(JSONText(), default=list)  # earlier versions
    derivation_seed: Mapped[int] = mapped_column(BigInteger)  # seeds which reflection pairs and critique orders
    max_pairs: Mapped[int] = mapped_column(Integer)  # reflection pairs derived at most
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    withdrawn_at: Mapped[datetime | None]


class CorrectionMark(Base):
    """A person's mark on one analysis of the corrected judgment: right or wrong."""

    __tablename__ = "correction_marks"
    __table_args__ = (
        UniqueConstraint("correction_id", "sample_id"),
        CheckConstraint(f"mark IN ({', '.join(repr(m) for m in MARKS)})", name="mark_known"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    correction_id: Mapped[int] = mapped_column(ForeignKey("corrections.id", ondelete="CASCADE"))
    sample_id: Mapped[int] = mapped_column(ForeignKey("samples.id"))
    mark: Mapped[str] = mapped_column(String(10))


class PreferenceExample(Base):
    """A derived response-preference example (conversation, response 1, response 2 -> label)."""

    __tablename__ = "preference_examples"
    __table_args__ = (_choice_check("label"), _state_check())

    id: Mapped[int] = mapped_column(primary_key=True)
    pair_id: Mapped[int] = mapped_column(ForeignKey("pairs.id"), index=True)
    label: Mapped[int] = mapped_column(SmallInteger)
    correction_id: Mapped[int | None] = mapped_column(ForeignKey("corrections.id"), index=True)  # provenance
    judgment_id: Mapped[int | None] = mapped_column(ForeignKey("judgments.id"))  # provenance
    content_hash: Mapped[str] = mapped_column(String(64))  # recipe.example_hash: sha256 of its row as trained on
    state: Mapped[str] = mapped_column(String(10), default="active", index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    state_changed_at: Mapped[datetime | None]


class ReflectionPair(Base):
    """A derived analysis-preference example: two stored analyses of a pair, the correct one labelled."""

    __tablename__ = "reflection_pairs"
    __table_args__ = (_choice_check("label"), _state_check())

    id: Mapped[int] = mapped_column(primary_key=True)
    pair_id: Mapped[int] = mapped_column(ForeignKey("pairs.id"), index=True)
    critique_1_id: Mapped[int] = mapped_column(ForeignKey("samples.id"))  # shown as Critique 1
    critique_2_id: Mapped[int] = mapped_column(ForeignKey("samples.id"))
    label: Mapped[int] = mapped_column(SmallInteger)  # the critique that is right
    correction_id: Mapped[int | None] = mapped_column(ForeignKey("corrections.id"), index=True)  # provenance
    judgment_id: Mapped[int] = mapped_column(ForeignKey("judgments.id"))  # provenance: the rollouts' judgment
    content_hash: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(10), default="active", index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    state_changed_at: Mapped[datetime | None]


class DatasetSnapshot(Base):
    """A frozen set of examples (what a training run used), with a hash of their contents."""

    __tablename__ = "dataset_snapshots"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(unique=True)
    note: Mapped[str]
    content_hash: Mapped[str] = mapped_column(String(64))  # recipe.rows_hash of its rows exactly as trained on
    num_preference: Mapped[int] = mapped_column(Integer)
    num_reflection: Mapped[int] = mapped_column(Integer)
    # which examples it froze when not every active one (`SnapshotRule.to_dict()`: from review rounds' labels); NULL: all
    rule: Mapped[dict[str, Any] | None] = mapped_column(JSONText())
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class SnapshotMember(Base):
    """One example of a snapshot: exactly one of the two example columns is set."""

    __tablename__ = "snapshot_members"
    __table_args__ = (
        CheckConstraint("(preference_example_id IS NULL) <> (reflection_pair_id IS NULL)", name="exactly_one_example"),
        UniqueConstraint("snapshot_id", "preference_example_id"),
        UniqueConstraint("snapshot_id", "reflection_pair_id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    snapshot_id: Mapped[int] = mapped_column(ForeignKey("dataset_snapshots.id", ondelete="CASCADE"))
    preference_example_id: Mapped[int | None] = mapped_column(ForeignKey("preference_examples.id"))
    reflection_pair_id: Mapped[int | None] = mapped_column(ForeignKey("reflection_pairs.id"))


class TrainingRun(Base):
    """A GRPO run on a snapshot (`reflectrm.training.jobs`). Its run folder is the live record; the app copies
    the state, step and closing figures here as it watches, so runs stay listed after the folder is gone."""

    __tablename__ = "training_runs"
    __table_args__ = (
        CheckConstraint(f"status IN ({', '.join(repr(s) for s in TRAINING_STATES)})", name="status_known"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    snapshot_id: Mapped[int | None] = mapped_column(ForeignKey("dataset_snapshots.id"))
    base_model: Mapped[str]  # the model trained: a Hugging Face id or a local folder
    output_model: Mapped[str]  # the newest loadable model (final/, else the last checkpoint); "" before any
    run_dir: Mapped[str] = mapped_column(unique=True)  # the run folder: status, metrics, log, checkpoints
    config: Mapped[dict[str, Any]]  # the TrainConfig, as `TrainConfig.to_dict()`
    status: Mapped[str] = mapped_column(String(20), index=True)  # one of TRAINING_STATES
    step: Mapped[int] = mapped_column(Integer, default=0)  # optimizer steps done
    total_steps: Mapped[int | None] = mapped_column(Integer)  # NULL until the trainer has started
    metrics: Mapped[dict[str, Any]]  # the latest figures: loss, reward, mean reward, elapsed seconds
    error: Mapped[str] = mapped_column(default="")  # why a failed run failed
    log_tail: Mapped[str] = mapped_column(default="")  # the end of the worker's log, kept when the run ends
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]


EVAL_STATES = ("running", "completed", "stopped", "failed", "interrupted")
"""stopped: cancelled or killed part way; rerunning the same command resumes it."""


class EvalRun(Base):
    """One model on one benchmark (or labelled data set) with some strategies (`reflectrm eval`)."""

    __tablename__ = "eval_runs"
    __table_args__ = (
        CheckConstraint(f"status IN ({', '.join(repr(s) for s in EVAL_STATES)})", name="status_known"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    training_run_id: Mapped[int | None] = mapped_column(ForeignKey("training_runs.id"))
    run_key: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 of what decides the results: resume key
    model: Mapped[str]
    model_revision: Mapped[str]
    benchmark: Mapped[str]
    data: Mapped[str] = mapped_column(default="")  # the local file or folder read ("" = the Hub)
    partial: Mapped[str] = mapped_column(default="")  # why the copy read is not the whole benchmark; "" = complete
    config: Mapped[dict[str, Any]]  # JudgeConfig, strategies, both orders, subset, limit, too-long policy
    status: Mapped[str] = mapped_column(String(20), default="running", server_default="running")
    items_total: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # pairs x orders planned
    metrics: Mapped[dict[str, Any]]  # the report's figures once the run ends
    error: Mapped[str] = mapped_column(default="", server_default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]


class EvalItem(Base):
    """One strategy's verdict on one pair in one order within an evaluation run (or why it was not judged)."""

    __tablename__ = "eval_items"
    __table_args__ = (
        UniqueConstraint("run_id", "item_id", "strategy", "swapped"),
        _choice_check("verdict", nullable=True),
        _choice_check("label", nullable=True),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("eval_runs.id", ondelete="CASCADE"), index=True)
    item_id: Mapped[str]  # the benchmark pair's id (its original order)
    strategy: Mapped[str] = mapped_column(String(40))
    swapped: Mapped[bool] = mapped_column(Boolean)  # judged with the responses in the other order
    subset: Mapped[str]
    label: Mapped[int | None] = mapped_column(SmallInteger)  # in the order judged
    tie: Mapped[bool] = mapped_column(Boolean)
    verdict: Mapped[int | None] = mapped_column(SmallInteger)  # NULL: abstained or not judged
    tokens: Mapped[int] = mapped_column(Integer)  # generated for this strategy's judgment
    samples: Mapped[int] = mapped_column(Integer)  # stage-1 outputs the strategy considered
    parse_failures: Mapped[int] = mapped_column(Integer)  # of those, unparseable
    reflections: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # stage-2 outputs used
    reflection_failures: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # of those, unparseable
    reflections_first: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # parsed: chose Critique 1
    anchor_confidence: Mapped[float | None] = mapped_column(Double)  # Eq. 5; NULL: no anchor
    anchor_correct: Mapped[bool | None] = mapped_column(Boolean)  # the anchor's own prediction matches the label
    skipped: Mapped[str] = mapped_column(default="")  # why the pair was not judged (over-long ...); "" = judged
    meta: Mapped[dict[str, Any]]  # benchmark grouping: best-of-N group, RM-Bench cell, truncation
    judgment_id: Mapped[int | None] = mapped_column(ForeignKey("judgments.id"))  # drill-down into the Judge view
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Promotion(Base):
    """A model made the active judge: who, which model over which, and what the promotion gate said of it."""

    __tablename__ = "promotions"

    id: Mapped[int] = mapped_column(primary_key=True)
    model: Mapped[str]  # the checkpoint made the judge
    previous: Mapped[str]  # the judge it replaced
    promoted_by: Mapped[str]  # the login user, or the name a reviewer typed
    verdict: Mapped[str] = mapped_column(String(20))  # the gate's ("worse", "better", "no difference"), or "not gated"
    overridden: Mapped[bool] = mapped_column(Boolean)  # promoted although the gate said WORSE
    judge_run_id: Mapped[int | None] = mapped_column(ForeignKey("eval_runs.id"))  # the comparison's runs, if any
    checkpoint_run_id: Mapped[int | None] = mapped_column(ForeignKey("eval_runs.id"))
    lines: Mapped[str]  # the gate's summary and one line per compared set, newline-separated
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


REVIEWER_ROLES = ("reviewer", "adjudicator", "admin")
"""reviewer: answers a round's items; adjudicator: decides the items reviewers disagree on; admin: both, and manages."""

LABEL_KINDS = ("agreed", "adjudicated")
"""How a round's item got its label: every answer gave the same verdict (no mark against another), or an adjudicator
decided."""


class Reviewer(Base):
    """A named reviewer (the login name) and their role in review rounds."""

    __tablename__ = "reviewers"
    __table_args__ = (
        CheckConstraint(f"role IN ({', '.join(repr(r) for r in REVIEWER_ROLES)})", name="role_known"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)  # as the login names them
    role: Mapped[str] = mapped_column(String(20))  # one of REVIEWER_ROLES
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ReviewRound(Base):
    """A review round: a set of judgments, each handed to `overlap` reviewers, blind or not."""

    __tablename__ = "review_rounds"
    __table_args__ = (CheckConstraint("overlap >= 1", name="overlap_positive"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    overlap: Mapped[int] = mapped_column(Integer)  # reviewers per item (k)
    blind: Mapped[bool] = mapped_column(Boolean)  # answers and corrections hidden until a reviewer answered
    reviewers: Mapped[list[str]] = mapped_column(JSONText())  # who may take items; [] = every reviewer
    selection: Mapped[dict[str, Any]]  # how the items were chosen (source, snapshot, top): the RoundConfig's
    opened_by: Mapped[str]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class RoundItem(Base):
    """One judgment of a round; `handed` counts its live assignments (the row locked while one is added)."""

    __tablename__ = "round_items"
    __table_args__ = (UniqueConstraint("round_id", "judgment_id"), CheckConstraint("handed >= 0", name="handed_sign"))

    id: Mapped[int] = mapped_column(primary_key=True)
    round_id: Mapped[int] = mapped_column(ForeignKey("review_rounds.id", ondelete="CASCADE"), index=True)
    judgment_id: Mapped[int] = mapped_column(ForeignKey("judgments.id"))
    position: Mapped[int] = mapped_column(Integer)  # order in the round (the queue's order)
    handed: Mapped[int] = mapped_column(Integer, default=0)  # assignments, answered or not (at most the overlap)


class Assignment(Base):
    """An item handed to one reviewer, and their answer once given (verdict, marks on analyses, note)."""

    __tablename__ = "assignments"
    __table_args__ = (
        UniqueConstraint("round_id", "judgment_id", "reviewer"),  # the last guard: never twice to one reviewer
        _choice_check("verdict", nullable=True),
        Index(None, "round_id", "reviewer"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    round_id: Mapped[int] = mapped_column(ForeignKey("review_rounds.id", ondelete="CASCADE"))
    item_id: Mapped[int] = mapped_column(ForeignKey("round_items.id", ondelete="CASCADE"), index=True)
    judgment_id: Mapped[int] = mapped_column(ForeignKey("judgments.id"))
    reviewer: Mapped[str] = mapped_column(String(200))
    assigned_at: Mapped[datetime] = mapped_column(default=utcnow)
    verdict: Mapped[int | None] = mapped_column(SmallInteger)  # NULL until answered
    marks: Mapped[dict[str, Any]]  # rollout position (as text) -> "right" / "wrong"
    note: Mapped[str] = mapped_column(default="")
    answered_at: Mapped[datetime | None]


class RoundLabel(Base):
    """A round item's label: agreed by every answer, or decided by an adjudicator; written as a correction."""

    __tablename__ = "round_labels"
    __table_args__ = (
        UniqueConstraint("round_id", "judgment_id"),
        _choice_check("verdict"),
        CheckConstraint(f"kind IN ({', '.join(repr(k) for k in LABEL_KINDS)})", name="kind_known"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    round_id: Mapped[int] = mapped_column(ForeignKey("review_rounds.id", ondelete="CASCADE"))
    judgment_id: Mapped[int] = mapped_column(ForeignKey("judgments.id"))
    kind: Mapped[str] = mapped_column(String(12))  # one of LABEL_KINDS
    verdict: Mapped[int] = mapped_column(SmallInteger)
    marks: Mapped[dict[str, Any]]  # the marks the correction carries: agreed ones, or as adjudicated
    agreement: Mapped[float] = mapped_column(Double)  # share of reviewer pairs that gave the same verdict
    decided_by: Mapped[str]  # the reviewers who agreed (comma-separated), or the adjudicator
    overruled: Mapped[list[int]] = mapped_column(JSONText())  # assignment ids whose answer the decision overruled
    correction_id: Mapped[int] = mapped_column(ForeignKey("corrections.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
