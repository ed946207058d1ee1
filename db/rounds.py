"""Review rounds in the store: reviewers and their roles, rounds over a set of judgments with an overlap k,
the assignment of items, answers, and the labels agreed or adjudicated.

Taking the next item is one transaction that never hands an item out beyond k and never twice to one
reviewer: the round's item rows carry a count of live assignments (`RoundItem.handed`); PostgreSQL locks the
chosen row (`SELECT ... FOR UPDATE SKIP LOCKED`, then a waiting `FOR UPDATE` when every candidate was locked, so
a busy row is not mistaken for "nothing left"), SQLite runs the read and the insert in one write transaction
(`BEGIN IMMEDIATE`, the store's writing sessions), and the unique constraint (round, judgment, reviewer) is the
last guard. A label (agreed by every answer, or decided by an adjudicator) is written as a correction in the
corrections table, so curation and derivation treat it like any other; `round_labels` says it came from a round.

Repository functions: `(session, *, ...)`, `select()`-based; they may flush, never commit.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.orm import Session

from reflectrm_db import curation, models as m, repository
from reflectrm_db.derivation import DEFAULT_MAX_PAIRS, Mark, check_correction
from reflectrm_db.records import (
    AnswerRecord, ReviewerProgress, ReviewerRecord, RoundLabelRecord, RoundProgress, RoundRecord,
)
from reflectrm_db.types import utcnow
from reflectrm.core.types import Choice
from reflectrm.errors import ConfigError, InputError, RoleError

ROLES = m.REVIEWER_ROLES
NAME_MAX = 200  # characters in a reviewer's or a round's name (the columns' width)
LABEL_RULES = ("agreed", "adjudicated", "agreed-or-adjudicated")


# --- what a round and a snapshot rule are: validated when made -----------------------------------------------


def check_name(value: object, *, what: str) -> str:
    """A reviewer's or round's name, stripped; `InputError` naming the problem when it is blank, too long or odd."""
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"a {what} needs a name: pass one such as 'ana'")
    name = value.strip()
    if len(name) > NAME_MAX or any(not c.isprintable() for c in name):
        raise InputError(f"a {what} name must be at most {NAME_MAX} printable characters: pass a shorter plain name")
    return name


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundConfig:
    """A review round: which judgments it covers and how they are handed out."""

    name: str  # the round's name, unique in the store
    overlap: int = 2  # reviewers per item (k): each item goes to k different reviewers
    blind: bool = False  # hide other reviewers' answers and earlier corrections until a reviewer answered the item
    reviewers: tuple[str, ...] = ()  # who may take its items; empty: every reviewer (role reviewer or admin)
    source: str | None = None  # only judgments of this data set (the review queue's source filter)
    snapshot: str | None = None  # the judgments a snapshot's examples came from, instead of the review queue
    top: int | None = None  # the first N judgments (the review queue's order; a snapshot's: by id); None: all
    include_corrected: bool = False  # from the queue: also judgments a person corrected already

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", check_name(self.name, what="round"))
        if isinstance(self.overlap, bool) or not isinstance(self.overlap, int) or self.overlap < 1:
            raise ConfigError(f"overlap must be a whole number of reviewers per item, at least 1, got "
                              f"{self.overlap!r}: pass --overlap 2 (two reviewers per item)")
        if self.top is not None and (isinstance(self.top, bool) or not isinstance(self.top, int) or self.top < 1):
            raise ConfigError(f"top must be a number of judgments, at least 1, got {self.top!r}: pass --top 50, "
                              "or leave it out for all")
        if self.snapshot is not None and (self.source is not None or self.include_corrected):
            raise ConfigError("a round takes a snapshot's judgments or the review queue's (source, include "
                              "corrected), not both: pass --snapshot alone")
        names = tuple(check_name(r, what="reviewer") for r in self.reviewers)
        if len({n.casefold() for n in names}) != len(names):
            raise ConfigError("reviewers lists a name twice: name each reviewer once")
        if names and self.overlap > len(names):
            raise ConfigError(f"overlap {self.overlap} needs at least {self.overlap} reviewers, the round names "
                              f"{len(names)}: name more reviewers or lower --overlap")
        object.__setattr__(self, "reviewers", names)

    def selection(self) -> dict[str, Any]:
        """How the items were chosen, as the round records it."""
        return {k: v for k, v in asdict(self).items() if k in ("source", "snapshot", "top", "include_corrected")}


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotRule:
    """Which examples a snapshot freezes when not every active one: those of review rounds' labels."""

    labels: str = "agreed-or-adjudicated"  # "agreed", "adjudicated" or "agreed-or-adjudicated"
    min_agreement: float = 0.0  # per item: the share of reviewer pairs that gave the same verdict, at least
    round: str | None = None  # one round's labels; None: every round's

    def __post_init__(self) -> None:
        if self.labels not in LABEL_RULES:
            raise ConfigError(f"labels must be one of {', '.join(LABEL_RULES)}, got {self.labels!r}")
        share = self.min_agreement
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 <= share <= 1.0 \
                or math.isnan(share):
            raise ConfigError(f"min_agreement must be a share from 0 to 1, got {share!r}: pass 0.5 for items "
                              "where at least half the reviewer pairs agreed")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def kinds(self) -> tuple[str, ...]:
        return m.LABEL_KINDS if self.labels == "agreed-or-adjudicated" else (self.labels,)


# --- reviewers ---------------------------------------------------------------------------------------------------


def set_reviewer(session: Session, *, name: str, role: str) -> tuple[ReviewerRecord, str | None]:
    """Add a reviewer, or change their role; returns (the reviewer, their role before or None when new)."""
    name = check_name(name, what="reviewer")
    if role not in ROLES:
        raise InputError(f"role {role!r} is unknown: use one of {', '.join(ROLES)}")
    row = session.scalar(select(m.Reviewer).where(m.Reviewer.name == name))
    before = None if row is None else row.role
    if row is None:
        row = m.Reviewer(name=name, role=role, created_at=utcnow())
        session.add(row)
    row.role = role
    session.flush()
    return _reviewer(row), before


def get_reviewer(session: Session, *, name: str) -> ReviewerRecord | None:
    row = session.scalar(select(m.Reviewer).where(m.Reviewer.name == name.strip()))
    return None if row is None else _reviewer(row)


def list_reviewers(session: Session) -> list[ReviewerRecord]:
    return [_reviewer(r) for r in session.scalars(select(m.Reviewer).order_by(m.Reviewer.name))]


def _reviewer(row: m.Reviewer) -> ReviewerRecord:
    return ReviewerRecord(name=row.name, role=row.role, created_at=row.created_at)


def require_role(session: Session, *, name: str, adjudicate: bool = False) -> ReviewerRecord:
    """The reviewer `name`, refused in one line unless their role reviews (or, with `adjudicate`, adjudicates)."""
    found = get_reviewer(session, name=name)
    need, fix = (("adjudicator or admin", "adjudicate") if adjudicate else ("reviewer or admin", "review"))
    if found is None:
        raise RoleError(f"{name!r} is not a reviewer in this store: an admin adds them with "
                        f"`reflectrm reviewers add NAME --role ROLE` ({need} to {fix})")
    if not (found.adjudicates if adjudicate else found.reviews):
        raise RoleError(f"{name!r} is {found.role}, and only a {need} may {fix}: ask an admin to change the role")
    return found


# --- rounds ------------------------------------------------------------------------------------------------------


def round_judgments(session: Session, *, config: RoundConfig) -> list[int]:
    """The judgments a round covers, in its order: the review queue's (or a snapshot's examples', by id)."""
    if config.snapshot is not None:
        snapshot = curation.get_snapshot(session, name=config.snapshot)
        members = curation.snapshot_member_ids(session, snapshot_id=snapshot.id)
        ids: set[int] = set()
        for kind, example_ids in members.items():
            model = curation.EXAMPLE_MODELS[kind]
            for chunk in repository._chunks(example_ids, 500):
                ids.update(j for j in session.scalars(select(model.judgment_id).where(model.id.in_(chunk))) if j)
        return sorted(ids)[: config.top]
    queue = repository.review_queue(session, include_corrected=config.include_corrected, flagged_only=False,
                                    source=config.source, limit=config.top, offset=0)  # type: ignore[arg-type]
    return [s.id for s in queue]


def open_round(session: Session, *, config: RoundConfig, opened_by: str) -> RoundRecord:
    """Open a round over the judgments `config` selects; refused in one line when it cannot be worked."""
    if session.scalar(select(m.ReviewRound.id).where(m.ReviewRound.name == config.name)) is not None:
        raise InputError(f"round {config.name!r} already exists: choose another name")
    for name in config.reviewers:
        require_role(session, name=name)
    if not config.reviewers:
        able = session.scalar(select(func.count()).select_from(m.Reviewer)
                              .where(m.Reviewer.role.in_(("reviewer", "admin")))) or 0
        if able < config.overlap:
            raise InputError(f"overlap {config.overlap} needs {config.overlap} reviewers, the store has {able}: add "
                             "reviewers first (`reflectrm reviewers add NAME --role reviewer`) or lower --overlap")
    ids = round_judgments(session, config=config)
    if not ids:
        where = f"snapshot {config.snapshot!r}" if config.snapshot else \
            f"the review queue{f' of source {config.source!r}' if config.source else ''}"
        raise InputError(f"{where} holds no judgment for round {config.name!r}: judge or import some first, or "
                         "choose another source")
    row = m.ReviewRound(name=config.name, overlap=config.overlap, blind=config.blind,
                        reviewers=list(config.reviewers), selection=config.selection(), opened_by=opened_by,
                        created_at=utcnow())
    session.add(row)
    session.flush()
    session.execute(insert(m.RoundItem), [{"round_id": row.id, "judgment_id": j, "position": k, "handed": 0}
                                          for k, j in enumerate(ids)])
    return _round(row, items=len(ids))


def get_round(session: Session, *, name: str) -> RoundRecord:
    row = session.scalar(select(m.ReviewRound).where(m.ReviewRound.name == name.strip()))
    if row is None:
        raise InputError(f"round {name!r} does not exist: pick one from `reflectrm round list`")
    return _round(row, items=_item_count(session, row.id))


def list_rounds(session: Session) -> list[RoundRecord]:
    rows = list(session.scalars(select(m.ReviewRound).order_by(m.ReviewRound.id)))
    counts = dict(session.execute(select(m.RoundItem.round_id, func.count()).group_by(m.RoundItem.round_id)).all())
    return [_round(r, items=counts.get(r.id, 0)) for r in rows]


def _item_count(session: Session, round_id: int) -> int:
    return session.scalar(select(func.count()).select_from(m.RoundItem).where(m.RoundItem.round_id == round_id)) or 0


def _round(row: m.ReviewRound, *, items: int) -> RoundRecord:
    return RoundRecord(id=row.id, name=row.name, overlap=row.overlap, blind=row.blind,
                       reviewers=tuple(row.reviewers), selection=dict(row.selection), opened_by=row.opened_by,
                       items=items, created_at=row.created_at)


def require_member(session: Session, *, rnd: RoundRecord, reviewer: str) -> ReviewerRecord:
    """The reviewer, refused unless their role reviews and the round lets them take items."""
    found = require_role(session, name=reviewer)
    if rnd.reviewers and found.name not in rnd.reviewers:
        raise RoleError(f"round {rnd.name!r} is for {', '.join(rnd.reviewers)} only: ask an admin for another round")
    return found


# --- assignment ------------------------------------------------------------------------------------------------


def take_next(session: Session, *, rnd: RoundRecord, reviewer: str) -> int | None:
    """The judgment the reviewer works on next in the round: an assignment they have not answered first, else a
    new one (fewest assignments first, then the round's order); None when nothing is left for them."""
    require_member(session, rnd=rnd, reviewer=reviewer)
    held = session.scalar(select(m.Assignment.judgment_id).where(
        m.Assignment.round_id == rnd.id, m.Assignment.reviewer == reviewer, m.Assignment.answered_at.is_(None),
    ).order_by(m.Assignment.id).limit(1))
    if held is not None:
        return held
    item = _lock_candidate(session, rnd=rnd, reviewer=reviewer)
    if item is None:
        return None
    item_id, judgment_id = item
    session.execute(update(m.RoundItem).where(m.RoundItem.id == item_id).values(handed=m.RoundItem.handed + 1))
    session.execute(insert(m.Assignment).values(round_id=rnd.id, item_id=item_id, judgment_id=judgment_id,
                                                reviewer=reviewer, assigned_at=utcnow(), marks={}, note=""))
    return judgment_id


def _lock_candidate(session: Session, *, rnd: RoundRecord, reviewer: str) -> tuple[int, int] | None:
    """(item id, judgment id) of the round's next item for `reviewer`, its row locked on PostgreSQL."""
    mine = select(m.Assignment.id).where(m.Assignment.item_id == m.RoundItem.id,
                                         m.Assignment.reviewer == reviewer).exists()
    stmt = (select(m.RoundItem.id, m.RoundItem.judgment_id)
            .where(m.RoundItem.round_id == rnd.id, m.RoundItem.handed < rnd.overlap, ~mine)
            .order_by(m.RoundItem.handed, m.RoundItem.position).limit(1))
    if session.get_bind().dialect.name != "postgresql":
        row = session.execute(stmt).first()  # SQLite: the write transaction holds the database's one write lock
        return None if row is None else (row[0], row[1])
    # rows other takers hold are skipped; when every candidate was held, wait for them: a held row may still
    # need this reviewer once its taker commits (PostgreSQL rechecks `handed < overlap` on the row it locks)
    for locking in ({"skip_locked": True}, {}):
        row = session.execute(stmt.with_for_update(of=m.RoundItem, **locking)).first()
        if row is not None:
            return row[0], row[1]
    return None


def release(session: Session, *, rnd: RoundRecord, reviewer: str, judgment_id: int | None = None) -> list[int]:
    """Take back the reviewer's unanswered assignments in the round (one, with `judgment_id`); returns their
    judgments. Answers are never released."""
    where = [m.Assignment.round_id == rnd.id, m.Assignment.reviewer == reviewer, m.Assignment.answered_at.is_(None)]
    if judgment_id is not None:
        where.append(m.Assignment.judgment_id == judgment_id)
    rows = session.execute(select(m.Assignment.id, m.Assignment.item_id, m.Assignment.judgment_id).where(*where)
                           .order_by(m.Assignment.id)).all()
    if judgment_id is not None and not rows:
        raise InputError(f"{reviewer!r} holds no unanswered judgment {judgment_id} in round {rnd.name!r}: "
                         "see `reflectrm round progress`")
    for assignment_id, item_id, _ in rows:
        session.execute(delete(m.Assignment).where(m.Assignment.id == assignment_id))
        session.execute(update(m.RoundItem).where(m.RoundItem.id == item_id).values(handed=m.RoundItem.handed - 1))
    return [r.judgment_id for r in rows]


def reassign(session: Session, *, rnd: RoundRecord, judgment_id: int, reviewer: str, to: str) -> AnswerRecord:
    """Move an unanswered assignment to another reviewer of the round (who does not hold the item already)."""
    require_member(session, rnd=rnd, reviewer=to)
    row = _assignment_row(session, rnd=rnd, judgment_id=judgment_id, reviewer=reviewer)
    if row is None or row.answered_at is not None:
        raise InputError(f"{reviewer!r} holds no unanswered judgment {judgment_id} in round {rnd.name!r}: "
                         "see `reflectrm round progress`")
    if _assignment_row(session, rnd=rnd, judgment_id=judgment_id, reviewer=to) is not None:
        raise InputError(f"{to!r} already has judgment {judgment_id} in round {rnd.name!r}: pick another reviewer")
    row.reviewer, row.assigned_at = to, utcnow()
    session.flush()
    return _answer(row, rnd.name)


# --- answers ---------------------------------------------------------------------------------------------------


def _assignment_row(session: Session, *, rnd: RoundRecord, judgment_id: int, reviewer: str) -> m.Assignment | None:
    return session.scalar(select(m.Assignment).where(
        m.Assignment.round_id == rnd.id, m.Assignment.judgment_id == judgment_id, m.Assignment.reviewer == reviewer))


def assignment(session: Session, *, rnd: RoundRecord, judgment_id: int, reviewer: str) -> AnswerRecord | None:
    row = _assignment_row(session, rnd=rnd, judgment_id=judgment_id, reviewer=reviewer)
    return None if row is None else _answer(row, rnd.name)


def record_answer(session: Session, *, rnd: RoundRecord, judgment_id: int, reviewer: str, verdict: Choice,
                  marks: Mapping[int, Mark], note: str) -> AnswerRecord:
    """Save the reviewer's answer on an item assigned to them (again, to change it, until the item is labelled)."""
    _lock_item(session, rnd=rnd, judgment_id=judgment_id)
    row = _assignment_row(session, rnd=rnd, judgment_id=judgment_id, reviewer=reviewer)
    if row is None:
        raise RoleError(f"judgment {judgment_id} is not assigned to {reviewer!r} in round {rnd.name!r}: take the "
                        "next item of the round instead")
    positions = set(session.scalars(select(m.Sample.position).where(m.Sample.judgment_id == judgment_id)))
    check_correction(verdict=verdict, marks=marks, max_pairs=DEFAULT_MAX_PAIRS, keys=positions)
    if label(session, rnd=rnd, judgment_id=judgment_id) is not None:
        raise InputError(f"judgment {judgment_id} of round {rnd.name!r} is labelled already: answers can no longer "
                         "change")
    row.verdict, row.marks, row.note = verdict, {str(k): v for k, v in sorted(marks.items())}, note
    row.answered_at = utcnow()
    session.flush()
    return _answer(row, rnd.name)


def _lock_item(session: Session, *, rnd: RoundRecord, judgment_id: int) -> None:
    """Serialise the writes on one item of the round: two last answers committed at once would each see the other
    missing, and an item with every answer in and agreeing would wait for an adjudicator unlabelled. On PostgreSQL
    the item's row is locked until the transaction ends; on SQLite the write transaction holds the database's one
    write lock already."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(m.RoundItem.id).where(m.RoundItem.round_id == rnd.id,
                                                     m.RoundItem.judgment_id == judgment_id).with_for_update())


def answers(session: Session, *, rnd: RoundRecord, judgment_id: int | None = None,
            answered_only: bool = True) -> list[AnswerRecord]:
    """The round's answers (of one item, with `judgment_id`), by judgment then reviewer."""
    stmt = select(m.Assignment).where(m.Assignment.round_id == rnd.id).order_by(m.Assignment.judgment_id,
                                                                                m.Assignment.reviewer)
    if judgment_id is not None:
        stmt = stmt.where(m.Assignment.judgment_id == judgment_id)
    if answered_only:
        stmt = stmt.where(m.Assignment.answered_at.is_not(None))
    return [_answer(r, rnd.name) for r in session.scalars(stmt)]


def _answer(row: m.Assignment, round_name: str) -> AnswerRecord:
    return AnswerRecord(id=row.id, round=round_name, judgment_id=row.judgment_id, reviewer=row.reviewer,
                        verdict=row.verdict, marks={int(k): v for k, v in row.marks.items()},  # type: ignore[misc]
                        note=row.note, assigned_at=row.assigned_at, answered_at=row.answered_at)


def complete(session: Session, *, rnd: RoundRecord, judgment_id: int) -> bool:
    """Whether every one of the item's k answers is in."""
    count = session.scalar(select(func.count()).select_from(m.Assignment).where(
        m.Assignment.round_id == rnd.id, m.Assignment.judgment_id == judgment_id,
        m.Assignment.answered_at.is_not(None))) or 0
    return count >= rnd.overlap


# --- labels ----------------------------------------------------------------------------------------------------


def write_label(session: Session, *, rnd: RoundRecord, judgment_id: int, kind: str, verdict: Choice,
                marks: Mapping[int, Mark], agreement: float, decided_by: str, overruled: Sequence[int],
                author: str, note: str) -> RoundLabelRecord:
    """Label a round's item and write the label as the judgment's correction (its active one edited, with history)."""
    active = curation.active_correction_id(session, judgment_id)
    if active is None:
        correction_id = curation.add_correction(session, judgment_id=judgment_id, author=author, verdict=verdict,
                                                note=note, marks=marks, max_pairs=DEFAULT_MAX_PAIRS,
                                                seed=secrets.randbits(62))
    else:
        curation.edit_correction(session, correction_id=active, author=author, verdict=verdict, note=note,
                                 marks=marks)
        correction_id = active
    row = m.RoundLabel(round_id=rnd.id, judgment_id=judgment_id, kind=kind, verdict=verdict,
                       marks={str(k): v for k, v in sorted(marks.items())}, agreement=agreement,
                       decided_by=decided_by, overruled=list(overruled), correction_id=correction_id,
                       created_at=utcnow())
    session.add(row)
    session.flush()
    return _label(row, rnd.name)


def label(session: Session, *, rnd: RoundRecord, judgment_id: int) -> RoundLabelRecord | None:
    row = session.scalar(select(m.RoundLabel).where(m.RoundLabel.round_id == rnd.id,
                                                    m.RoundLabel.judgment_id == judgment_id))
    return None if row is None else _label(row, rnd.name)


def labels(session: Session, *, rnd: RoundRecord) -> list[RoundLabelRecord]:
    stmt = select(m.RoundLabel).where(m.RoundLabel.round_id == rnd.id).order_by(m.RoundLabel.judgment_id)
    return [_label(r, rnd.name) for r in session.scalars(stmt)]


def _label(row: m.RoundLabel, round_name: str) -> RoundLabelRecord:
    return RoundLabelRecord(round=round_name, judgment_id=row.judgment_id, kind=row.kind, verdict=row.verdict,
                            marks={int(k): v for k, v in row.marks.items()},  # type: ignore[misc]
                            agreement=row.agreement, decided_by=row.decided_by, overruled=tuple(row.overruled),
                            correction_id=row.correction_id, created_at=row.created_at)


def disputed(session: Session, *, rnd: RoundRecord) -> list[int]:
    """Judgments of the round with every answer in and no label: the adjudicator's queue, in the round's order."""
    answered = (select(func.count()).select_from(m.Assignment)
                .where(m.Assignment.item_id == m.RoundItem.id, m.Assignment.answered_at.is_not(None))
                .scalar_subquery())
    labelled = select(m.RoundLabel.id).where(m.RoundLabel.round_id == rnd.id,
                                             m.RoundLabel.judgment_id == m.RoundItem.judgment_id).exists()
    stmt = (select(m.RoundItem.judgment_id).where(m.RoundItem.round_id == rnd.id, answered >= rnd.overlap, ~labelled)
            .order_by(m.RoundItem.position))
    return list(session.scalars(stmt))


def labelled_corrections(session: Session, *, rule: SnapshotRule) -> set[int]:
    """The corrections of round labels that `rule` takes."""
    stmt = select(m.RoundLabel.correction_id).where(m.RoundLabel.kind.in_(rule.kinds()),
                                                    m.RoundLabel.agreement >= rule.min_agreement)
    if rule.round is not None:
        stmt = stmt.join(m.ReviewRound, m.ReviewRound.id == m.RoundLabel.round_id).where(
            m.ReviewRound.name == rule.round)
    return set(session.scalars(stmt))


# --- progress --------------------------------------------------------------------------------------------------


def progress(session: Session, *, rnd: RoundRecord) -> RoundProgress:
    """How far the round is: answers needed, handed out and given; labels; each reviewer's part."""
    a = m.Assignment
    per = session.execute(select(a.reviewer, func.count(), func.count(a.answered_at))
                          .where(a.round_id == rnd.id).group_by(a.reviewer).order_by(a.reviewer)).all()
    kinds = dict(session.execute(select(m.RoundLabel.kind, func.count()).where(m.RoundLabel.round_id == rnd.id)
                                 .group_by(m.RoundLabel.kind)).all())
    waiting = len(disputed(session, rnd=rnd))
    labelled = sum(kinds.values())
    return RoundProgress(
        round=rnd, needed=rnd.items * rnd.overlap, assigned=sum(r[1] for r in per), answered=sum(r[2] for r in per),
        complete=waiting + labelled, agreed=kinds.get("agreed", 0), adjudicated=kinds.get("adjudicated", 0),
        disputed=waiting,
        reviewers=tuple(ReviewerProgress(reviewer=r[0], assigned=r[1], answered=r[2]) for r in per))


# --- settling an item: agreement, or the adjudicator's queue -------------------------------------------------

LETTERS = {1: "A", 2: "B"}
"""A verdict as the agreement figures name it (`reflectrm.agreement.Answer`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Settlement:
    """What an item's answers say together.

    Attributes:
        agreed: every answer gave the same verdict and no analysis was marked right by one and wrong by another.
        verdict: the agreed verdict; None when they disagree.
        marks: the marks they agree on (`reflectrm.agreement.agreed_marks`); {} when they disagree.
        agreement: the share of reviewer pairs with the same verdict (1.0 for a single answer).
    """

    agreed: bool
    verdict: Choice | None
    marks: dict[int, Mark]
    agreement: float


def settle(given: Sequence[AnswerRecord]) -> Settlement:
    """How an item's answers settle it (pure)."""
    from reflectrm.agreement import Answer, agreed_marks, item_agreement

    answers = [Answer(item=a.judgment_id, reviewer=a.reviewer, verdict=LETTERS.get(a.verdict or 0),  # type: ignore
                      marks=a.marks) for a in given]
    share = item_agreement(answers).agreement
    verdicts = {a.verdict for a in given}
    indices = {k for a in given for k in a.marks}
    clash = any(len({a.marks[k] for a in given if k in a.marks}) > 1 for k in indices)
    agreed = len(verdicts) == 1 and None not in verdicts and not clash
    return Settlement(agreed=agreed, verdict=given[0].verdict if agreed else None,
                      marks=agreed_marks(answers) if agreed else {},  # type: ignore[arg-type]
                      agreement=1.0 if share is None else share)


def settle_item(session: Session, *, rnd: RoundRecord, judgment_id: int) -> RoundLabelRecord | None:
    """Label the item by agreement once every answer is in and they agree; None otherwise (it waits for an
    adjudicator when they disagree)."""
    if not complete(session, rnd=rnd, judgment_id=judgment_id) or label(session, rnd=rnd, judgment_id=judgment_id):
        return None
    given = answers(session, rnd=rnd, judgment_id=judgment_id)
    settled = settle(given)
    if not settled.agreed:
        return None
    who = ",".join(a.reviewer for a in given)
    return write_label(session, rnd=rnd, judgment_id=judgment_id, kind="agreed", verdict=settled.verdict,  # type: ignore
                       marks=settled.marks, agreement=settled.agreement, decided_by=who, overruled=(),
                       author=f"round {rnd.name}: agreed by {who}", note=f"round {rnd.name}: agreed")


def adjudicate(session: Session, *, rnd: RoundRecord, judgment_id: int, by: str, verdict: Choice,
               marks: Mapping[int, Mark], note: str) -> RoundLabelRecord:
    """An adjudicator's decision on a disputed item: its label, with the answers it overruled."""
    require_role(session, name=by, adjudicate=True)
    _lock_item(session, rnd=rnd, judgment_id=judgment_id)
    if judgment_id not in disputed(session, rnd=rnd):
        done = label(session, rnd=rnd, judgment_id=judgment_id) is not None
        raise InputError(f"judgment {judgment_id} of round {rnd.name!r} is not waiting for an adjudicator: "
                         + ("it is labelled already" if done else "its answers are not all in (or it is not in the "
                            "round)") + "; pick one from the adjudication queue")
    positions = set(session.scalars(select(m.Sample.position).where(m.Sample.judgment_id == judgment_id)))
    check_correction(verdict=verdict, marks=marks, max_pairs=DEFAULT_MAX_PAIRS, keys=positions)
    given = answers(session, rnd=rnd, judgment_id=judgment_id)
    overruled = [a.id for a in given if a.verdict != verdict
                 or any(k in marks and marks[k] != mark for k, mark in a.marks.items())]
    return write_label(session, rnd=rnd, judgment_id=judgment_id, kind="adjudicated", verdict=verdict, marks=marks,
                       agreement=settle(given).agreement, decided_by=by, overruled=overruled, author=by,
                       note=note or f"round {rnd.name}: adjudicated")
