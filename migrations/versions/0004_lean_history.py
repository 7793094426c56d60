"""Lean history: probe outcomes as runs of identical outcomes (``first_at``, ``repeats``), hourly
rollups of GPU samples older than a day (``gpu_sample_rollups``), and no per-instance index on
``gpu_samples`` (40 % of the table's size; nothing reads samples by instance any more).

Existing rows stay as they are: each old probe outcome becomes a run of one probe
(``first_at = at``, ``repeats = 1``); samples are rolled up by the next prune.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 05:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "gpu_sample_rollups",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("account", sa.String(length=200), nullable=False),
        sa.Column("instance_id", sa.String(length=200), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(length=32), nullable=False),
        sa.Column("hour", sa.DateTime(), nullable=False),
        sa.Column("first_at", sa.DateTime(), nullable=False),
        sa.Column("last_at", sa.DateTime(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("busy", sa.Integer(), nullable=False),
        sa.Column("idle", sa.Integer(), nullable=False),
        sa.Column("unknown", sa.Integer(), nullable=False),
        sa.Column("sm_max", sa.Float(), nullable=True),
        sa.Column("mem_max", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpu_sample_rollups")),
    )
    with op.batch_alter_table("gpu_sample_rollups", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_gpu_sample_rollups_account_instance_id_hour"),
            ["account", "instance_id", "hour"],
            unique=False,
        )
        batch_op.create_index(batch_op.f("ix_gpu_sample_rollups_hour"), ["hour"], unique=False)

    with op.batch_alter_table("gpu_samples", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_gpu_samples_account_instance_id_at"))

    # Nullable first so existing rows can be filled in, then NOT NULL (SQLite: move and copy).
    with op.batch_alter_table("probe_outcomes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("first_at", sa.DateTime(), nullable=True))
        batch_op.add_column(sa.Column("repeats", sa.Integer(), nullable=True))
    op.execute("UPDATE probe_outcomes SET first_at = at, repeats = 1")
    with op.batch_alter_table("probe_outcomes", schema=None) as batch_op:
        batch_op.alter_column("first_at", existing_type=sa.DateTime(), nullable=False)
        batch_op.alter_column("repeats", existing_type=sa.Integer(), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("probe_outcomes", schema=None) as batch_op:
        batch_op.drop_column("repeats")
        batch_op.drop_column("first_at")

    with op.batch_alter_table("gpu_samples", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_gpu_samples_account_instance_id_at"),
            ["account", "instance_id", "at"],
            unique=False,
        )

    with op.batch_alter_table("gpu_sample_rollups", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_gpu_sample_rollups_hour"))
        batch_op.drop_index(batch_op.f("ix_gpu_sample_rollups_account_instance_id_hour"))
    op.drop_table("gpu_sample_rollups")
