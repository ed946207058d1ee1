"""evaluation: runs with their config and status, per-item results, and ties on pairs

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 02:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STATES = ("running", "completed", "stopped", "failed")  # as of this revision


def upgrade() -> None:
    with op.batch_alter_table("pairs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tie", sa.Boolean(), nullable=False, server_default=sa.false()))
    # eval_runs was a placeholder no release ever wrote to: it is rebuilt with the columns a run needs.
    op.drop_table("eval_runs")
    _create_eval_runs()
    op.create_table(
        "eval_items",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.Text(), nullable=False),
        sa.Column("strategy", sa.String(length=40), nullable=False),
        sa.Column("swapped", sa.Boolean(), nullable=False),
        sa.Column("subset", sa.Text(), nullable=False),
        sa.Column("label", sa.SmallInteger(), nullable=True),
        sa.Column("tie", sa.Boolean(), nullable=False),
        sa.Column("verdict", sa.SmallInteger(), nullable=True),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("parse_failures", sa.Integer(), nullable=False),
        sa.Column("anchor_confidence", sa.Double(), nullable=True),
        sa.Column("anchor_correct", sa.Boolean(), nullable=True),
        sa.Column("skipped", sa.Text(), nullable=False),
        sa.Column("meta", sa.Text(), nullable=False),
        sa.Column("judgment_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("verdict IS NULL OR verdict IN (1, 2)", name=op.f("ck_eval_items_verdict_is_1_or_2")),
        sa.CheckConstraint("label IS NULL OR label IN (1, 2)", name=op.f("ck_eval_items_label_is_1_or_2")),
        sa.ForeignKeyConstraint(["run_id"], ["eval_runs.id"], name=op.f("fk_eval_items_run_id_eval_runs"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["judgment_id"], ["judgments.id"], name=op.f("fk_eval_items_judgment_id_judgments")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_eval_items")),
        sa.UniqueConstraint("run_id", "item_id", "strategy", "swapped",
                            name=op.f("uq_eval_items_run_id_item_id_strategy_swapped")),
    )
    with op.batch_alter_table("eval_items", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_eval_items_run_id"), ["run_id"], unique=False)


def _create_eval_runs() -> None:
    op.create_table(
        "eval_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("training_run_id", sa.Integer(), nullable=True),
        sa.Column("run_key", sa.String(length=64), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("model_revision", sa.Text(), nullable=False),
        sa.Column("benchmark", sa.Text(), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        sa.Column("partial", sa.Text(), nullable=False),
        sa.Column("config", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False, server_default="running"),
        sa.Column("items_total", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("metrics", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False, server_default=""),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(f"status IN ({', '.join(map(repr, STATES))})", name=op.f("ck_eval_runs_status_known")),
        sa.ForeignKeyConstraint(
            ["training_run_id"], ["training_runs.id"], name=op.f("fk_eval_runs_training_run_id_training_runs")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_eval_runs")),
        sa.UniqueConstraint("run_key", name=op.f("uq_eval_runs_run_key")),
    )


def downgrade() -> None:
    with op.batch_alter_table("eval_items", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_eval_items_run_id"))
    op.drop_table("eval_items")
    op.drop_table("eval_runs")
    op.create_table(  # the 0001 placeholder
        "eval_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("training_run_id", sa.Integer(), nullable=True),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("model_revision", sa.Text(), nullable=False),
        sa.Column("benchmark", sa.Text(), nullable=False),
        sa.Column("config", sa.Text(), nullable=False),
        sa.Column("metrics", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["training_run_id"], ["training_runs.id"], name=op.f("fk_eval_runs_training_run_id_training_runs")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_eval_runs")),
    )
    with op.batch_alter_table("pairs", schema=None) as batch_op:
        batch_op.drop_column("tie")
