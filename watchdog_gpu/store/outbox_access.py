"""The Store's action and notification outboxes, the decisions and executor steps that write
to them atomically with their audit event, the blast-radius fuse, and the audit history."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from sqlalchemy import select

from watchdog_gpu.model import ActionResult, ActionStatus, PlannedAction, PlannedNotification
from watchdog_gpu.store import convert, decisions, outbox
from watchdog_gpu.store.rows import ActionRow, AuditEvent, NotificationRow
from watchdog_gpu.store.schema import AuditEventRow
from watchdog_gpu.store.transactions import StoreBase
from watchdog_gpu.store.types import JsonValue
from watchdog_gpu.store.values import FUSE_RESET, FUSE_TRIPPED

logger = logging.getLogger(__name__)

DEFAULT_NOTIFICATION_LEASE = timedelta(minutes=5)


class OutboxAccess(StoreBase):
    """What the planner enqueues, the executor and the notifier claim, and the audit keeps."""

    # -- action outbox --------------------------------------------------------------------

    def enqueue_action(self, action: PlannedAction, status: str = ActionStatus.PENDING) -> bool:
        """Write ``action`` to the outbox with ``status`` (an ActionStatus value: ``dry_run``
        and ``blocked`` record an action that will not run). Returns False, changing nothing,
        when its idempotency key is already there."""
        with self._transaction(write=True) as session:
            return outbox.enqueue_action(session, action, status)

    def claim_actions(
        self,
        now: datetime,
        claimer: str,
        limit: int = 10,
        statuses: Sequence[str] = (ActionStatus.PENDING,),
        *,
        reclaim_stale_after: timedelta | None = None,
    ) -> list[ActionRow]:
        """Claim up to ``limit`` actions whose status is in ``statuses`` and whose
        ``next_attempt_at`` is unset or due, oldest first: each becomes ``claimed`` by
        ``claimer`` (``claimed_from`` keeps the status it had, ``attempts`` counts up) through a
        compare-and-set, so concurrent claimers never get the same action. With
        ``reclaim_stale_after``, actions left ``claimed`` longer than that (a crashed executor)
        are claimed again too. Returns the claimed rows."""
        with self._transaction(write=True) as session:
            return outbox.claim_actions(
                session,
                now=now,
                claimer=claimer,
                limit=limit,
                statuses=tuple(ActionStatus(status).value for status in statuses),
                reclaim_stale_after=reclaim_stale_after,
            )

    def transition_action(
        self,
        key: str,
        expected_status: str,
        new_status: str,
        now: datetime,
        *,
        result: ActionResult | None = None,
        last_error: str | None = None,
        next_attempt_at: datetime | None = None,
    ) -> bool:
        """Move the action ``key`` from ``expected_status`` to ``new_status`` (compare-and-set):
        False, changing nothing, when it is not in ``expected_status``. Fields given (not None)
        are set too; ``next_attempt_at`` makes a retry wait."""
        with self._transaction(write=True) as session:
            return outbox.transition_action(
                session,
                key,
                expected_status=expected_status,
                new_status=new_status,
                now=now,
                result=result,
                last_error=last_error,
                next_attempt_at=next_attempt_at,
            )

    def get_action(self, key: str) -> ActionRow | None:
        with self._transaction(write=False) as session:
            return outbox.get_action(session, key)

    def list_actions(
        self, statuses: Sequence[str] | None = None, since: datetime | None = None
    ) -> list[ActionRow]:
        """Actions (with a status in ``statuses``, created at or after ``since``), oldest first."""
        wanted = None if statuses is None else tuple(ActionStatus(s).value for s in statuses)
        with self._transaction(write=False) as session:
            return outbox.list_actions(session, wanted, since)

    # -- notification outbox --------------------------------------------------------------

    def enqueue_notification(self, notification: PlannedNotification) -> bool:
        """Write ``notification`` to the outbox, due at its ``created_at``. Returns False,
        changing nothing, when its idempotency key is already there."""
        with self._transaction(write=True) as session:
            return outbox.enqueue_notification(session, notification)

    def claim_due_notifications(
        self, now: datetime, limit: int = 50, *, lease: timedelta = DEFAULT_NOTIFICATION_LEASE
    ) -> list[NotificationRow]:
        """Claim up to ``limit`` undelivered notifications that are due, oldest first.

        A claim pushes ``next_attempt_at`` to ``now + lease`` (compare-and-set): nobody else
        gets it meanwhile, and if the claimer dies it is due again after the lease (delivery is
        at least once). Mark each delivered or failed afterwards.
        """
        with self._transaction(write=True) as session:
            return outbox.claim_due_notifications(session, now=now, limit=limit, lease=lease)

    def mark_notification_delivered(self, key: str, now: datetime) -> None:
        """Record delivery (a no-op when unknown or already delivered)."""
        with self._transaction(write=True) as session:
            outbox.mark_notification_delivered(session, key, now)

    def mark_notification_failed(
        self, key: str, now: datetime, error: str, next_attempt_at: datetime
    ) -> None:
        """Count a failed delivery (``attempts`` + 1, ``last_error``); it is due again at
        ``next_attempt_at`` (not before ``now``). A no-op when unknown or already delivered."""
        with self._transaction(write=True) as session:
            outbox.mark_notification_failed(session, key, error, max(now, next_attempt_at))

    def get_notification(self, key: str) -> NotificationRow | None:
        with self._transaction(write=False) as session:
            return outbox.get_notification(session, key)

    def notification_backlog(self) -> int:
        """How many notifications are not delivered yet."""
        with self._transaction(write=False) as session:
            return outbox.notification_backlog(session)

    # -- decisions and executor steps (atomic with their audit event and message) -----------

    def record_decision(
        self,
        now: datetime,
        *,
        audit_kind: str,
        message: str,
        action: PlannedAction | None = None,
        action_status: str = ActionStatus.PENDING,
        notification: PlannedNotification | None = None,
        account: str | None = None,
        instance_id: str | None = None,
        rule: str | None = None,
        data: Mapping[str, JsonValue] | None = None,
    ) -> bool:
        """Enqueue an action and/or a notification and, if either is new, its audit event, in
        one transaction. False (nothing written) when an earlier tick recorded it already."""
        with self._transaction(write=True) as session:
            return decisions.record_decision(
                session,
                now,
                audit_kind=audit_kind,
                message=message,
                action=action,
                action_status=ActionStatus(action_status).value,
                notification=notification,
                account=account,
                instance_id=instance_id,
                rule=rule,
                data=data,
            )

    def record_action_step(
        self,
        key: str,
        expected_status: str,
        new_status: str,
        now: datetime,
        *,
        audit_kind: str,
        message: str,
        data: Mapping[str, JsonValue] | None = None,
        notification: PlannedNotification | None = None,
        result: ActionResult | None = None,
        last_error: str | None = None,
        next_attempt_at: datetime | None = None,
        accepted_at: datetime | None = None,
    ) -> bool:
        """Compare-and-set ``key`` to ``new_status`` and, if it moved, append the audit event
        and enqueue ``notification`` in the same transaction. ``accepted_at``: when the
        provider accepted the call (recorded with the step that says so)."""
        with self._transaction(write=True) as session:
            row = outbox.get_action(session, key)
            if row is None:
                return False
            return decisions.record_action_step(
                session,
                key,
                ActionStatus(expected_status).value,
                ActionStatus(new_status).value,
                now,
                audit_kind=audit_kind,
                message=message,
                account=row.account,
                instance_id=row.instance_id,
                rule=row.rule,
                data=data,
                notification=notification,
                result=result,
                last_error=last_error,
                next_attempt_at=next_attempt_at,
                accepted_at=accepted_at,
            )

    def fuse_latched(self) -> bool:
        """True while the blast-radius fuse is tripped and no human has reset it."""
        with self._transaction(write=False) as session:
            return decisions.fuse_latched(session)

    def record_fuse_trip(
        self, now: datetime, reason: str, notification: PlannedNotification
    ) -> None:
        """Latch the fuse: audit event and critical message together."""
        with self._transaction(write=True) as session:
            if decisions.fuse_latched(session):
                return
            outbox.enqueue_notification(session, notification)
            decisions.append_audit(
                session,
                now,
                FUSE_TRIPPED,
                reason,
                account=None,
                instance_id=None,
                rule=None,
                data=None,
            )

    def reset_fuse(self, now: datetime, who: str = "cli") -> int:
        """A human resets the fuse: the latch clears and fuse-blocked actions are cancelled (the
        planner re-plans them from fresh findings, so nothing stale is executed). Returns how
        many actions were cancelled."""
        with self._transaction(write=True) as session:
            cancelled = outbox.cancel_blocked_actions(session, now)
            decisions.append_audit(
                session,
                now,
                FUSE_RESET,
                f"fuse reset by {who}; {cancelled} blocked actions cancelled",
                account=None,
                instance_id=None,
                rule=None,
                data={"cancelled": cancelled},
            )
            return cancelled

    # -- audit ----------------------------------------------------------------------------

    def add_audit_event(
        self,
        kind: str,
        now: datetime,
        *,
        account: str | None = None,
        instance_id: str | None = None,
        rule: str | None = None,
        message: str = "",
        data: Mapping[str, JsonValue] | None = None,
    ) -> None:
        """Append an event to the audit history (``data`` must be JSON-serialisable)."""
        with self._transaction(write=True) as session:
            decisions.append_audit(
                session,
                now,
                kind,
                message,
                account=account,
                instance_id=instance_id,
                rule=rule,
                data=data,
            )

    def list_audit_events(
        self,
        since: datetime | None = None,
        limit: int | None = None,
        *,
        account: str | None = None,
        instance_id: str | None = None,
    ) -> list[AuditEvent]:
        """Audit events (at or after ``since``, of ``account``/``instance_id``), oldest first;
        with ``limit``, the most recent ``limit`` of them."""
        query = select(AuditEventRow)
        if since is not None:
            query = query.where(AuditEventRow.at >= since)
        if account is not None:
            query = query.where(AuditEventRow.account == account)
        if instance_id is not None:
            query = query.where(AuditEventRow.instance_id == instance_id)
        query = query.order_by(AuditEventRow.at.desc(), AuditEventRow.id.desc())
        if limit is not None:
            query = query.limit(limit)
        with self._transaction(write=False) as session:
            events = [convert.audit_event(row) for row in session.scalars(query)]
        events.reverse()
        return events
