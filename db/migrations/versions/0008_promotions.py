"""promotions: every checkpoint made the judge, with the gate's verdict and any reviewer's override

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06 08:05:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "promotions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("previous", sa.Text(), nullable=False),
        sa.Column("promoted_by", sa.Text(), nullable=False),
        sa.Column("verdict", sa.String(length=20), nullable=False),
        sa.Column("overridden", sa.Boolean(), nullable=False),
        sa.Column("judge_run_id", sa.Integer(), nullable=True),
        sa.Column("checkpoint_run_id", sa.Integer(), nullable=True),
        sa.Column("lines", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["judge_run_id"], ["eval_runs.id"], name=op.f("fk_promotions_judge_run_id_eval_runs")),
        sa.ForeignKeyConstraint(["checkpoint_run_id"], ["eval_runs.id"],
                                name=op.f("fk_promotions_checkpoint_run_id_eval_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_promotions")),
    )


def downgrade() -> None:
    op.drop_table("promotions")
