"""Repository functions for what people curate: corrections, derived training examples, snapshots.

`(session, *, ...)`, `select()`-based; they may flush, never commit. Example contents are never
updated: editing a correction withdraws the examples it no longer derives and adds the new ones,
so a snapshot's members keep the contents its hash was computed from. The examples a correction
derives, their content hashes and a snapshot's identity all come from the library's recipe
(`reflectrm.training.recipe`): a snapshot's hash is the hash of its rows exactly as trained on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date, datetime, timedelta, timezone
from datetime import time as dt_time
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.orm import Session

from reflectrm_db import models as m
from reflectrm_db import training_rows
from reflectrm_db.derivation import Analysis, Mark, check_correction
from reflectrm_db.records import (
    CorrectedPair, CorrectionRecord, ExampleKind, ExampleRecord, LabelledDerivation, SnapshotRecord,
)
from reflectrm_db.repository import get_judgments, get_pairs, seen_pair
from reflectrm_db.types import utcnow
from reflectrm.core.types import Choice
from reflectrm.errors import InputError
import reflectrm.training.recipe as recipe

EXAMPLE_MODELS: dict[str, type[m.PreferenceExample] | type[m.ReflectionPair]] = {
    "preference": m.PreferenceExample,
    "reflection": m.ReflectionPair,
}

# --- corrections -----------------------------------------------------------------------------------


def _samples(session: Session, judgment_id: int) -> list[Any]:
    stmt = (
        select(m.Sample.id, m.Sample.position, m.Sample.analysis, m.Sample.prediction)
        .where(m.Sample.judgment_id == judgment_id)
        .order_by(m.Sample.position)
    )
    return list(session.execute(stmt))


def _judgment_pair_id(session: Session, judgment_id: int) -> int:
    pair_id = session.scalar(select(m.Judgment.pair_id).where(m.Judgment.id == judgment_id))
    if pair_id is None:
        raise InputError(f"judgment {judgment_id} does not exist: pick one from the judgment list")
    return pair_id


def _correction(session: Session, correction_id: int, *, active: bool = True) -> m.Correction:
    row = session.get(m.Correction, correction_id, with_for_update=True)
    if row is None:
        raise InputError(f"correction {correction_id} does not exist: pick one from the corrections list")
    if active and not row.active:
        raise InputError(f"correction {correction_id} was withdrawn: record a new correction instead")
    return row


class CorrectionExists(InputError):
    """The judgment already has an active correction: edit or withdraw it (its id is `correction_id`)."""

    def __init__(self, *, judgment_id: int, correction_id: int) -> None:
        super().__init__(f"judgment {judgment_id} already has correction {correction_id}: edit or withdraw that one")
        self.judgment_id = judgment_id
        self.correction_id = correction_id


def active_correction_id(session: Session, judgment_id: int) -> int | None:
    """The id of the judgment's active correction, or None."""
    return session.scalar(
        select(m.Correction.id).where(m.Correction.judgment_id == judgment_id, m.Correction.active.is_(True))
    )


def add_correction(
    session: Session,
    *,
    judgment_id: int,
    author: str,
    verdict: Choice,
    note: str,
    marks: Mapping[int, Mark],
    max_pairs: int,
    seed: int,
) -> int:
    """Record a correction of a judgment (marks keyed by rollout position) and derive its examples.

    Raises:
        CorrectionExists: the judgment has an active correction already.
    """
    _judgment_pair_id(session, judgment_id)
    samples = _samples(session, judgment_id)
    check_correction(verdict=verdict, marks=marks, max_pairs=max_pairs, keys={s.position for s in samples})
    existing = active_correction_id(session, judgment_id)
    if existing is not None:
        raise CorrectionExists(judgment_id=judgment_id, correction_id=existing)
    now = utcnow()
    row = m.Correction(
        judgment_id=judgment_id,
        author=author,
        verdict=verdict,
        note=note,
        active=True,
        revision=1,
        history=[],
        derivation_seed=seed,
        max_pairs=max_pairs,
        created_at=now,
        updated_at=now,
    )
    session.add(row)
    session.flush()
    _write_marks(session, row.id, marks, samples)
    sync_derived(session, correction_id=row.id)
    return row.id


def _write_marks(session: Session, correction_id: int, marks: Mapping[int, Mark], samples: Sequence[Any]) -> None:
    by_position = {s.position: s.id for s in samples}
    session.execute(delete(m.CorrectionMark).where(m.CorrectionMark.correction_id == correction_id))
    if marks:
        session.execute(
            insert(m.CorrectionMark),
            [
                {"correction_id": correction_id, "sample_id": by_position[p], "mark": mark}
                for p, mark in sorted(marks.items())
            ],
        )


def _marks(session: Session, correction_id: int) -> dict[int, Mark]:
    """Marks keyed by rollout position."""
    stmt = (
        select(m.Sample.position, m.CorrectionMark.mark)
        .join(m.Sample, m.Sample.id == m.CorrectionMark.sample_id)
        .where(m.CorrectionMark.correction_id == correction_id)
        .order_by(m.Sample.position)
    )
    return dict(session.execute(stmt).all())  # type: ignore[arg-type]


def _remember(session: Session, row: m.Correction) -> None:
    """Keep the current version in `history` before it changes."""
    version = {
        "revision": row.revision,
        "author": row.author,
        "verdict": row.verdict,
        "note": row.note,
        "marks": {str(k): v for k, v in _marks(session, row.id).items()},
        "updated_at": row.updated_at.isoformat(),
    }
    row.history = [*row.history, version]


def edit_correction(
    session: Session,
    *,
    correction_id: int,
    author: str,
    verdict: Choice | None,
    note: str | None,
    marks: Mapping[int, Mark] | None,
) -> None:
    """Change a correction's verdict, note or marks (None leaves one as it is) and re-derive."""
    row = _correction(session, correction_id)
    samples = _samples(session, row.judgment_id)
    check_correction(
        verdict=row.verdict if verdict is None else verdict,
        marks=marks or {},
        max_pairs=row.max_pairs,
        keys={s.position for s in samples},
    )
    _remember(session, row)
    row.author = author
    row.verdict = row.verdict if verdict is None else verdict
    row.note = row.note if note is None else note
    row.revision += 1
    row.updated_at = utcnow()
    if marks is not None:
        _write_marks(session, row.id, marks, samples)
    session.flush()
    sync_derived(session, correction_id=row.id)


def withdraw_correction(session: Session, *, correction_id: int, author: str) -> None:
    """Withdraw a correction and every example it derived."""
    row = _correction(session, correction_id)
    _remember(session, row)
    now = utcnow()
    row.author, row.active, row.withdrawn_at, row.updated_at, row.revision = author, None, now, now, row.revision + 1
    session.flush()
    sync_derived(session, correction_id=row.id)


def sync_derived(session: Session, *, correction_id: int) -> None:
    """Bring the correction's examples in line with it: keep what still follows, withdraw the rest, add the new."""
    row = _correction(session, correction_id, active=False)
    wanted = _wanted_examples(session, row) if row.active else {"preference": {}, "reflection": {}}
    now = utcnow()
    for kind, model in EXAMPLE_MODELS.items():
        current = session.execute(
            select(model.id, model.content_hash).where(model.correction_id == correction_id, model.state != "withdrawn")
        ).all()
        keep = set()
        for example_id, digest in current:
            if digest in wanted[kind] and digest not in keep:
                keep.add(digest)
            else:
                session.execute(
                    update(model).where(model.id == example_id).values(state="withdrawn", state_changed_at=now)
                )
        new = [values for digest, values in wanted[kind].items() if digest not in keep]
        if new:
            session.execute(insert(model), [{**v, "created_at": now, "state": "active"} for v in new])


def _wanted_examples(session: Session, row: m.Correction) -> dict[ExampleKind, dict[str, dict[str, Any]]]:
    """The examples a correction derives (the recipe with the person's verdict and marks), keyed by content hash."""
    pair_id = _judgment_pair_id(session, row.judgment_id)
    swapped = bool(session.scalar(select(m.Judgment.swapped).where(m.Judgment.id == row.judgment_id)))
    pair = seen_pair(get_pairs(session, pair_ids=[pair_id])[pair_id], swapped=swapped)  # verdicts use its numbering
    samples = _samples(session, row.judgment_id)
    config = session.scalar(select(m.Judgment.config).where(m.Judgment.id == row.judgment_id)) or {}
    by_position = {s.position: s.id for s in samples}
    marks = {by_position[p]: mark for p, mark in _marks(session, row.id).items()}
    derived = recipe.derive_examples(
        pair, [Analysis(s.id, s.analysis, s.prediction) for s in samples], verdict=row.verdict,  # type: ignore[arg-type]
        marks=marks, max_pairs=row.max_pairs, seed=row.derivation_seed, rendering=recipe.Rendering.from_config(config),
        origins=("correction", "correction"))
    provenance = {"pair_id": pair_id, "correction_id": row.id, "judgment_id": row.judgment_id}
    preference_hash = recipe.example_hash(derived.preference)
    reflection = {}
    for choice, example in derived.reflection:
        digest = recipe.example_hash(example)
        reflection[digest] = {**provenance, "critique_1_id": choice.critique_1, "critique_2_id": choice.critique_2,
                              "label": choice.label, "content_hash": digest}
    preference = {preference_hash: {**provenance, "label": row.verdict, "content_hash": preference_hash}}
    return {"preference": preference, "reflection": reflection}


# --- the paper's recipe on labelled judgments ------------------------------------------------------

def derive_from_labels(
    session: Session, *, source: str | None, model: str | None, seed: int
) -> LabelledDerivation:
    """Derive the paper's training examples from the judge's own rollouts of labelled pairs.

    For each labelled pair (of data set `source`, if given) the newest judgment in the pair's own order with
    sampled rollouts (by `model`, if given) yields what `build-data` builds from a benchmark (the one rule,
    `recipe.labelled_examples`): a preference example unless every sample was right, and one reflection pair
    (a right against a wrong analysis) where the samples disagree. Pairs a person corrected are left out (the
    correction derives theirs). Examples derived before are not added twice; run again after judging more pairs.
    """
    j, p, c = m.Judgment, m.Pair, m.Correction
    sampled = select(m.Sample.id).where(m.Sample.judgment_id == j.id, m.Sample.greedy.is_(False)).exists()
    newest = select(func.max(j.id)).join(p, p.id == j.pair_id).where(
        p.label.is_not(None), j.swapped.is_(False), sampled)
    if source is not None:
        newest = newest.where(p.source == source)
    if model is not None:
        newest = newest.where(j.model == model)
    ids = sorted(session.scalars(newest.group_by(j.pair_id)))
    corrected_pairs = set(session.scalars(
        select(j.pair_id).join(c, c.judgment_id == j.id).where(c.active.is_(True))))
    known = {kind: set(session.scalars(select(model_.content_hash).where(model_.correction_id.is_(None))))
             for kind, model_ in EXAMPLE_MODELS.items()}
    counts = dict.fromkeys(("judgments", "easy", "corrected", "preference", "reflection", "already_present"), 0)
    new: dict[ExampleKind, list[dict[str, Any]]] = {"preference": [], "reflection": []}
    for chunk in range(0, len(ids), 200):
        for stored in get_judgments(session, judgment_ids=ids[chunk:chunk + 200]):
            counts["judgments"] += 1
            if stored.pair_id in corrected_pairs:
                counts["corrected"] += 1
                continue
            judged = stored.judgment
            rendering = recipe.Rendering.from_config(judged.config)
            if recipe.labelled_dropped(judged) is not None:
                counts["easy"] += 1
                continue
            derived = recipe.labelled_examples(judged, seed=seed, rendering=rendering,
                                               origins=(training_rows.LABEL_ORIGIN,) * 2)
            sample_id = {r.index: sid for r, sid in zip(judged.rollouts, stored.sample_ids) if not r.greedy}
            provenance = {"pair_id": stored.pair_id, "correction_id": None, "judgment_id": stored.id}
            wanted: list[tuple[ExampleKind, str, dict[str, Any]]] = [
                ("preference", recipe.example_hash(derived.preference), {"label": judged.pair.label})]
            wanted += [("reflection", recipe.example_hash(example),
                        {"label": choice.label, "critique_1_id": sample_id[choice.critique_1],
                         "critique_2_id": sample_id[choice.critique_2]})
                       for choice, example in derived.reflection]
            for kind, digest, values in wanted:
                if digest in known[kind]:
                    counts["already_present"] += 1
                    continue
                known[kind].add(digest)
                new[kind].append({**provenance, **values, "content_hash": digest})
    now = utcnow()
    for kind, rows in new.items():
        counts[kind] = len(rows)
        if rows:
            session.execute(insert(EXAMPLE_MODELS[kind]), [{**r, "created_at": now, "state": "active"} for r in rows])
    return LabelledDerivation(**counts)


def get_corrections(
    session: Session,
    *,
    correction_ids: Sequence[int] | None = None,
    judgment_id: int | None = None,
    include_withdrawn: bool = True,
) -> list[CorrectionRecord]:
    """Corrections by id or by judgment, oldest first."""
    stmt = select(m.Correction).order_by(m.Correction.id)
    if correction_ids is not None:
        stmt = stmt.where(m.Correction.id.in_(list(correction_ids)))
    if judgment_id is not None:
        stmt = stmt.where(m.Correction.judgment_id == judgment_id)
    if not include_withdrawn:
        stmt = stmt.where(m.Correction.active.is_(True))
    return [_correction_record(session, row) for row in session.scalars(stmt)]


def corrected_pairs(session: Session, *, limit: int, before: int | None = None) -> list[CorrectedPair]:
    """Active corrections with their pairs, newest first (by id), at most `limit`, ids below `before` when given:
    the keyset pages a caller that looks at every correction's pair reads them in."""
    stmt = (select(m.Correction.id, m.Correction.judgment_id, m.Correction.author, m.Correction.verdict,
                   m.Correction.created_at, m.Judgment.pair_id)
            .join(m.Judgment, m.Judgment.id == m.Correction.judgment_id)
            .where(m.Correction.active.is_(True)).order_by(m.Correction.id.desc()).limit(limit))
    if before is not None:
        stmt = stmt.where(m.Correction.id < before)
    rows = session.execute(stmt).all()
    pairs = get_pairs(session, pair_ids=[r.pair_id for r in rows])
    return [CorrectedPair(id=r.id, judgment_id=r.judgment_id, author=r.author, verdict=r.verdict,
                          created_at=r.created_at, pair=pairs[r.pair_id]) for r in rows]


def _correction_record(session: Session, row: m.Correction) -> CorrectionRecord:
    derived = {
        kind: tuple(
            session.scalars(
                select(model.id).where(model.correction_id == row.id, model.state != "withdrawn").order_by(model.id)
            )
        )
        for kind, model in EXAMPLE_MODELS.items()
    }
    return CorrectionRecord(
        id=row.id,
        judgment_id=row.judgment_id,
        author=row.author,
        verdict=row.verdict,
        note=row.note,  # type: ignore[arg-type]
        marks=_marks(session, row.id),
        active=bool(row.active),
        revision=row.revision,
        derivation_seed=row.derivation_seed,
        max_pairs=row.max_pairs,
        created_at=row.created_at,
        updated_at=row.updated_at,
        withdrawn_at=row.withdrawn_at,
        preference_example_ids=derived["preference"],
        reflection_pair_ids=derived["reflection"],
    )


# --- examples --------------------------------------------------------------------------------------


def list_examples(
    session: Session,
    *,
    kind: ExampleKind,
    states: Sequence[str] | None,
    correction_id: int | None,
    limit: int | None,
    offset: int,
    source: str | None = None,
    since: date | None = None,
    until: date | None = None,
    newest_first: bool = False,
) -> list[ExampleRecord]:
    """Examples of one kind, filtered (state, correction, the pair's source, creation days) and paged in SQL."""
    model = _example_model(kind)
    stmt = select(model).order_by(model.id.desc() if newest_first else model.id).offset(offset).limit(limit)
    if source is not None:
        stmt = stmt.join(m.Pair, m.Pair.id == model.pair_id).where(m.Pair.source == source)
    if since is not None:
        stmt = stmt.where(model.created_at >= datetime.combine(since, dt_time.min, tzinfo=timezone.utc))
    if until is not None:
        stmt = stmt.where(model.created_at < datetime.combine(until + timedelta(days=1), dt_time.min,
                                                              tzinfo=timezone.utc))
    if states is not None:
        stmt = stmt.where(model.state.in_(list(states)))
    if correction_id is not None:
        stmt = stmt.where(model.correction_id == correction_id)
    return [_example_record(kind, row) for row in session.scalars(stmt)]


def count_examples(session: Session, *, states: Sequence[str]) -> dict[ExampleKind, int]:
    """Examples per kind in the given states (counted in SQL)."""
    return {
        kind: session.scalar(select(func.count()).select_from(model).where(model.state.in_(list(states)))) or 0
        for kind, model in EXAMPLE_MODELS.items()
    }


def _example_model(kind: str) -> type[m.PreferenceExample] | type[m.ReflectionPair]:
    if kind not in EXAMPLE_MODELS:
        raise InputError(f"example kind {kind!r} is unknown: use 'preference' or 'reflection'")
    return EXAMPLE_MODELS[kind]


def _example_record(kind: ExampleKind, row: Any) -> ExampleRecord:
    critiques = (row.critique_1_id, row.critique_2_id) if kind == "reflection" else ()
    return ExampleRecord(
        kind=kind,
        id=row.id,
        pair_id=row.pair_id,
        label=row.label,
        state=row.state,
        correction_id=row.correction_id,
        judgment_id=row.judgment_id,
        critiques=critiques,
        content_hash=row.content_hash,
        created_at=row.created_at,
    )


def set_example_state(session: Session, *, kind: ExampleKind, example_ids: Sequence[int], state: str) -> int:
    """Exclude (state="excluded") or restore (state="active") examples; returns how many changed."""
    model = _example_model(kind)
    if state not in ("active", "excluded"):
        raise InputError(f"an example can be set 'active' or 'excluded', not {state!r}")
    ids = list(dict.fromkeys(example_ids))
    found = dict(session.execute(select(model.id, model.state).where(model.id.in_(ids))).all())
    missing = [i for i in ids if i not in found]
    if missing:
        raise InputError(f"{kind} example {missing[0]} does not exist: pick one from the examples list")
    withdrawn = [i for i in ids if found[i] == "withdrawn"]
    if withdrawn:
        raise InputError(f"{kind} example {withdrawn[0]} was withdrawn with its correction: it cannot be {state}")
    change = [i for i in ids if found[i] != state]
    if change:
        session.execute(update(model).where(model.id.in_(change)).values(state=state, state_changed_at=utcnow()))
    return len(change)


# --- snapshots -------------------------------------------------------------------------------------


def create_snapshot(session: Session, *, name: str, note: str, rule: Mapping[str, Any] | None = None,
                    correction_ids: set[int] | None = None) -> SnapshotRecord:
    """Freeze the active examples into a named snapshot identified by the hash of their rows as trained on.

    With `correction_ids` only the active examples those corrections derived (a rule's: `rounds.SnapshotRule`),
    and `rule` is recorded with the snapshot so it says which examples it froze.
    """
    if not name.strip():
        raise InputError("a snapshot needs a name: pass one such as 'train-2026-12-01'")
    if session.scalar(select(m.DatasetSnapshot.id).where(m.DatasetSnapshot.name == name)) is not None:
        raise InputError(f"snapshot {name!r} already exists: choose another name")
    members = {kind: list(session.scalars(select(model.id).where(model.state == "active").where(
        *([] if correction_ids is None else [model.correction_id.in_(sorted(correction_ids))])).order_by(model.id)))
        for kind, model in EXAMPLE_MODELS.items()}
    if correction_ids is not None and not any(members.values()):
        raise InputError(f"the rule {dict(rule or {})} takes no active example: nothing was frozen; review more "
                         "items or loosen the rule")
    row = m.DatasetSnapshot(name=name, note=note, content_hash="", num_preference=len(members["preference"]),
                            num_reflection=len(members["reflection"]), rule=None if rule is None else dict(rule),
                            created_at=utcnow())
    session.add(row)
    session.flush()
    values = [{"snapshot_id": row.id, "preference_example_id": i, "reflection_pair_id": None}
              for i in members["preference"]]
    values += [{"snapshot_id": row.id, "preference_example_id": None, "reflection_pair_id": i}
               for i in members["reflection"]]
    if values:
        session.execute(insert(m.SnapshotMember), values)
    # the rows the members render to, in order (with every active example, the same as the active rows' hash)
    row.content_hash = training_rows.rows_hash(session, snapshot_id=row.id)
    session.flush()
    return _snapshot_record(row)


def _snapshot_record(row: m.DatasetSnapshot) -> SnapshotRecord:
    return SnapshotRecord(
        id=row.id,
        name=row.name,
        note=row.note,
        content_hash=row.content_hash,
        num_preference=row.num_preference,
        num_reflection=row.num_reflection,
        created_at=row.created_at,
        rule=row.rule,
    )


def get_snapshot(session: Session, *, snapshot_id: int | None = None, name: str | None = None) -> SnapshotRecord:
    """A snapshot by id or by name."""
    stmt = select(m.DatasetSnapshot)
    stmt = (
        stmt.where(m.DatasetSnapshot.id == snapshot_id) if name is None else stmt.where(m.DatasetSnapshot.name == name)
    )
    row = session.scalar(stmt)
    if row is None:
        raise InputError(
            f"snapshot {snapshot_id if name is None else repr(name)} does not exist: pick one from the list"
        )
    return _snapshot_record(row)


def list_snapshots(session: Session) -> list[SnapshotRecord]:
    return [_snapshot_record(r) for r in session.scalars(select(m.DatasetSnapshot).order_by(m.DatasetSnapshot.id))]


def snapshot_member_ids(session: Session, *, snapshot_id: int) -> dict[ExampleKind, list[int]]:
    """The example ids a snapshot froze, per kind."""
    get_snapshot(session, snapshot_id=snapshot_id)
    rows = session.execute(
        select(m.SnapshotMember.preference_example_id, m.SnapshotMember.reflection_pair_id)
        .where(m.SnapshotMember.snapshot_id == snapshot_id)
        .order_by(m.SnapshotMember.id)
    ).all()
    out: dict[ExampleKind, list[int]] = {"preference": [], "reflection": []}
    for preference_id, reflection_id in rows:
        out["preference" if preference_id is not None else "reflection"].append(preference_id or reflection_id)
    return out


def snapshot_hash(session: Session, *, snapshot_id: int) -> str:
    """Recompute a snapshot's identity from its members, rendered by the recipe as it is now.

    Equals the stored hash unless a member was tampered with or the recipe renders differently
    since the snapshot was taken (a change to the prompt template): then training on it now would
    not train on what the snapshot froze.
    """
    get_snapshot(session, snapshot_id=snapshot_id)
    return training_rows.rows_hash(session, snapshot_id=snapshot_id)
