"""Repository functions: `(session, *, ...)`, `select()`-based; they may flush, never commit.

The service that handles one user action (`reflectrm_db.services`) owns the transaction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from sqlalchemy import Select, Text, and_, case, cast, func, literal, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, aliased

from reflectrm_db import models as m
from reflectrm_db.derivation import content_hash
from reflectrm_db.records import REVIEW_FLAGS, JudgmentSummary, PromotionRecord, StoredJudgment, StoredPair
from reflectrm_db.types import utcnow
from reflectrm.core.types import Judgment, ParseStatus, PreferencePair, Reflection, Rollout, Vote

_IN_CHUNK = 500  # ids per IN (...) list: well under SQLite's and PostgreSQL's parameter limits

# --- pairs: one identity for every command that stores one -----------------------------------------


def label_state(pair: PreferencePair) -> str:
    """What a pair's data says about which response is better: "1", "2", "tie", or "" (nothing)."""
    return "tie" if pair.tie else "" if pair.label is None else str(pair.label)


def pair_key(pair: PreferencePair) -> str:
    """A pair's identity in the store: its content (conversation and both responses, in order) and its label.

    Id, source and subset say where a pair came from, not what it is: `import`, `judge --input --db`,
    `eval --db`, the app and the reward service all find one stored row for one pair, whatever each
    names it (`find_stored_pair` says which row a pair is).
    """
    return content_hash([pair.fingerprint(), label_state(pair)])


def find_stored_pair(pair: PreferencePair, stored: Sequence[PreferencePair]) -> int | None:
    """Which of the stored pairs of the same content (oldest first) `pair` is: its index, or None (a new pair).

    A pair is the oldest stored one with its label; a pair without a label is the oldest of its content
    (it does not know the label: it is the pair whichever label the data gave); a labelled pair whose
    content is stored only without a label (or with another) is the oldest unlabelled one, or a new row:
    two data sets that label one pair differently keep both labels.
    """
    state = label_state(pair)
    if not state:
        return 0 if stored else None
    states = [label_state(p) for p in stored]
    return states.index(state) if state in states else states.index("") if "" in states else None


def completed_pair(stored: PreferencePair, pair: PreferencePair) -> PreferencePair:
    """The stored pair with what it lacks taken from `pair`, the same pair stored again (`find_stored_pair`).

    A label, a source, a subset or an id (a stored id that is only the content hash) fill in; what the
    stored pair already says is kept: the first to name a pair names it.
    """
    fills: dict[str, Any] = {}
    if not label_state(stored) and label_state(pair):
        fills.update(label=pair.label, tie=pair.tie)
    if not stored.source and pair.source:
        fills["source"] = pair.source
    if not stored.subset and pair.subset:
        fills["subset"] = pair.subset
    if stored.id == stored.fingerprint()[:16] and pair.id != stored.id:
        fills["id"] = pair.id
    return replace(stored, **fills) if fills else stored


@dataclass(slots=True)
class _Slot:
    """One stored (or to be stored) pair row while `add_pairs` works: its id once known, and what it holds."""

    id: int | None
    pair: PreferencePair
    changed: bool = False


def _pair_values(pair: PreferencePair) -> dict[str, Any]:
    return {
        "pair_key": pair_key(pair),
        "fingerprint": pair.fingerprint(),
        "messages": [{"role": msg.role, "content": msg.content} for msg in pair.conversation],
        "response_1": pair.response_1,
        "response_2": pair.response_2,
        "label": pair.label,
        "tie": pair.tie,
        "source": pair.source,
        "source_id": pair.id,
        "subset": pair.subset,
        "created_at": utcnow(),
    }


def _insert_ignoring_duplicates(session: Session, model: type[m.Base], rows: list[dict[str, Any]], key: str) -> None:
    dialect = session.get_bind().dialect.name
    stmt = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(model)
    session.execute(stmt.on_conflict_do_nothing(index_elements=[key]), rows)


def add_pairs(session: Session, *, pairs: Sequence[PreferencePair]) -> tuple[list[int], int]:
    """Store the pairs not stored yet (`find_stored_pair`), completing stored ones (`completed_pair`).

    Returns (the row id of each pair, in order; how many rows are new).
    """
    stored = _stored_by_content(session, [p.fingerprint() for p in pairs])
    slots: list[_Slot] = []
    for pair in pairs:
        candidates = stored.setdefault(pair.fingerprint(), [])
        found = find_stored_pair(pair, [s.pair for s in candidates])
        if found is None:
            candidates.append(_Slot(None, pair))
        else:
            slot = candidates[found]
            merged = completed_pair(slot.pair, pair)
            slot.changed, slot.pair = slot.changed or merged != slot.pair, merged
        slots.append(candidates[-1] if found is None else candidates[found])
    new = list({id(s): s for s in slots if s.id is None}.values())
    _update_pairs(session, [s for s in {id(s): s for s in slots}.values() if s.id is not None and s.changed])
    if new:  # a concurrent writer may store the same pair first: fine, its row is the pair's
        _insert_ignoring_duplicates(session, m.Pair, [_pair_values(s.pair) for s in new], "pair_key")
        ids = _pair_ids(session, [pair_key(s.pair) for s in new])
        for s in new:
            s.id = ids[pair_key(s.pair)]
    return [s.id for s in slots], len(new)  # type: ignore[misc]


def _stored_by_content(session: Session, fingerprints: Sequence[str]) -> dict[str, list[_Slot]]:
    """The stored pairs of these contents, oldest first (a store written before one identity may hold copies)."""
    found: dict[str, list[_Slot]] = {}
    for chunk in _chunks(list(dict.fromkeys(fingerprints)), _IN_CHUNK):
        for row in session.execute(_with_content(chunk)):
            found.setdefault(row.fingerprint, []).append(_Slot(row.id, pair_from_row(row)))
    return found


def _update_pairs(session: Session, slots: Sequence[_Slot]) -> None:
    """Write what `completed_pair` filled in (the content, and so the row's fingerprint, never changes)."""
    for s in slots:
        p = s.pair
        session.execute(update(m.Pair).where(m.Pair.id == s.id).values(
            pair_key=pair_key(p), label=p.label, tie=p.tie, source=p.source, source_id=p.id, subset=p.subset))


def _pair_ids(session: Session, keys: Sequence[str]) -> dict[str, int]:
    found: dict[str, int] = {}
    for chunk in _chunks(list(dict.fromkeys(keys)), _IN_CHUNK):
        found.update(session.execute(select(m.Pair.pair_key, m.Pair.id).where(m.Pair.pair_key.in_(chunk))).all())
    return found


def pair_from_row(row: Any) -> PreferencePair:
    return PreferencePair(
        conversation=row.messages,
        response_1=row.response_1,
        response_2=row.response_2,
        label=row.label,
        id=row.source_id,
        source=row.source,
        subset=row.subset,
        tie=bool(row.tie),
    )


def seen_pair(pair: PreferencePair, *, swapped: bool) -> PreferencePair:
    """The pair as a judgment saw it: the stored pair, or its swapped order for a swapped-order twin."""
    return pair.swapped() if swapped else pair


def get_pairs(session: Session, *, pair_ids: Sequence[int]) -> dict[int, PreferencePair]:
    out: dict[int, PreferencePair] = {}
    for chunk in _chunks(list(dict.fromkeys(pair_ids)), _IN_CHUNK):
        for row in session.execute(select(m.Pair.__table__).where(m.Pair.id.in_(chunk))):
            out[row.id] = pair_from_row(row)
    return out


def judgment_pairs(session: Session, *, judgment_ids: Sequence[int]) -> dict[int, PreferencePair]:
    """The stored pair of each judgment (its own pair row, in the stored order), by judgment id."""
    out: dict[int, PreferencePair] = {}
    pair_table = m.Pair.__table__
    for chunk in _chunks(list(dict.fromkeys(judgment_ids)), _IN_CHUNK):
        stmt = (select(m.Judgment.id.label("judgment_id"), *pair_table.c)
                .join(pair_table, pair_table.c.id == m.Judgment.pair_id).where(m.Judgment.id.in_(chunk)))
        for row in session.execute(stmt):
            out[row.judgment_id] = pair_from_row(row)
    return out


def pairs_with_content(session: Session, *, fingerprints: Sequence[str], limit: int) -> list[StoredPair]:
    """Stored pairs whose content (`PreferencePair.fingerprint`: conversation and both responses) is one of
    `fingerprints`, whatever their label, source or id; in id order, at most `limit`."""
    stmt = _with_content(list(dict.fromkeys(fingerprints))).limit(limit)
    return [StoredPair(row.id, pair_from_row(row), row.created_at) for row in session.execute(stmt)]


def _with_content(fingerprints: Sequence[str]) -> Select:
    """The pair rows whose content (`PreferencePair.fingerprint`) is one of `fingerprints`, oldest first."""
    return select(m.Pair.__table__).where(m.Pair.fingerprint.in_(fingerprints)).order_by(m.Pair.id)


def list_pairs(session: Session, *, source: str | None, limit: int, offset: int) -> list[StoredPair]:
    stmt = select(m.Pair.__table__).order_by(m.Pair.id).limit(limit).offset(offset)
    if source is not None:
        stmt = stmt.where(m.Pair.source == source)
    return [StoredPair(row.id, pair_from_row(row), row.created_at) for row in session.execute(stmt)]


# --- judgments -------------------------------------------------------------------------------------


def add_judgments(
    session: Session, *, judgments: Sequence[Judgment], swapped: bool, idempotent: bool = False,
    cache_keys: Sequence[str] | None = None,
) -> list[int]:
    """Insert judgments (and their pairs, once); with `swapped`, link each [original, swapped] pair.

    A swapped order is a judgment of the same pair, stored against the original pair's row with
    `swapped` set: an audit never adds a pair to the data set it audits. With `idempotent`, each
    judgment carries `judgment_key` and one already stored under its key is not inserted again: its
    existing row id is returned in its place. `cache_keys` (the reward service's, one per judgment:
    `reflectrm.serving.cache.request_key`) work the same way on their own column, and a key a concurrent
    writer stores first, between the look-up and the insert, is read back instead of conflicting.
    """
    if cache_keys is not None and len(cache_keys) != len(judgments):
        raise ValueError(f"{len(cache_keys)} cache keys for {len(judgments)} judgments: give one per judgment")
    originals = judgments[::2] if swapped else judgments
    pair_ids, _ = add_pairs(session, pairs=[j.pair for j in originals])
    if swapped:
        pair_ids = [p for p in pair_ids for _ in range(2)]
    orders = [swapped and k % 2 == 1 for k in range(len(judgments))]
    keys = [judgment_key(j, swapped=o) if idempotent else None for j, o in zip(judgments, orders)]
    caches = list(cache_keys) if cache_keys is not None else [None] * len(judgments)
    stored = _judgment_ids_by(session, m.Judgment.idempotency_key, [k for k in keys if k is not None])
    cached = _judgment_ids_by(session, m.Judgment.cache_key, [k for k in caches if k is not None])
    ids, new = [], [False] * len(judgments)
    for k, (j, p, o, key, cache) in enumerate(zip(judgments, pair_ids, orders, keys, caches)):
        known = stored.get(key) if key is not None else cached.get(cache) if cache is not None else None
        judgment_id = known
        if known is None:
            judgment_id = add_judgment(session, judgment=j, pair_id=p, swapped=o, key=key, cache_key=cache)
            new[k] = judgment_id is not None
        if judgment_id is None:  # a concurrent writer stored this cache key first: its row is the judgment
            judgment_id = _judgment_ids_by(session, m.Judgment.cache_key, [cache])[cache]  # type: ignore[list-item]
        if key is not None:
            stored[key] = judgment_id  # the same judgment twice in one call is stored once
        if cache is not None:
            cached[cache] = judgment_id
        ids.append(judgment_id)
    if swapped:
        for k in range(0, len(ids), 2):
            if new[k] or new[k + 1]:  # a stored pair of twins is linked already
                link_twins(session, original_id=ids[k], swapped_id=ids[k + 1])
    return ids


def judgment_key(judgment: Judgment, *, swapped: bool) -> str:
    """The idempotency key of a judgment: its pair (every field), model, strategy, config and order.

    Two judgments with one key were asked the same question of the same model in the same way, with
    the same seed: a rerun's copy of one already stored.
    """
    return content_hash({
        "pair_key": content_hash(judgment.pair.to_dict()),  # every field, as always: keys stored before stay valid
        "model": [judgment.model, judgment.model_revision, judgment.backend],
        "strategy": judgment.strategy,
        "config": dict(judgment.config),
        "seed": judgment.seed,
        "swapped": swapped,
    })


def _judgment_ids_by(session: Session, column: Any, keys: Sequence[str]) -> dict[str, int]:
    """The row id of each judgment stored under one of `keys` in `column` (idempotency or cache key)."""
    found: dict[str, int] = {}
    for chunk in _chunks(list(dict.fromkeys(keys)), _IN_CHUNK):
        found.update({key: jid for key, jid in session.execute(select(column, m.Judgment.id).where(column.in_(chunk)))})
    return found


def cached_judgments(session: Session, *, keys: Sequence[str]) -> dict[str, StoredJudgment]:
    """The judgment stored under each cache key found (`add_judgments(cache_keys=...)`); keys not stored are left out."""
    ids = _judgment_ids_by(session, m.Judgment.cache_key, keys)
    loaded = {s.id: s for s in get_judgments(session, judgment_ids=list(ids.values()))}
    return {key: loaded[jid] for key, jid in ids.items() if jid in loaded}


def add_judgment(
    session: Session, *, judgment: Judgment, pair_id: int, swapped: bool, key: str | None = None,
    cache_key: str | None = None,
) -> int | None:
    """Insert a judgment with its samples and reflections; returns its row id.

    With `cache_key`, a row already stored under it (a concurrent writer's, committed meanwhile) is left as it
    is and None is returned: the insert does nothing instead of failing the transaction."""
    # Core inserts of constant statements: compiled once and cached, several times faster than ORM objects.
    values = {**_judgment_values(judgment, pair_id=pair_id, swapped=swapped), "idempotency_key": key,
              "cache_key": cache_key}
    if cache_key is None:
        judgment_id = session.execute(_INSERT_JUDGMENT, values).scalar_one()
    else:
        dialect = session.get_bind().dialect.name
        insert = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(m.Judgment)
        stmt = insert.on_conflict_do_nothing(index_elements=["cache_key"]).returning(m.Judgment.id)
        judgment_id = session.execute(stmt, values).scalar_one_or_none()
        if judgment_id is None:
            return None
    if judgment.rollouts:
        session.execute(_INSERT_SAMPLE, [_sample_values(r, judgment_id, k) for k, r in enumerate(judgment.rollouts)])
    if judgment.reflections:
        session.execute(
            _INSERT_REFLECTION, [_reflection_values(r, judgment_id, k) for k, r in enumerate(judgment.reflections)]
        )
    return judgment_id


_INSERT_JUDGMENT = m.Judgment.__table__.insert().returning(m.Judgment.__table__.c.id)
_INSERT_SAMPLE = m.Sample.__table__.insert()
_INSERT_REFLECTION = m.Reflection.__table__.insert()


def link_twins(session: Session, *, original_id: int, swapped_id: int) -> None:
    """Link the two orders of a swap audit to each other."""
    session.execute(update(m.Judgment).where(m.Judgment.id == original_id).values(twin_id=swapped_id))
    session.execute(update(m.Judgment).where(m.Judgment.id == swapped_id).values(twin_id=original_id))


def _judgment_values(j: Judgment, *, pair_id: int, swapped: bool) -> dict[str, Any]:
    anchor = j.anchor_rollout
    return {
        "pair_id": pair_id,
        "swapped": swapped,
        "model": j.model,
        "model_revision": j.model_revision,
        "backend": j.backend,
        "strategy": j.strategy,
        "config": dict(j.config),
        "seed": j.seed,
        "timings": dict(j.timings),
        "tokens_generated": j.tokens_generated,
        "verdict": j.verdict,
        "abstain_reason": j.abstain_reason,
        "anchor": j.anchor,
        "winners": list(j.winners),
        "vote_counts": None if j.vote is None else list(j.vote.counts),
        "vote_voters": None if j.vote is None else list(j.vote.voters),
        "vote_anchor_added": None if j.vote is None else j.vote.anchor_added,
        "stage2_skipped": j.stage2_skipped,
        "anchor_confidence": None if anchor is None else _confidence_out(anchor.confidence),
        "split_vote": j.vote is not None and min(j.vote.counts) > 0,
        "overturned": anchor is not None
        and anchor.prediction is not None
        and j.verdict not in (None, anchor.prediction),
        "created_at": utcnow(),
    }


def _confidence_out(value: float) -> float | None:
    """Eq. 5 confidence as stored: -inf (no generated token) is NULL."""
    if value == -math.inf:
        return None
    if not math.isfinite(value):
        raise ValueError(f"confidence must be finite or -inf, got {value!r}: compute it with reflectrm.core.confidence")
    return value


def _sample_values(r: Rollout, judgment_id: int, position: int) -> dict[str, Any]:
    return {
        "judgment_id": judgment_id,
        "position": position,
        "idx": r.index,
        "text": r.text,
        "analysis": r.analysis,
        "prediction": r.prediction,
        "status": r.status.value,
        "confidence": _confidence_out(r.confidence),
        "num_tokens": r.num_tokens,
        "greedy": r.greedy,
        "finish_reason": r.finish_reason,
    }


def _reflection_values(r: Reflection, judgment_id: int, position: int) -> dict[str, Any]:
    return {
        "judgment_id": judgment_id,
        "position": position,
        "sample_idx": r.sample,
        "anchor_idx": r.anchor,
        "critique_1": r.order[0],
        "critique_2": r.order[1],
        "text": r.text,
        "analysis": r.analysis,
        "choice": r.choice,
        "status": r.status.value,
        "num_tokens": r.num_tokens,
    }


def _rollout_from_row(row: Any) -> Rollout:
    return Rollout(
        index=row.idx,
        text=row.text,
        analysis=row.analysis,
        prediction=row.prediction,
        status=ParseStatus(row.status),
        confidence=-math.inf if row.confidence is None else row.confidence,
        num_tokens=row.num_tokens,
        greedy=row.greedy,
        finish_reason=row.finish_reason,
    )


def _reflection_from_row(row: Any) -> Reflection:
    return Reflection(
        sample=row.sample_idx,
        anchor=row.anchor_idx,
        order=(row.critique_1, row.critique_2),
        text=row.text,
        analysis=row.analysis,
        choice=row.choice,
        status=ParseStatus(row.status),
        num_tokens=row.num_tokens,
    )


def _judgment_from_rows(row: Any, pair: PreferencePair, samples: Sequence[Any], reflections: Sequence[Any]) -> Judgment:
    vote = None
    if row.vote_counts is not None:
        vote = Vote(counts=tuple(row.vote_counts), voters=tuple(row.vote_voters), anchor_added=row.vote_anchor_added)
    return Judgment(
        pair=pair,
        strategy=row.strategy,
        rollouts=tuple(_rollout_from_row(s) for s in samples),
        verdict=row.verdict,
        anchor=row.anchor,
        reflections=tuple(_reflection_from_row(r) for r in reflections),
        winners=tuple(row.winners),
        vote=vote,
        stage2_skipped=row.stage2_skipped,
        abstain_reason=row.abstain_reason,
        config=row.config,
        model=row.model,
        model_revision=row.model_revision,
        backend=row.backend,
        seed=row.seed,
        timings=row.timings,
    )


def get_judgments(session: Session, *, judgment_ids: Sequence[int]) -> list[StoredJudgment]:
    """Judgments by row id, in the order asked (missing ids are left out)."""
    rows = {}
    for chunk in _chunks(list(dict.fromkeys(judgment_ids)), _IN_CHUNK):
        rows.update((r.id, r) for r in session.execute(select(m.Judgment.__table__).where(m.Judgment.id.in_(chunk))))
    return _assemble(session, [rows[i] for i in judgment_ids if i in rows])


def iter_judgments(session: Session, *, batch: int = 500) -> Iterator[StoredJudgment]:
    """Every judgment in id order, loaded `batch` at a time."""
    last = 0
    while True:
        stmt = select(m.Judgment.__table__).where(m.Judgment.id > last).order_by(m.Judgment.id).limit(batch)
        rows = list(session.execute(stmt))
        if not rows:
            return
        yield from _assemble(session, rows)
        last = rows[-1].id


def _assemble(session: Session, rows: Sequence[Any]) -> list[StoredJudgment]:
    ids = [r.id for r in rows]
    pairs = get_pairs(session, pair_ids=[r.pair_id for r in rows])
    samples = _children(session, m.Sample, ids)
    reflections = _children(session, m.Reflection, ids)
    return [
        StoredJudgment(
            id=r.id,
            pair_id=r.pair_id,
            judgment=_judgment_from_rows(
                r, seen_pair(pairs[r.pair_id], swapped=r.swapped), samples.get(r.id, []), reflections.get(r.id, [])
            ),
            sample_ids=tuple(s.id for s in samples.get(r.id, [])),
            twin_id=r.twin_id,
            swapped=r.swapped,
            created_at=r.created_at,
        )
        for r in rows
    ]


def _children(
    session: Session, model: type[m.Sample] | type[m.Reflection], judgment_ids: list[int]
) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for chunk in _chunks(judgment_ids, _IN_CHUNK):
        stmt = select(model.__table__).where(model.judgment_id.in_(chunk)).order_by(model.judgment_id, model.position)
        for row in session.execute(stmt):
            out.setdefault(row.judgment_id, []).append(row)
    return out


def seen_label() -> Any:
    """The pair's label in the numbering of the judgment's order (SQL)."""
    return case((m.Judgment.swapped.is_(True), 3 - m.Pair.label), else_=m.Pair.label)


def _summaries_select() -> Any:
    """Judgment summaries (one row each, with review flags and the active correction), unordered."""
    j, p, twin, c = m.Judgment, m.Pair, aliased(m.Judgment), m.Correction
    label = seen_label()
    flags = {
        "abstained": j.verdict.is_(None),
        "label_disagrees": and_(p.label.is_not(None), j.verdict.is_not(None), j.verdict != label),
        # orders agree when the verdicts point at the same response, i.e. differ as numbers
        "flipped": and_(twin.verdict.is_not(None), j.verdict.is_not(None), twin.verdict == j.verdict),
        "overturned": j.overturned,
        "split_vote": j.split_vote,
    }
    columns = [case((cond, 1), else_=0).label(name) for name, cond in flags.items()]
    score = sum((case((cond, 1), else_=0) for cond in flags.values()), literal(0))
    stmt = (
        select(
            j.id,
            j.pair_id,
            j.verdict,
            j.strategy,
            j.model,
            j.anchor_confidence,
            j.twin_id,
            j.swapped,
            j.created_at,
            p.messages,
            p.source,
            label.label("label"),
            c.id.label("correction_id"),
            *columns,
        )
        .join(p, p.id == j.pair_id)
        .outerjoin(twin, twin.id == j.twin_id)
        .outerjoin(c, and_(c.judgment_id == j.id, c.active.is_(True)))
    )
    return stmt, score


def review_queue(
    session: Session, *, include_corrected: bool, flagged_only: bool, source: str | None, limit: int, offset: int
) -> list[JudgmentSummary]:
    """Judgments most worth a person's look first: most review flags, then lowest anchor confidence."""
    stmt, score = _summaries_select()
    stmt = stmt.order_by(score.desc(), m.Judgment.anchor_confidence.asc().nulls_first(), m.Judgment.id)
    if not include_corrected:
        stmt = stmt.where(m.Correction.id.is_(None))
    if flagged_only:
        stmt = stmt.where(score > 0)
    if source is not None:
        stmt = stmt.where(m.Pair.source == source)
    return [_summary(row) for row in session.execute(stmt.limit(limit).offset(offset))]


def history(session: Session, *, search: str, limit: int, before: int | None = None) -> list[JudgmentSummary]:
    """Judgments newest first (ids below `before` when given), those whose query or source contains `search`."""
    stmt, _ = _summaries_select()
    stmt = stmt.order_by(m.Judgment.id.desc()).limit(limit)
    if before is not None:
        stmt = stmt.where(m.Judgment.id < before)
    needle = search.strip().casefold()
    if needle:
        # the conversation is stored as JSON: search its text (non-ASCII is kept as is by the JSON serialiser)
        text, source = func.lower(cast(m.Pair.messages, Text)), func.lower(m.Pair.source)
        stmt = stmt.where(or_(text.contains(needle, autoescape=True), source.contains(needle, autoescape=True)))
    return [_summary(row) for row in session.execute(stmt)]


def judgment_summary(session: Session, *, judgment_id: int) -> JudgmentSummary | None:
    stmt, _ = _summaries_select()
    row = session.execute(stmt.where(m.Judgment.id == judgment_id)).first()
    return None if row is None else _summary(row)


def list_sources(session: Session) -> list[str]:
    """The data sets (pair sources) in the store, sorted."""
    return list(session.scalars(select(m.Pair.source).distinct().order_by(m.Pair.source)))


def source_pair_ids(session: Session, *, source: str) -> list[int]:
    """Row ids of a data set's pairs, in id order (a stable order: a seeded sample draws the same pairs)."""
    return list(session.scalars(select(m.Pair.id).where(m.Pair.source == source).order_by(m.Pair.id)))


def _summary(row: Any) -> JudgmentSummary:
    return JudgmentSummary(
        id=row.id,
        pair_id=row.pair_id,
        query=row.messages[-1]["content"][:200],
        source=row.source,
        label=row.label,
        verdict=row.verdict,
        strategy=row.strategy,
        model=row.model,
        anchor_confidence=row.anchor_confidence,
        flags=tuple(name for name in REVIEW_FLAGS if getattr(row, name)),
        twin_id=row.twin_id,
        correction_id=row.correction_id,
        created_at=row.created_at,
        swapped=bool(row.swapped),
    )


def count_rows(session: Session) -> dict[str, int]:
    """Rows per table (for dashboards and tests)."""
    return {
        table.name: session.execute(select(func.count()).select_from(table)).scalar_one()
        for table in m.Base.metadata.sorted_tables
    }


def _chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# --- promotions: every model made the judge, with the gate's verdict --------------------------------


def add_promotion(session: Session, *, model: str, previous: str, promoted_by: str, verdict: str,
                  overridden: bool, lines: Sequence[str], judge_run_id: int | None = None,
                  checkpoint_run_id: int | None = None) -> PromotionRecord:
    row = m.Promotion(model=model, previous=previous, promoted_by=promoted_by, verdict=verdict, overridden=overridden,
                      lines="\n".join(lines), judge_run_id=judge_run_id, checkpoint_run_id=checkpoint_run_id,
                      created_at=utcnow())
    session.add(row)
    session.flush()
    return _promotion_record(row)


def list_promotions(session: Session, *, limit: int = 100) -> list[PromotionRecord]:
    rows = session.execute(select(m.Promotion).order_by(m.Promotion.id.desc()).limit(limit)).scalars()
    return [_promotion_record(r) for r in rows]


def _promotion_record(row: m.Promotion) -> PromotionRecord:
    return PromotionRecord(id=row.id, model=row.model, previous=row.previous, promoted_by=row.promoted_by,
                           verdict=row.verdict, overridden=row.overridden, judge_run_id=row.judge_run_id,
                           checkpoint_run_id=row.checkpoint_run_id, lines=tuple(row.lines.splitlines()),
                           created_at=row.created_at)
