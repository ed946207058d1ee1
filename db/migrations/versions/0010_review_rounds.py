"""review rounds: reviewers and roles, rounds with overlap, assignments and answers, labels; a snapshot's rule

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-08 09:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _id(table: str) -> list[sa.SchemaItem]:
    return [sa.Column("id", sa.Integer(), nullable=False), sa.PrimaryKeyConstraint("id", name=op.f(f"pk_{table}"))]


def _fk(table: str, column: str, target: str, **kw: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint([column], [f"{target}.id"], name=op.f(f"fk_{table}_{column}_{target}"), **kw)


def upgrade() -> None:
    op.create_table(
        "reviewers", *_id("reviewers"),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("role", sa.String(length=20), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("role IN ('reviewer', 'adjudicator', 'admin')", name=op.f("ck_reviewers_role_known")),
        sa.UniqueConstraint("name", name=op.f("uq_reviewers_name")),
    )
    op.create_table(
        "review_rounds", *_id("review_rounds"),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("overlap", sa.Integer(), nullable=False),
        sa.Column("blind", sa.Boolean(), nullable=False),
        sa.Column("reviewers", sa.Text(), nullable=False),
        sa.Column("selection", sa.Text(), nullable=False),
        sa.Column("opened_by", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("overlap >= 1", name=op.f("ck_review_rounds_overlap_positive")),
        sa.UniqueConstraint("name", name=op.f("uq_review_rounds_name")),
    )
    op.create_table(
        "round_items", *_id("round_items"),
        sa.Column("round_id", sa.Integer(), nullable=False),
        sa.Column("judgment_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("handed", sa.Integer(), nullable=False),
        sa.CheckConstraint("handed >= 0", name=op.f("ck_round_items_handed_sign")),
        _fk("round_items", "round_id", "review_rounds", ondelete="CASCADE"),
        _fk("round_items", "judgment_id", "judgments"),
        sa.UniqueConstraint("round_id", "judgment_id", name=op.f("uq_round_items_round_id_judgment_id")),
    )
    op.create_index(op.f("ix_round_items_round_id"), "round_items", ["round_id"])
    op.create_table(
        "assignments", *_id("assignments"),
        sa.Column("round_id", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.Integer(), nullable=False),
        sa.Column("judgment_id", sa.Integer(), nullable=False),
        sa.Column("reviewer", sa.String(length=200), nullable=False),
        sa.Column("assigned_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("verdict", sa.SmallInteger(), nullable=True),
        sa.Column("marks", sa.Text(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("answered_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("verdict IS NULL OR verdict IN (1, 2)", name=op.f("ck_assignments_verdict_is_1_or_2")),
        _fk("assignments", "round_id", "review_rounds", ondelete="CASCADE"),
        _fk("assignments", "item_id", "round_items", ondelete="CASCADE"),
        _fk("assignments", "judgment_id", "judgments"),
        sa.UniqueConstraint("round_id", "judgment_id", "reviewer",
                            name=op.f("uq_assignments_round_id_judgment_id_reviewer")),
    )
    op.create_index(op.f("ix_assignments_item_id"), "assignments", ["item_id"])
    op.create_index(op.f("ix_assignments_round_id"), "assignments", ["round_id", "reviewer"])
    op.create_table(
        "round_labels", *_id("round_labels"),
        sa.Column("round_id", sa.Integer(), nullable=False),
        sa.Column("judgment_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=12), nullable=False),
        sa.Column("verdict", sa.SmallInteger(), nullable=False),
        sa.Column("marks", sa.Text(), nullable=False),
        sa.Column("agreement", sa.Double(), nullable=False),
        sa.Column("decided_by", sa.Text(), nullable=False),
        sa.Column("overruled", sa.Text(), nullable=False),
        sa.Column("correction_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("verdict IN (1, 2)", name=op.f("ck_round_labels_verdict_is_1_or_2")),
        sa.CheckConstraint("kind IN ('agreed', 'adjudicated')", name=op.f("ck_round_labels_kind_known")),
        _fk("round_labels", "round_id", "review_rounds", ondelete="CASCADE"),
        _fk("round_labels", "judgment_id", "judgments"),
        _fk("round_labels", "correction_id", "corrections"),
        sa.UniqueConstraint("round_id", "judgment_id", name=op.f("uq_round_labels_round_id_judgment_id")),
    )
    op.create_index(op.f("ix_round_labels_correction_id"), "round_labels", ["correction_id"])
    with op.batch_alter_table("dataset_snapshots", schema=None) as batch_op:
        batch_op.add_column(sa.Column("rule", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("dataset_snapshots", schema=None) as batch_op:
        batch_op.drop_column("rule")
    for table in ("round_labels", "assignments", "round_items", "review_rounds", "reviewers"):
        op.drop_table(table)
