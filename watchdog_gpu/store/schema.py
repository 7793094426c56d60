"""The database tables (SQLAlchemy 2 typed models).

Alembic migrations in ``migrations/versions`` create exactly these tables; a test runs
``alembic check`` to prove the two agree. Change a model → generate a migration
(``alembic revision --autogenerate -m "..."``), review it, commit both.

Conventions:
- every instant is a :class:`~watchdog_gpu.store.types.UtcDateTime` (aware UTC in, aware UTC out);
- enums are stored as their text values (``String``), never as database enums, so adding a value
  needs no migration and an unknown value read back becomes ``unknown`` instead of a crash;
- history tables (spans, audit, actions, notifications) are append-mostly and never pruned;
  GPU samples, probe outcomes, sample rollups and old account snapshots are pruned by retention
  (raw GPU samples older than a few hours are first rolled up into hourly ``gpu_sample_rollups``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from watchdog_gpu.store.types import UtcDateTime

# Names for every constraint and index, so Alembic's batch mode (SQLite "move and copy") can
# find and drop them by name in later migrations.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

ID_LENGTH = 200  # provider ids, account names, rule names
NAME_LENGTH = 500  # instance / volume names as providers print them
KIND_LENGTH = 32  # enum values and short kinds
KEY_LENGTH = 500  # idempotency and episode keys (rule:account/instance:iso-timestamp)

metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Base(DeclarativeBase):
    metadata = metadata
    type_annotation_map = {  # noqa: RUF012 - SQLAlchemy reads this class attribute
        datetime: UtcDateTime(),
        dict[str, Any]: JSON(),
        list[Any]: JSON(),
    }


class Account(Base):
    """A configured provider account, with how polling it goes."""

    __tablename__ = "accounts"

    name: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    provider: Mapped[str] = mapped_column(String(KIND_LENGTH))
    first_seen: Mapped[datetime]
    last_poll_ok_at: Mapped[datetime | None]
    last_poll_error_kind: Mapped[str | None] = mapped_column(String(KIND_LENGTH))
    last_poll_error_at: Mapped[datetime | None]
    last_poll_error_message: Mapped[str | None] = mapped_column(Text)


class AccountSnapshotRow(Base):
    """Money facts of one poll of one account."""

    __tablename__ = "account_snapshots"
    __table_args__ = (Index(None, "account", "observed_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    account: Mapped[str] = mapped_column(ForeignKey("accounts.name", ondelete="CASCADE"))
    provider: Mapped[str] = mapped_column(String(KIND_LENGTH))
    observed_at: Mapped[datetime]
    balance_usd: Mapped[float | None] = mapped_column(Float)
    spend_usd_per_hour: Mapped[float | None] = mapped_column(Float)
    spend_limit_usd_per_hour: Mapped[float | None] = mapped_column(Float)
    autopay_enabled: Mapped[bool | None] = mapped_column(Boolean)


class Instance(Base):
    """The latest snapshot of one instance, plus when it was first and last seen.

    ``state_since`` is when the current state began (the first span of the trailing run of spans
    in that state): the fleet loader uses it to load a whole current run even when it started
    before the spend period.
    """

    __tablename__ = "instances"
    __table_args__ = (
        UniqueConstraint("account", "instance_id"),
        Index(None, "state"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    account: Mapped[str] = mapped_column(ForeignKey("accounts.name", ondelete="CASCADE"))
    instance_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    provider: Mapped[str] = mapped_column(String(KIND_LENGTH))
    name: Mapped[str] = mapped_column(String(NAME_LENGTH))
    state: Mapped[str] = mapped_column(String(KIND_LENGTH))
    raw_state: Mapped[str] = mapped_column(String(ID_LENGTH))
    observed_at: Mapped[datetime]
    interruptible: Mapped[bool] = mapped_column(Boolean)
    compute_usd_per_hour: Mapped[float | None] = mapped_column(Float)
    storage_usd_per_hour: Mapped[float | None] = mapped_column(Float)
    disk_gb: Mapped[float | None] = mapped_column(Float)
    gpu_name: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    gpu_count: Mapped[int | None] = mapped_column(Integer)
    ssh_host: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    ssh_port: Mapped[int | None] = mapped_column(Integer)
    ssh_user: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    created_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    provider_gpu_util_percent: Mapped[list[Any] | None]
    public_ports: Mapped[list[Any]]
    labels: Mapped[dict[str, Any]]
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime]
    state_since: Mapped[datetime]
    # The ledger's anchor (docs/database.md): the provider's start time when the instance was
    # first seen running after it started, written once at that sighting, never updated.
    billed_from: Mapped[datetime | None]


class InstanceSpan(Base):
    """A run of identical observations (same state, same rates) of one instance."""

    __tablename__ = "instance_spans"
    __table_args__ = (
        Index(None, "instance_pk", "first_seen"),
        Index(None, "last_seen"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    instance_pk: Mapped[int] = mapped_column(ForeignKey("instances.id", ondelete="CASCADE"))
    state: Mapped[str] = mapped_column(String(KIND_LENGTH))
    raw_state: Mapped[str] = mapped_column(String(ID_LENGTH))
    compute_usd_per_hour: Mapped[float | None] = mapped_column(Float)
    storage_usd_per_hour: Mapped[float | None] = mapped_column(Float)
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime]


class ActivityMarkRow(Base):
    """A change of an instance's GPU activity (busy, idle, blind; ``activity_marks.py``) from
    ``since`` on, written by the evaluation at ``recorded_at`` only when it changed. A later row
    with an earlier ``since`` overrides the rows before it from that instant."""

    __tablename__ = "activity_marks"
    __table_args__ = (
        Index(None, "instance_pk", "since"),
        Index(None, "since"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    instance_pk: Mapped[int] = mapped_column(ForeignKey("instances.id", ondelete="CASCADE"))
    activity: Mapped[str] = mapped_column(String(KIND_LENGTH))
    since: Mapped[datetime]
    recorded_at: Mapped[datetime]


class Volume(Base):
    """The latest snapshot of a volume. ``gone_at`` is set when a complete listing no longer
    has it; ``detached_since`` is the first observation of the current detached run."""

    __tablename__ = "volumes"
    __table_args__ = (UniqueConstraint("account", "volume_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    account: Mapped[str] = mapped_column(ForeignKey("accounts.name", ondelete="CASCADE"))
    volume_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    provider: Mapped[str] = mapped_column(String(KIND_LENGTH))
    name: Mapped[str] = mapped_column(String(NAME_LENGTH))
    observed_at: Mapped[datetime]
    size_gb: Mapped[float | None] = mapped_column(Float)
    usd_per_hour: Mapped[float | None] = mapped_column(Float)
    attached: Mapped[bool | None] = mapped_column(Boolean)
    created_at: Mapped[datetime | None]
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime]
    detached_since: Mapped[datetime | None]
    gone_at: Mapped[datetime | None]


class VolumeSpan(Base):
    """A run of identical observations (attachment, rate) of one volume."""

    __tablename__ = "volume_spans"
    __table_args__ = (Index(None, "volume_pk", "first_seen"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    volume_pk: Mapped[int] = mapped_column(ForeignKey("volumes.id", ondelete="CASCADE"))
    attached: Mapped[bool | None] = mapped_column(Boolean)
    usd_per_hour: Mapped[float | None] = mapped_column(Float)
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime]


class SshKey(Base):
    """An SSH public key registered with an account (the latest complete listing)."""

    __tablename__ = "ssh_keys"
    __table_args__ = (UniqueConstraint("account", "key_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    account: Mapped[str] = mapped_column(ForeignKey("accounts.name", ondelete="CASCADE"))
    provider: Mapped[str] = mapped_column(String(KIND_LENGTH))
    key_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    name: Mapped[str] = mapped_column(String(NAME_LENGTH))
    public_key: Mapped[str] = mapped_column(Text)
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime]


class GpuSampleRow(Base):
    """One GPU's utilisation at one instant. ``None`` metrics were "-" (not available).

    Only the ``at`` index: the fleet view reads a time window (or the rows added since its last
    read, by id), prune and rollup cut by time; a per-instance index cost 40 % of the table's
    size again (see store/rollup.py).
    """

    __tablename__ = "gpu_samples"
    __table_args__ = (Index(None, "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    account: Mapped[str] = mapped_column(String(ID_LENGTH))
    instance_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    at: Mapped[datetime]
    gpu_index: Mapped[int] = mapped_column(Integer)
    verdict: Mapped[str] = mapped_column(String(KIND_LENGTH))
    source: Mapped[str] = mapped_column(String(KIND_LENGTH))
    sm: Mapped[float | None] = mapped_column(Float)
    mem: Mapped[float | None] = mapped_column(Float)
    enc: Mapped[float | None] = mapped_column(Float)
    dec: Mapped[float | None] = mapped_column(Float)
    jpg: Mapped[float | None] = mapped_column(Float)
    ofa: Mapped[float | None] = mapped_column(Float)
    # The first row of a continuous run this sample condenses (streaming probe); NULL: a point.
    covers_from: Mapped[datetime | None]


class ProbeOutcomeRow(Base):
    """How the SSH probes of one instance ended (their samples are in ``gpu_samples``).

    One row per run of identical outcomes (status, detail, interactive login, mode, and whether
    they brought samples; ``sample_count`` is the latest probe's):
    ``first_at`` is the run's first probe, ``at`` its latest, ``repeats`` how many probes it
    stands for. A probe equal to the instance's latest row extends the run by replacing that row
    with a new one (a new id, so the fleet view's cache sees it, see store/history.py); a steady
    fleet adds no rows.
    """

    __tablename__ = "probe_outcomes"
    __table_args__ = (
        Index(None, "account", "instance_id", "at"),
        Index(None, "at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    account: Mapped[str] = mapped_column(String(ID_LENGTH))
    instance_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    at: Mapped[datetime]
    status: Mapped[str] = mapped_column(String(KIND_LENGTH))
    duration_seconds: Mapped[float] = mapped_column(Float)
    detail: Mapped[str] = mapped_column(Text)
    sample_count: Mapped[int] = mapped_column(Integer)
    interactive_login: Mapped[bool | None] = mapped_column(Boolean)
    first_at: Mapped[datetime]
    repeats: Mapped[int] = mapped_column(Integer)
    mode: Mapped[str | None] = mapped_column(String(KIND_LENGTH))  # "stream" / "burst"


class GpuSampleRollupRow(Base):
    """One GPU's samples of one hour, counted by verdict: what is kept of GPU samples older than
    a day (``Store.prune``), as evidence for ``status`` and ``events``. ``unknown`` samples are
    blind time; minutes without any sample are not counted at all (``samples`` tells how much of
    the hour was observed)."""

    __tablename__ = "gpu_sample_rollups"
    __table_args__ = (
        Index(None, "account", "instance_id", "hour"),
        Index(None, "hour"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    account: Mapped[str] = mapped_column(String(ID_LENGTH))
    instance_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    gpu_index: Mapped[int] = mapped_column(Integer)
    source: Mapped[str] = mapped_column(String(KIND_LENGTH))
    hour: Mapped[datetime]
    first_at: Mapped[datetime]
    last_at: Mapped[datetime]
    samples: Mapped[int] = mapped_column(Integer)
    busy: Mapped[int] = mapped_column(Integer)
    idle: Mapped[int] = mapped_column(Integer)
    unknown: Mapped[int] = mapped_column(Integer)
    sm_max: Mapped[float | None] = mapped_column(Float)
    mem_max: Mapped[float | None] = mapped_column(Float)


class FindingRow(Base):
    """A rule's finding, one row per episode; ``first_seen``/``last_seen`` bound the ticks that
    produced it."""

    __tablename__ = "findings"
    __table_args__ = (Index(None, "last_seen"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    episode_key: Mapped[str] = mapped_column(String(KEY_LENGTH), unique=True)
    rule: Mapped[str] = mapped_column(String(ID_LENGTH))
    account: Mapped[str] = mapped_column(String(ID_LENGTH))
    instance_id: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    severity: Mapped[str] = mapped_column(String(KIND_LENGTH))
    action: Mapped[str] = mapped_column(String(KIND_LENGTH))
    summary: Mapped[str] = mapped_column(Text)
    episode_started_at: Mapped[datetime]
    due_at: Mapped[datetime]
    evidence: Mapped[dict[str, Any]]
    usd_per_hour_at_stake: Mapped[float | None] = mapped_column(Float)
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime]


class ActionOutboxRow(Base):
    """The action outbox: written before anything is called, consumed with compare-and-set."""

    __tablename__ = "actions"
    __table_args__ = (
        Index(None, "status", "next_attempt_at"),
        Index(None, "created_at"),
        Index(None, "accepted_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    idempotency_key: Mapped[str] = mapped_column(String(KEY_LENGTH), unique=True)
    # The finding's episode (``Finding.episode_key``) the action belongs to.
    episode_key: Mapped[str] = mapped_column(String(KEY_LENGTH))
    account: Mapped[str] = mapped_column(String(ID_LENGTH))
    instance_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    rule: Mapped[str] = mapped_column(String(ID_LENGTH))
    kind: Mapped[str] = mapped_column(String(KIND_LENGTH))
    dry_run: Mapped[bool] = mapped_column(Boolean)
    reason: Mapped[str] = mapped_column(Text)
    evidence: Mapped[dict[str, Any]]
    usd_per_hour_at_stake: Mapped[float | None] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(KIND_LENGTH))
    attempts: Mapped[int] = mapped_column(Integer)
    claimed_by: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    claimed_at: Mapped[datetime | None]
    claimed_from: Mapped[str | None] = mapped_column(String(KIND_LENGTH))
    next_attempt_at: Mapped[datetime | None]
    result: Mapped[str | None] = mapped_column(Text)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    # When the provider accepted the stop/destroy call (the instant taken right before it): the
    # ledger ends the instance's bill there once a listing confirmed it (fleet_loader, spend).
    accepted_at: Mapped[datetime | None]


class NotificationOutboxRow(Base):
    """The notification outbox: retried until delivered, never blocking actions."""

    __tablename__ = "notifications"
    __table_args__ = (
        Index(None, "delivered_at", "next_attempt_at"),
        Index(None, "created_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    idempotency_key: Mapped[str] = mapped_column(String(KEY_LENGTH), unique=True)
    severity: Mapped[str] = mapped_column(String(KIND_LENGTH))
    title: Mapped[str] = mapped_column(Text)
    body: Mapped[str] = mapped_column(Text)
    rule: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    account: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    instance_id: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    created_at: Mapped[datetime]
    attempts: Mapped[int] = mapped_column(Integer)
    next_attempt_at: Mapped[datetime]
    delivered_at: Mapped[datetime | None]
    last_error: Mapped[str | None] = mapped_column(Text)


class AuditEventRow(Base):
    """Append-only history of every decision and action."""

    __tablename__ = "audit_events"
    # (kind, at): the fuse check of every tick looks up the latest fuse event by kind; through
    # the ``at`` index alone it scanned the whole (never pruned) history when there was none.
    __table_args__ = (Index(None, "at"), Index(None, "kind", "at"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime]
    kind: Mapped[str] = mapped_column(String(ID_LENGTH))
    account: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    instance_id: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    rule: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    message: Mapped[str] = mapped_column(Text)
    data: Mapped[dict[str, Any]]


class ProtectionRow(Base):
    """A protection added at run time (``watchdog-gpu protect``). ``account`` NULL: any account."""

    __tablename__ = "protections"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(KIND_LENGTH))
    value: Mapped[str] = mapped_column(String(NAME_LENGTH))
    account: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    reason: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime]


class SnoozeRow(Base):
    """Destructive actions for the instance are postponed until ``until``."""

    __tablename__ = "snoozes"
    __table_args__ = (Index(None, "until"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    account: Mapped[str] = mapped_column(String(ID_LENGTH))
    instance_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    until: Mapped[datetime]
    created_at: Mapped[datetime]
    reason: Mapped[str] = mapped_column(Text)


class PinnedHostKey(Base):
    """The SSH host key first seen for an instance (accept-new). Pinned per instance id, not per
    address: rental IP:port pairs are reused across customers."""

    __tablename__ = "host_keys"
    __table_args__ = (UniqueConstraint("account", "instance_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    account: Mapped[str] = mapped_column(String(ID_LENGTH))
    instance_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    key_type: Mapped[str] = mapped_column(String(ID_LENGTH))
    key_base64: Mapped[str] = mapped_column(Text)
    first_seen: Mapped[datetime]


class LeadershipRow(Base):
    """Who leads the watchdogs sharing this database (PostgreSQL teams; docs/postgresql.md).

    One row (``id`` 1). ``epoch`` counts up at every change of leader: the leader's writes check
    it (the fencing token), so a deposed leader can no longer claim or move an action.
    ``renewed_at`` is written by the leader every tick (what ``status`` shows as its heartbeat)."""

    __tablename__ = "leadership"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    epoch: Mapped[int] = mapped_column(Integer)
    node: Mapped[str] = mapped_column(String(ID_LENGTH))
    since: Mapped[datetime]
    renewed_at: Mapped[datetime]


class JobMarkRow(Base):
    """When an engine process last finished a phase (``name``: evaluated, tick started, probed),
    written in the phase's own transaction: what one scheduled job tells another goes through
    here, read fresh, never through an attribute set before the commit."""

    __tablename__ = "job_marks"
    __table_args__ = (UniqueConstraint("process", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    process: Mapped[str] = mapped_column(String(ID_LENGTH))
    name: Mapped[str] = mapped_column(String(KIND_LENGTH))
    at: Mapped[datetime]
