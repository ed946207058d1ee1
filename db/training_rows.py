"""The store's training examples as the rows GRPO trains on, rendered by the library's recipe.

`reflectrm.training.recipe` owns the recipe (which analyses make a pair, how a prompt is rendered,
what a row holds and how rows are hashed); this module only reads stored examples and hands them
to it, so the store's rows, the `training` export and a snapshot's identity are the recipe's rows.
Repository style: `(session, *, ...)`, `select()`-based, never commits.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, aliased

from reflectrm_db import models as m
from reflectrm_db.repository import pair_from_row, seen_pair
from reflectrm.core.types import PreferencePair
import reflectrm.training.recipe as recipe
from reflectrm.training.recipe import Analysis, Rendering, TrainingExample

KINDS = ("preference", "reflection")  # the order a snapshot's rows are in: preference examples first, by id
_BATCH = 1000  # rows per database read
LABEL_ORIGIN = "label"
"""The `origin` of an example derived from a labelled pair's judgment (the label as the verdict), not a correction."""


def example_rows(
    session: Session, *, kind: str, states: tuple[str, ...] = ("active",), snapshot_id: int | None = None
) -> Iterator[tuple[Any, PreferencePair, tuple[Any, Any] | None, Mapping[str, Any]]]:
    """(example row, pair, critique sample rows or None, judgment config) in id order."""
    model = m.PreferenceExample if kind == "preference" else m.ReflectionPair
    c1, c2 = aliased(m.Sample), aliased(m.Sample)
    stmt = select(model, m.Pair.__table__, m.Judgment.config, m.Judgment.swapped.label("judgment_swapped"))
    stmt = stmt.join(m.Pair, m.Pair.id == model.pair_id)
    stmt = stmt.outerjoin(m.Judgment, m.Judgment.id == model.judgment_id)
    if kind == "reflection":
        stmt = stmt.add_columns(c1, c2).join(c1, c1.id == m.ReflectionPair.critique_1_id)
        stmt = stmt.join(c2, c2.id == m.ReflectionPair.critique_2_id)
    if snapshot_id is not None:
        member = m.SnapshotMember.preference_example_id if kind == "preference" else m.SnapshotMember.reflection_pair_id
        stmt = stmt.join(m.SnapshotMember, member == model.id).where(m.SnapshotMember.snapshot_id == snapshot_id)
    else:
        stmt = stmt.where(model.state.in_(states))
    last = 0
    while rows := list(session.execute(stmt.where(model.id > last).order_by(model.id).limit(_BATCH))):
        for row in rows:
            critiques = (row[-2], row[-1]) if kind == "reflection" else None
            pair = seen_pair(pair_from_row(row), swapped=bool(row.judgment_swapped))  # as the judgment saw it
            yield row[0], pair, critiques, row.config or {}
        last = rows[-1][0].id


def stored_example(
    row: Any, pair: PreferencePair, critiques: tuple[Any, Any] | None, config: Mapping[str, Any], *,
    other_order: bool = False
) -> TrainingExample:
    """A stored example rendered by the recipe, with the prompt options its judgment was made with (`other_order`:
    with the responses, or a reflection pair's critiques, exchanged; the label follows)."""
    rendering = Rendering.from_config(config)
    origin = "correction" if row.correction_id is not None else LABEL_ORIGIN
    shown = None if critiques is None else tuple(Analysis(c.id, c.analysis, c.prediction) for c in critiques)
    if other_order:
        return recipe.other_order(pair, label=row.label, critiques=shown, rendering=rendering, origin=origin)  # type: ignore[arg-type]
    if shown is None:
        return recipe.preference_example(pair, label=row.label, rendering=rendering, origin=origin)
    return recipe.reflection_example(pair, shown, label=row.label, rendering=rendering, origin=origin)  # type: ignore[arg-type]


def training_rows(
    session: Session, *, kind: str, states: tuple[str, ...] = ("active",), snapshot_id: int | None = None,
    both_orders: bool = False
) -> Iterator[dict[str, Any]]:
    """TRL conversational rows of one kind: the recipe's row plus `example_id` (the store's row id).

    `origin` is "correction", or "label" for an example derived from a labelled pair's judgment; `pair_id` is the
    pair's own id, as `reflectrm.training.data` rows carry it. `both_orders`: each example followed by its other
    order, the two sharing a `twin_key` (`recipe.in_both_orders`).
    """
    for row, pair, critiques, config in example_rows(session, kind=kind, states=states, snapshot_id=snapshot_id):
        first = {**stored_example(row, pair, critiques, config).to_row(), "example_id": row.id}
        if not both_orders:
            yield first
            continue
        twin = {**stored_example(row, pair, critiques, config, other_order=True).to_row(), "example_id": row.id}
        yield from recipe.in_both_orders(first, twin)


def all_training_rows(
    session: Session, *, states: tuple[str, ...] = ("active",), snapshot_id: int | None = None,
    both_orders: bool = False
) -> Iterator[dict[str, Any]]:
    """Every kind's rows, in snapshot order: preference examples, then reflection pairs, each by id."""
    for kind in KINDS:
        yield from training_rows(session, kind=kind, states=states, snapshot_id=snapshot_id, both_orders=both_orders)


def rows_hash(session: Session, *, states: tuple[str, ...] = ("active",), snapshot_id: int | None = None) -> str:
    """A snapshot's identity: `recipe.rows_hash` of its rows exactly as trained on (and as exported)."""
    return recipe.rows_hash(all_training_rows(session, states=states, snapshot_id=snapshot_id))
