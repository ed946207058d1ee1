"""evaluation runs: an "interrupted" status (a run the app was stopped under, marked at the next start)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02 23:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BEFORE = ("running", "completed", "stopped", "failed")  # 0005 and 0006
STATES = (*BEFORE, "interrupted")  # as of this revision


def _status_check(states: Sequence[str]) -> None:
    with op.batch_alter_table("eval_runs", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("ck_eval_runs_status_known"), type_="check")
        batch_op.create_check_constraint(batch_op.f("ck_eval_runs_status_known"),
                                         f"status IN ({', '.join(map(repr, states))})")


def upgrade() -> None:
    _status_check(STATES)


def downgrade() -> None:
    op.execute("UPDATE eval_runs SET status = 'stopped' WHERE status = 'interrupted'")
    _status_check(BEFORE)
