"""swapped-order twins share their pair: merge the pair copies audits wrote into the audited data sets

Before this revision an audit stored the swapped order of a pair as a new pair (id "<id>:swapped",
responses exchanged, label flipped) in the audited data set. A swapped order is a judgment of the
same pair: this revision points every judgment and derived example of such a copy at the original
pair (a judgment of the copy's own order becomes a swapped-order judgment of the original, and the
other way round), then deletes the copies. Chains ("<id>:swapped:swapped") fold deepest first.
A pair is merged only when its content is exactly the swapped order of its original; a judgment
of a copy that cannot be merged keeps its pair and its twin link, flagged as not swapped.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 02:30:00
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SUFFIX = ":swapped"

pairs = sa.table(
    "pairs", sa.column("id", sa.Integer), sa.column("pair_key", sa.String), sa.column("fingerprint", sa.String),
    sa.column("messages", sa.JSON), sa.column("response_1", sa.Text), sa.column("response_2", sa.Text),
    sa.column("label", sa.Integer), sa.column("source", sa.Text), sa.column("source_id", sa.Text),
    sa.column("subset", sa.Text),
)
judgments = sa.table("judgments", sa.column("id", sa.Integer), sa.column("pair_id", sa.Integer),
                     sa.column("swapped", sa.Boolean))
EXAMPLE_TABLES = [sa.table(name, sa.column("pair_id", sa.Integer)) for name in ("preference_examples",
                                                                                  "reflection_pairs")]


def _is_swapped_copy(copy: Any, original: Any) -> bool:
    flipped = None if original.label is None else 3 - original.label
    return (
        copy.messages == original.messages
        and copy.response_1 == original.response_2
        and copy.response_2 == original.response_1
        and copy.label == flipped
        and copy.subset == original.subset
    )


def upgrade() -> None:
    conn = op.get_bind()
    # Until now every judgment stored the pair exactly as it saw it (the flag only named the twin's role);
    # from now on `swapped` means "saw its pair's swapped order". State that first, then fold the copies.
    conn.execute(sa.update(judgments).values(swapped=False))
    copies = conn.execute(sa.select(pairs).where(pairs.c.source_id.like(f"%{SUFFIX}"))).all()
    # deepest first: "<id>:swapped:swapped" folds into "<id>:swapped" before that one folds into "<id>"
    for copy in sorted(copies, key=lambda c: (-c.source_id.count(SUFFIX), c.id)):
        original = conn.execute(
            sa.select(pairs)
            .where(pairs.c.source == copy.source, pairs.c.source_id == copy.source_id[: -len(SUFFIX)])
            .order_by(pairs.c.id)
            .limit(1)
        ).first()
        if original is not None and _is_swapped_copy(copy, original):
            _merge(conn, copy_id=copy.id, original_id=original.id)


def _merge(conn: sa.Connection, *, copy_id: int, original_id: int) -> None:
    # a judgment of the copy in its own order is the original's swapped order, and the other way round
    conn.execute(
        sa.update(judgments)
        .where(judgments.c.pair_id == copy_id)
        .values(pair_id=original_id, swapped=sa.not_(judgments.c.swapped))
    )
    for table in EXAMPLE_TABLES:
        conn.execute(sa.update(table).where(table.c.pair_id == copy_id).values(pair_id=original_id))
    conn.execute(sa.delete(pairs).where(pairs.c.id == copy_id))


def downgrade() -> None:
    # The merged copies were duplicates of data the store keeps (the original pair and the swapped flag):
    # nothing is lost, and nothing is recreated.
    pass


