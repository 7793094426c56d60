"""Atomic "decide and record" writes: an outbox change, its audit event and its notification in
one transaction (functions over an open session; ``Store`` exposes them).

Record first, act second only holds if what is recorded together is written together: a crash
between enqueueing an action and appending its audit event would either lose the event (the key
exists, so the next tick never writes it) or duplicate it. These functions make each decision and
each executor step all-or-nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from watchdog_gpu.model import ActionResult, ActionStatus, PlannedAction, PlannedNotification
from watchdog_gpu.store import outbox
from watchdog_gpu.store.schema import AuditEventRow
from watchdog_gpu.store.types import JsonValue
from watchdog_gpu.store.values import FUSE_RESET, FUSE_TRIPPED


def append_audit(
    session: Session,
    now: datetime,
    kind: str,
    message: str,
    *,
    account: str | None,
    instance_id: str | None,
    rule: str | None,
    data: Mapping[str, JsonValue] | None,
) -> None:
    session.add(
        AuditEventRow(
            at=now,
            kind=kind,
            account=account,
            instance_id=instance_id,
            rule=rule,
            message=message,
            data=dict(data or {}),
        )
    )


def record_decision(
    session: Session,
    now: datetime,
    *,
    audit_kind: str,
    message: str,
    action: PlannedAction | None = None,
    action_status: str = "pending",
    notification: PlannedNotification | None = None,
    account: str | None = None,
    instance_id: str | None = None,
    rule: str | None = None,
    data: Mapping[str, JsonValue] | None = None,
) -> bool:
    """Enqueue ``action`` (with ``action_status``) and/or ``notification`` and, when either was
    new, append the audit event. Returns whether anything was new (False: an earlier tick
    already recorded this decision, and nothing is written)."""
    new = False
    if action is not None:
        new = outbox.enqueue_action(session, action, action_status)
        if not new and action_status == ActionStatus.PENDING.value:
            # A cancelled action (fuse reset, or its condition cleared before the call) that the
            # planner decides again on fresh data runs again under the same key.
            new = outbox.transition_action(
                session,
                action.idempotency_key,
                expected_status=ActionStatus.CANCELLED.value,
                new_status=ActionStatus.PENDING.value,
                now=now,
                result=ActionResult.REPLANNED,
                last_error=None,
                next_attempt_at=now,
            )
    if notification is not None:
        new = outbox.enqueue_notification(session, notification) or new
    if new:
        append_audit(
            session,
            now,
            audit_kind,
            message,
            account=account,
            instance_id=instance_id,
            rule=rule,
            data=data,
        )
    return new


def record_action_step(
    session: Session,
    key: str,
    expected_status: str,
    new_status: str,
    now: datetime,
    *,
    audit_kind: str,
    message: str,
    account: str | None,
    instance_id: str | None,
    rule: str | None,
    data: Mapping[str, JsonValue] | None = None,
    notification: PlannedNotification | None = None,
    result: ActionResult | None = None,
    last_error: str | None = None,
    next_attempt_at: datetime | None = None,
    accepted_at: datetime | None = None,
) -> bool:
    """Move action ``key`` from ``expected_status`` to ``new_status`` (compare-and-set) and, if it
    moved, append the audit event and enqueue ``notification`` in the same transaction."""
    moved = outbox.transition_action(
        session,
        key,
        expected_status=expected_status,
        new_status=new_status,
        now=now,
        result=result,
        last_error=last_error,
        next_attempt_at=next_attempt_at,
        accepted_at=accepted_at,
    )
    if not moved:
        return False
    append_audit(
        session,
        now,
        audit_kind,
        message,
        account=account,
        instance_id=instance_id,
        rule=rule,
        data=data,
    )
    if notification is not None:
        outbox.enqueue_notification(session, notification)
    return True


def fuse_latched(session: Session) -> bool:
    """True when the latest fuse event is a trip (no human reset it since)."""
    latest = session.scalar(
        select(AuditEventRow.kind)
        .where(AuditEventRow.kind.in_((FUSE_TRIPPED, FUSE_RESET)))
        .order_by(AuditEventRow.at.desc(), AuditEventRow.id.desc())
        .limit(1)
    )
    return latest == FUSE_TRIPPED
