"""judgments: a cache key, unique, so reward-service replicas on one store answer a judgment asked before from it

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-08 09:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Existing rows keep NULL (a unique constraint lets NULLs repeat): only the reward service keys what it
    # stores (`reflectrm.serving.cache.request_key`); the constraint's index answers its look-ups.
    with op.batch_alter_table("judgments", schema=None) as batch_op:
        batch_op.add_column(sa.Column("cache_key", sa.String(length=64), nullable=True))
        batch_op.create_unique_constraint(batch_op.f("uq_judgments_cache_key"), ["cache_key"])


def downgrade() -> None:
    with op.batch_alter_table("judgments", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("uq_judgments_cache_key"), type_="unique")
        batch_op.drop_column("cache_key")
