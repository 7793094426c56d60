"""Initial schema: accounts, instances and their history spans, volumes, SSH keys, GPU samples,
probe outcomes, findings, the action and notification outboxes, audit events, protections,
snoozes and pinned host keys.

Revision ID: 0001
Revises:
Create Date: 2026-12-02 17:13:50.052980
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "accounts",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("first_seen", sa.DateTime(), nullable=False),
        sa.Column("last_poll_ok_at", sa.DateTime(), nullable=True),
        sa.Column("last_poll_error_kind", sa.String(length=32), nullable=True),
        sa.Column("last_poll_error_at", sa.DateTime(), nullable=True),
        sa.Column("last_poll_error_message", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_accounts")),
    )
    op.create_table(
        "actions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=500), nullable=False),
        sa.Column("account", sa.String(length=200), nullable=False),
        sa.Column("instance_id", sa.String(length=200), nullable=False),
        sa.Column("rule", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("dry_run", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("usd_per_hour_at_stake", sa.Float(), nullable=True),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("claimed_by", sa.String(length=200), nullable=True),
        sa.Column("claimed_at", sa.DateTime(), nullable=True),
        sa.Column("claimed_from", sa.String(length=32), nullable=True),
        sa.Column("next_attempt_at", sa.DateTime(), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_actions")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_actions_idempotency_key")),
    )
    with op.batch_alter_table("actions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_actions_created_at"), ["created_at"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_actions_status_next_attempt_at"),
            ["status", "next_attempt_at"],
            unique=False,
        )

    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("kind", sa.String(length=200), nullable=False),
        sa.Column("account", sa.String(length=200), nullable=True),
        sa.Column("instance_id", sa.String(length=200), nullable=True),
        sa.Column("rule", sa.String(length=200), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_events")),
    )
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_audit_events_at"), ["at"], unique=False)

    op.create_table(
        "findings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("episode_key", sa.String(length=500), nullable=False),
        sa.Column("rule", sa.String(length=200), nullable=False),
        sa.Column("account", sa.String(length=200), nullable=False),
        sa.Column("instance_id", sa.String(length=200), nullable=True),
        sa.Column("severity", sa.String(length=32), nullable=False),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("episode_started_at", sa.DateTime(), nullable=False),
        sa.Column("due_at", sa.DateTime(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("usd_per_hour_at_stake", sa.Float(), nullable=True),
        sa.Column("first_seen", sa.DateTime(), nullable=False),
        sa.Column("last_seen", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_findings")),
        sa.UniqueConstraint("episode_key", name=op.f("uq_findings_episode_key")),
    )
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_findings_last_seen"), ["last_seen"], unique=False)

    op.create_table(
        "gpu_samples",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("account", sa.String(length=200), nullable=False),
        sa.Column("instance_id", sa.String(length=200), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("verdict", sa.String(length=32), nullable=False),
        sa.Column("source", sa.String(length=32), nullable=False),
        sa.Column("sm", sa.Float(), nullable=True),
        sa.Column("mem", sa.Float(), nullable=True),
        sa.Column("enc", sa.Float(), nullable=True),
        sa.Column("dec", sa.Float(), nullable=True),
        sa.Column("jpg", sa.Float(), nullable=True),
        sa.Column("ofa", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpu_samples")),
    )
    with op.batch_alter_table("gpu_samples", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_gpu_samples_account_instance_id_at"),
            ["account", "instance_id", "at"],
            unique=False,
        )
        batch_op.create_index(batch_op.f("ix_gpu_samples_at"), ["at"], unique=False)

    op.create_table(
        "host_keys",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("account", sa.String(length=200), nullable=False),
        sa.Column("instance_id", sa.String(length=200), nullable=False),
        sa.Column("key_type", sa.String(length=200), nullable=False),
        sa.Column("key_base64", sa.Text(), nullable=False),
        sa.Column("first_seen", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_host_keys")),
        sa.UniqueConstraint(
            "account", "instance_id", name=op.f("uq_host_keys_account_instance_id")
        ),
    )
    op.create_table(
        "notifications",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=500), nullable=False),
        sa.Column("severity", sa.String(length=32), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("rule", sa.String(length=200), nullable=True),
        sa.Column("account", sa.String(length=200), nullable=True),
        sa.Column("instance_id", sa.String(length=200), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(), nullable=False),
        sa.Column("delivered_at", sa.DateTime(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notifications")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_notifications_idempotency_key")),
    )
    with op.batch_alter_table("notifications", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_notifications_created_at"), ["created_at"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_notifications_delivered_at_next_attempt_at"),
            ["delivered_at", "next_attempt_at"],
            unique=False,
        )

    op.create_table(
        "probe_outcomes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("account", sa.String(length=200), nullable=False),
        sa.Column("instance_id", sa.String(length=200), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("duration_seconds", sa.Float(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("sample_count", sa.Integer(), nullable=False),
        sa.Column("interactive_login", sa.Boolean(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_probe_outcomes")),
    )
    with op.batch_alter_table("probe_outcomes", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_probe_outcomes_account_instance_id_at"),
            ["account", "instance_id", "at"],
            unique=False,
        )
        batch_op.create_index(batch_op.f("ix_probe_outcomes_at"), ["at"], unique=False)

    op.create_table(
        "protections",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("value", sa.String(length=500), nullable=False),
        sa.Column("account", sa.String(length=200), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_protections")),
    )
    op.create_table(
        "snoozes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("account", sa.String(length=200), nullable=False),
        sa.Column("instance_id", sa.String(length=200), nullable=False),
        sa.Column("until", sa.DateTime(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_snoozes")),
    )
    with op.batch_alter_table("snoozes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_snoozes_until"), ["until"], unique=False)

    op.create_table(
        "account_snapshots",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("account", sa.String(length=200), nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("observed_at", sa.DateTime(), nullable=False),
        sa.Column("balance_usd", sa.Float(), nullable=True),
        sa.Column("spend_usd_per_hour", sa.Float(), nullable=True),
        sa.Column("spend_limit_usd_per_hour", sa.Float(), nullable=True),
        sa.Column("autopay_enabled", sa.Boolean(), nullable=True),
        sa.ForeignKeyConstraint(
            ["account"],
            ["accounts.name"],
            name=op.f("fk_account_snapshots_account_accounts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_account_snapshots")),
    )
    with op.batch_alter_table("account_snapshots", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_account_snapshots_account_observed_at"),
            ["account", "observed_at"],
            unique=False,
        )

    op.create_table(
        "instances",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("account", sa.String(length=200), nullable=False),
        sa.Column("instance_id", sa.String(length=200), nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=500), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("raw_state", sa.String(length=200), nullable=False),
        sa.Column("observed_at", sa.DateTime(), nullable=False),
        sa.Column("interruptible", sa.Boolean(), nullable=False),
        sa.Column("compute_usd_per_hour", sa.Float(), nullable=True),
        sa.Column("storage_usd_per_hour", sa.Float(), nullable=True),
        sa.Column("disk_gb", sa.Float(), nullable=True),
        sa.Column("gpu_name", sa.String(length=200), nullable=True),
        sa.Column("gpu_count", sa.Integer(), nullable=True),
        sa.Column("ssh_host", sa.String(length=200), nullable=True),
        sa.Column("ssh_port", sa.Integer(), nullable=True),
        sa.Column("ssh_user", sa.String(length=200), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=True),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("provider_gpu_util_percent", sa.JSON(), nullable=True),
        sa.Column("public_ports", sa.JSON(), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("first_seen", sa.DateTime(), nullable=False),
        sa.Column("last_seen", sa.DateTime(), nullable=False),
        sa.Column("state_since", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["account"],
            ["accounts.name"],
            name=op.f("fk_instances_account_accounts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_instances")),
        sa.UniqueConstraint(
            "account", "instance_id", name=op.f("uq_instances_account_instance_id")
        ),
    )
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_instances_state"), ["state"], unique=False)

    op.create_table(
        "ssh_keys",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("account", sa.String(length=200), nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("key_id", sa.String(length=200), nullable=False),
        sa.Column("name", sa.String(length=500), nullable=False),
        sa.Column("public_key", sa.Text(), nullable=False),
        sa.Column("first_seen", sa.DateTime(), nullable=False),
        sa.Column("last_seen", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["account"],
            ["accounts.name"],
            name=op.f("fk_ssh_keys_account_accounts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ssh_keys")),
        sa.UniqueConstraint("account", "key_id", name=op.f("uq_ssh_keys_account_key_id")),
    )
    op.create_table(
        "volumes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("account", sa.String(length=200), nullable=False),
        sa.Column("volume_id", sa.String(length=200), nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=500), nullable=False),
        sa.Column("observed_at", sa.DateTime(), nullable=False),
        sa.Column("size_gb", sa.Float(), nullable=True),
        sa.Column("usd_per_hour", sa.Float(), nullable=True),
        sa.Column("attached", sa.Boolean(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=True),
        sa.Column("first_seen", sa.DateTime(), nullable=False),
        sa.Column("last_seen", sa.DateTime(), nullable=False),
        sa.Column("detached_since", sa.DateTime(), nullable=True),
        sa.Column("gone_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["account"],
            ["accounts.name"],
            name=op.f("fk_volumes_account_accounts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_volumes")),
        sa.UniqueConstraint("account", "volume_id", name=op.f("uq_volumes_account_volume_id")),
    )
    op.create_table(
        "instance_spans",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("instance_pk", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("raw_state", sa.String(length=200), nullable=False),
        sa.Column("compute_usd_per_hour", sa.Float(), nullable=True),
        sa.Column("storage_usd_per_hour", sa.Float(), nullable=True),
        sa.Column("first_seen", sa.DateTime(), nullable=False),
        sa.Column("last_seen", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["instance_pk"],
            ["instances.id"],
            name=op.f("fk_instance_spans_instance_pk_instances"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_instance_spans")),
    )
    with op.batch_alter_table("instance_spans", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_instance_spans_instance_pk_first_seen"),
            ["instance_pk", "first_seen"],
            unique=False,
        )
        batch_op.create_index(
            batch_op.f("ix_instance_spans_last_seen"), ["last_seen"], unique=False
        )

    op.create_table(
        "volume_spans",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("volume_pk", sa.Integer(), nullable=False),
        sa.Column("attached", sa.Boolean(), nullable=True),
        sa.Column("usd_per_hour", sa.Float(), nullable=True),
        sa.Column("first_seen", sa.DateTime(), nullable=False),
        sa.Column("last_seen", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["volume_pk"],
            ["volumes.id"],
            name=op.f("fk_volume_spans_volume_pk_volumes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_volume_spans")),
    )
    with op.batch_alter_table("volume_spans", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_volume_spans_volume_pk_first_seen"),
            ["volume_pk", "first_seen"],
            unique=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("volume_spans", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_volume_spans_volume_pk_first_seen"))

    op.drop_table("volume_spans")
    with op.batch_alter_table("instance_spans", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_instance_spans_last_seen"))
        batch_op.drop_index(batch_op.f("ix_instance_spans_instance_pk_first_seen"))

    op.drop_table("instance_spans")
    op.drop_table("volumes")
    op.drop_table("ssh_keys")
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_instances_state"))

    op.drop_table("instances")
    with op.batch_alter_table("account_snapshots", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_account_snapshots_account_observed_at"))

    op.drop_table("account_snapshots")
    with op.batch_alter_table("snoozes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_snoozes_until"))

    op.drop_table("snoozes")
    op.drop_table("protections")
    with op.batch_alter_table("probe_outcomes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_probe_outcomes_at"))
        batch_op.drop_index(batch_op.f("ix_probe_outcomes_account_instance_id_at"))

    op.drop_table("probe_outcomes")
    with op.batch_alter_table("notifications", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_notifications_delivered_at_next_attempt_at"))
        batch_op.drop_index(batch_op.f("ix_notifications_created_at"))

    op.drop_table("notifications")
    op.drop_table("host_keys")
    with op.batch_alter_table("gpu_samples", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_gpu_samples_at"))
        batch_op.drop_index(batch_op.f("ix_gpu_samples_account_instance_id_at"))

    op.drop_table("gpu_samples")
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_findings_last_seen"))

    op.drop_table("findings")
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_audit_events_at"))

    op.drop_table("audit_events")
    with op.batch_alter_table("actions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_actions_status_next_attempt_at"))
        batch_op.drop_index(batch_op.f("ix_actions_created_at"))

    op.drop_table("actions")
    op.drop_table("accounts")
