"""gpu_samples.covers_from: a sample condensed from a continuous run of streamed dmon rows
remembers the run's first row, so the idle clock counts exactly the seconds that were observed
(docs/safety.md, "Blind time and the idle clock"). NULL for every existing (point) sample.
probe_outcomes.mode: "stream" or "burst", how the host was probed (``status`` shows it).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 04:50:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("gpu_samples", schema=None) as batch_op:
        batch_op.add_column(sa.Column("covers_from", sa.DateTime(), nullable=True))
    with op.batch_alter_table("probe_outcomes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("mode", sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("probe_outcomes", schema=None) as batch_op:
        batch_op.drop_column("mode")
    with op.batch_alter_table("gpu_samples", schema=None) as batch_op:
        batch_op.drop_column("covers_from")
