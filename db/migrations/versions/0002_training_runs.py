"""training runs: the run folder, step, error and log; a known status

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 05:12:47.406555
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STATES = ("starting", "running", "completed", "cancelled", "failed", "interrupted")  # as of this revision


def upgrade() -> None:
    # Rows of the 0001 placeholder (none were ever written by reflectrm) get a run folder named after their id,
    # so the new unique column can be filled; server defaults fill the other new NOT NULL columns.
    with op.batch_alter_table("training_runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("run_dir", sa.Text(), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("step", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("total_steps", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("error", sa.Text(), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("log_tail", sa.Text(), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE training_runs SET run_dir = 'placeholder-' || CAST(id AS TEXT)")
    op.execute(f"UPDATE training_runs SET status = 'failed' WHERE status NOT IN ({', '.join(map(repr, STATES))})")
    with op.batch_alter_table("training_runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_training_runs_status"), ["status"], unique=False)
        batch_op.create_unique_constraint(batch_op.f("uq_training_runs_run_dir"), ["run_dir"])
        batch_op.create_check_constraint(
            batch_op.f("ck_training_runs_status_known"), f"status IN ({', '.join(map(repr, STATES))})"
        )


def downgrade() -> None:
    with op.batch_alter_table("training_runs", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("ck_training_runs_status_known"), type_="check")
        batch_op.drop_constraint(batch_op.f("uq_training_runs_run_dir"), type_="unique")
        batch_op.drop_index(batch_op.f("ix_training_runs_status"))
        batch_op.drop_column("updated_at")
        batch_op.drop_column("log_tail")
        batch_op.drop_column("error")
        batch_op.drop_column("total_steps")
        batch_op.drop_column("step")
        batch_op.drop_column("run_dir")
