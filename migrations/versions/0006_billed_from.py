"""instances.billed_from: the ledger's anchor — what an instance billed before its first
sighting starts at the provider's start time recorded once, at that sighting, so a later stop or
restart (which clears or moves the provider's start time) never takes spend back out of its
period (docs/safety.md, "Period spend"). Existing running instances are anchored at the start
time they hold now, as the old computation did.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04 19:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.add_column(sa.Column("billed_from", sa.DateTime(), nullable=True))
    op.execute(
        "UPDATE instances SET billed_from = started_at "
        "WHERE state = 'running' AND started_at IS NOT NULL AND started_at < first_seen"
    )


def downgrade() -> None:
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_column("billed_from")
