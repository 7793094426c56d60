"""actions.episode_key: the finding's episode an action belongs to, a column of its row, so no
reader parses it back out of the idempotency key (``{episode}:{kind}`` with ``:dry_run``
appended for a dry run). Existing rows are filled in from their key; a key that does not read
that way (none was written so) keeps the whole key as its episode, as the readers did.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04 18:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The action kinds and the dry-run suffix of the keys as written up to this revision (frozen
# here: a later change of the key format must not change what this migration does).
_KINDS = frozenset({"stop", "destroy"})
_DRY_RUN_SUFFIX = ":dry_run"


def episode_of(key: str) -> str:
    """The episode of an action key written before this revision."""
    head = key.removesuffix(_DRY_RUN_SUFFIX)
    episode, _, kind = head.rpartition(":")
    return episode if episode and kind in _KINDS else key


def upgrade() -> None:
    # Nullable first so existing rows can be filled in, then NOT NULL (SQLite: move and copy).
    with op.batch_alter_table("actions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("episode_key", sa.String(length=500), nullable=True))
    actions = sa.table(
        "actions",
        sa.column("id", sa.Integer()),
        sa.column("idempotency_key", sa.String()),
        sa.column("episode_key", sa.String()),
    )
    connection = op.get_bind()
    rows = connection.execute(sa.select(actions.c.id, actions.c.idempotency_key)).all()
    if rows:
        connection.execute(
            actions.update()
            .where(actions.c.id == sa.bindparam("row_id"))
            .values(episode_key=sa.bindparam("episode")),
            [{"row_id": row_id, "episode": episode_of(key)} for row_id, key in rows],
        )
    with op.batch_alter_table("actions", schema=None) as batch_op:
        batch_op.alter_column("episode_key", existing_type=sa.String(length=500), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("actions", schema=None) as batch_op:
        batch_op.drop_column("episode_key")
