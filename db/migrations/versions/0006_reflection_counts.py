"""eval_items: stage-2 reflections per item, their parse failures, and how many chose the first critique

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 00:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("reflections", "reflection_failures", "reflections_first")


def upgrade() -> None:
    # Items stored before this revision read 0 reflections: the report shows no stage-2 figure for them.
    with op.batch_alter_table("eval_items", schema=None) as batch_op:
        for name in COLUMNS:
            batch_op.add_column(sa.Column(name, sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("eval_items", schema=None) as batch_op:
        for name in reversed(COLUMNS):
            batch_op.drop_column(name)
