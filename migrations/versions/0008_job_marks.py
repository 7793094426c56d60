"""job_marks: when an engine process last evaluated, started a tick or probed, recorded in that
phase's transaction, so the act and wake jobs read it fresh from the store.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04 21:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "job_marks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("process", sa.String(length=200), nullable=False),
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_marks")),
        sa.UniqueConstraint("process", "name", name=op.f("uq_job_marks_process_name")),
    )


def downgrade() -> None:
    op.drop_table("job_marks")
