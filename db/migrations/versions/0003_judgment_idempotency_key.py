"""judgments: an idempotency key, unique, so a resumed file run never stores a judgment twice

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 02:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Existing rows keep NULL (unique constraints let NULLs repeat): judgments stored before this revision
    # may hold duplicates that no rule can now pick between, and only new idempotent records carry a key.
    with op.batch_alter_table("judgments", schema=None) as batch_op:
        batch_op.add_column(sa.Column("idempotency_key", sa.String(length=64), nullable=True))
        batch_op.create_unique_constraint(batch_op.f("uq_judgments_idempotency_key"), ["idempotency_key"])


def downgrade() -> None:
    with op.batch_alter_table("judgments", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("uq_judgments_idempotency_key"), type_="unique")
        batch_op.drop_column("idempotency_key")
