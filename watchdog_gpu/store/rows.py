"""Plain frozen values the repository returns (never ORM objects: no session leaks out)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from watchdog_gpu.fleet import AccountView, ActionRecord
from watchdog_gpu.model import (
    ActionKind,
    ActionResult,
    ActionStatus,
    InstanceSnapshot,
    PlannedAction,
    PlannedNotification,
    Severity,
)
from watchdog_gpu.store.values import JsonScalar, JsonValue


@dataclass(frozen=True, slots=True)
class ActionRow:
    """One action in the outbox, with its delivery bookkeeping.

    ``status`` is an :class:`~watchdog_gpu.model.ActionStatus` value. ``claimed_from`` is the
    status the action had when it was last claimed (``pending`` for a first attempt,
    ``unverified`` for a re-verification ...), so the executor knows what to resume.
    """

    idempotency_key: str
    account: str
    instance_id: str
    rule: str
    kind: ActionKind
    dry_run: bool
    reason: str
    status: ActionStatus
    attempts: int
    created_at: datetime
    updated_at: datetime
    episode_key: str
    evidence: Mapping[str, JsonScalar] = field(default_factory=dict)
    usd_per_hour_at_stake: float | None = None
    claimed_by: str | None = None
    claimed_at: datetime | None = None
    claimed_from: ActionStatus | None = None
    next_attempt_at: datetime | None = None
    result: ActionResult | None = None
    last_error: str | None = None
    accepted_at: datetime | None = None  # when the provider accepted the call (None: not yet)

    def to_record(self) -> ActionRecord:
        """The planner's and the spend report's view of this action."""
        return ActionRecord(
            idempotency_key=self.idempotency_key,
            account=self.account,
            instance_id=self.instance_id,
            rule=self.rule,
            kind=self.kind,
            status=self.status,
            dry_run=self.dry_run,
            created_at=self.created_at,
            episode_key=self.episode_key,
            usd_per_hour_at_stake=self.usd_per_hour_at_stake,
            accepted_at=self.accepted_at,
        )

    def to_planned(self) -> PlannedAction:
        """The action as the planner enqueued it."""
        return PlannedAction(
            idempotency_key=self.idempotency_key,
            account=self.account,
            instance_id=self.instance_id,
            rule=self.rule,
            kind=self.kind,
            dry_run=self.dry_run,
            reason=self.reason,
            planned_at=self.created_at,
            episode_key=self.episode_key,
            evidence=self.evidence,
            usd_per_hour_at_stake=self.usd_per_hour_at_stake,
        )


@dataclass(frozen=True, slots=True)
class NotificationRow:
    """One notification in the outbox. ``attempts`` counts failed deliveries so far;
    ``delivered_at`` is None until a delivery worked."""

    idempotency_key: str
    severity: Severity
    title: str
    body: str
    created_at: datetime
    attempts: int
    next_attempt_at: datetime
    rule: str | None = None
    account: str | None = None
    instance_id: str | None = None
    delivered_at: datetime | None = None
    last_error: str | None = None

    @property
    def notification(self) -> PlannedNotification:
        """The message as it was enqueued."""
        return PlannedNotification(
            idempotency_key=self.idempotency_key,
            severity=self.severity,
            title=self.title,
            body=self.body,
            created_at=self.created_at,
            rule=self.rule,
            account=self.account,
            instance_id=self.instance_id,
        )


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One entry of the append-only audit history."""

    id: int
    at: datetime
    kind: str
    message: str
    account: str | None = None
    instance_id: str | None = None
    rule: str | None = None
    data: Mapping[str, JsonValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class InstanceRecord:
    """The latest snapshot of one instance with its bookkeeping (for ``status`` and metrics)."""

    snapshot: InstanceSnapshot
    first_seen: datetime
    last_seen: datetime
    state_since: datetime


@dataclass(frozen=True, slots=True)
class AccountRecord:
    """An account's latest money facts and poll status, plus the last poll error's message."""

    view: AccountView
    last_poll_error_message: str | None = None


@dataclass(frozen=True, slots=True)
class FindingRecord:
    """A recorded finding episode: the latest version of the finding and when ticks saw it."""

    episode_key: str
    rule: str
    account: str
    instance_id: str | None
    severity: Severity
    action: ActionKind
    summary: str
    episode_started_at: datetime
    due_at: datetime
    first_seen: datetime
    last_seen: datetime
    evidence: Mapping[str, JsonScalar] = field(default_factory=dict)
    usd_per_hour_at_stake: float | None = None


# A team leader's lock session silent this long is replaced by a standby (the default of
# ``[watchdog] leader_lease``; store/leadership.py).
DEFAULT_LEADER_LEASE_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class Leader:
    """Who leads the watchdogs sharing a PostgreSQL database, as the leadership row says
    (store/leadership.py)."""

    node: str
    epoch: int
    since: datetime
    renewed_at: datetime
