"""actions.accepted_at: the instant the provider accepted a stop or destroy call (taken right
before the call), so the ledger ends the instance's bill there rather than at the verification
listing, ``verify_interval`` later (docs/safety.md, "Period spend"). Earlier rows keep NULL: their
bill ends at their verification, as it did.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05 03:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("actions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("accepted_at", sa.DateTime(), nullable=True))
        batch_op.create_index(batch_op.f("ix_actions_accepted_at"), ["accepted_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("actions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_actions_accepted_at"))
        batch_op.drop_column("accepted_at")
