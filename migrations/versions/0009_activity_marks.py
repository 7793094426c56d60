"""activity_marks: each instance's GPU activity (busy, idle, blind) as the idle rule's clock
judged it, one row per change, so the spend report can split billed GPU-hours and dollars by
activity long after the raw samples are pruned.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05 00:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "activity_marks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("instance_pk", sa.Integer(), nullable=False),
        sa.Column("activity", sa.String(length=32), nullable=False),
        sa.Column("since", sa.DateTime(), nullable=False),
        sa.Column("recorded_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["instance_pk"],
            ["instances.id"],
            name=op.f("fk_activity_marks_instance_pk_instances"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_activity_marks")),
    )
    with op.batch_alter_table("activity_marks", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_activity_marks_instance_pk_since"),
            ["instance_pk", "since"],
            unique=False,
        )
        batch_op.create_index(batch_op.f("ix_activity_marks_since"), ["since"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("activity_marks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_activity_marks_since"))
        batch_op.drop_index(batch_op.f("ix_activity_marks_instance_pk_since"))
    op.drop_table("activity_marks")
