"""The action and notification outboxes (functions over an open session).

Both are consumed with compare-and-set: a claim is ``UPDATE ... WHERE id = :id AND status =
:expected`` and counts only when exactly one row changed, so two executors (threads or
processes) never own the same action, and a crash at any point leaves a row another run can
resume. Idempotency keys are UNIQUE: enqueueing the same key twice is a no-op.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, and_, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from watchdog_gpu.model import ActionResult, ActionStatus, PlannedAction, PlannedNotification
from watchdog_gpu.store import convert
from watchdog_gpu.store.rows import ActionRow, NotificationRow
from watchdog_gpu.store.schema import ActionOutboxRow, NotificationOutboxRow

MAX_ERROR_LENGTH = 2000


def changed_rows(result: Any) -> int:
    """How many rows an UPDATE or DELETE changed."""
    return int(cast(CursorResult[Any], result).rowcount)


def _insert_unless_present(session: Session, row: ActionOutboxRow | NotificationOutboxRow) -> bool:
    model = type(row)
    exists = session.scalar(
        select(func.count()).select_from(model).where(model.idempotency_key == row.idempotency_key)
    )
    if exists:
        return False
    try:
        # A savepoint, so that losing an insert race to another process does not abort the
        # caller's transaction.
        with session.begin_nested():
            session.add(row)
    except IntegrityError:
        return False
    return True


def enqueue_action(session: Session, action: PlannedAction, status: str) -> bool:
    """Insert ``action`` with ``status``; False when its idempotency key is already there."""
    return _insert_unless_present(
        session,
        ActionOutboxRow(
            idempotency_key=action.idempotency_key,
            episode_key=action.episode_key,
            account=action.account,
            instance_id=action.instance_id,
            rule=action.rule,
            kind=action.kind.value,
            dry_run=action.dry_run,
            reason=action.reason,
            evidence=dict(action.evidence),
            usd_per_hour_at_stake=action.usd_per_hour_at_stake,
            status=ActionStatus(status).value,
            attempts=0,
            created_at=action.planned_at,
            updated_at=action.planned_at,
        ),
    )


def claim_actions(
    session: Session,
    *,
    now: datetime,
    claimer: str,
    limit: int,
    statuses: tuple[str, ...],
    reclaim_stale_after: timedelta | None,
) -> list[ActionRow]:
    """See ``Store.claim_actions``."""
    table = ActionOutboxRow
    due = or_(table.next_attempt_at.is_(None), table.next_attempt_at <= now)
    claimable = and_(table.status.in_(statuses), due)
    stale_before = now - reclaim_stale_after if reclaim_stale_after is not None else None
    if stale_before is not None:
        stale = and_(table.status == ActionStatus.CLAIMED.value, table.claimed_at <= stale_before)
        claimable = or_(claimable, stale)
    candidates = session.execute(
        select(table.id, table.status)
        .where(claimable)
        .order_by(table.created_at, table.id)
        .limit(limit)
    ).all()
    claimed: list[int] = []
    for row_id, status in candidates:
        values: dict[str, Any] = {
            "status": ActionStatus.CLAIMED.value,
            "claimed_by": claimer,
            "claimed_at": now,
            "attempts": table.attempts + 1,
            "updated_at": now,
        }
        condition = and_(table.id == row_id, table.status == status)
        if status == ActionStatus.CLAIMED.value:
            # Reclaiming after a crash: keep claimed_from, it says what to resume.
            condition = and_(condition, table.claimed_at <= stale_before)
        else:
            values["claimed_from"] = status
        result = session.execute(
            update(table)
            .where(condition)
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        if changed_rows(result) == 1:
            claimed.append(row_id)
    if not claimed:
        return []
    rows = session.scalars(
        select(table).where(table.id.in_(claimed)).order_by(table.created_at, table.id)
    )
    return [convert.action_row(row) for row in rows]


def transition_action(
    session: Session,
    key: str,
    *,
    expected_status: str,
    new_status: str,
    now: datetime,
    result: ActionResult | None,
    last_error: str | None,
    next_attempt_at: datetime | None,
    accepted_at: datetime | None = None,
) -> bool:
    """See ``Store.transition_action``."""
    values: dict[str, Any] = {"status": ActionStatus(new_status).value, "updated_at": now}
    if result is not None:
        values["result"] = ActionResult(result).value
    if last_error is not None:
        values["last_error"] = last_error[:MAX_ERROR_LENGTH]
    if next_attempt_at is not None:
        values["next_attempt_at"] = next_attempt_at
    if accepted_at is not None:
        values["accepted_at"] = accepted_at
    outcome = session.execute(
        update(ActionOutboxRow)
        .where(
            ActionOutboxRow.idempotency_key == key,
            ActionOutboxRow.status == ActionStatus(expected_status).value,
        )
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return changed_rows(outcome) == 1


def cancel_blocked_actions(session: Session, now: datetime) -> int:
    """Mark every fuse-blocked action ``cancelled``; returns how many."""
    result = session.execute(
        update(ActionOutboxRow)
        .where(ActionOutboxRow.status == ActionStatus.BLOCKED.value)
        .values(
            status=ActionStatus.CANCELLED.value,
            updated_at=now,
            result=ActionResult.FUSE_RESET.value,
        )
        .execution_options(synchronize_session=False)
    )
    return changed_rows(result)


def get_action(session: Session, key: str) -> ActionRow | None:
    row = session.scalar(select(ActionOutboxRow).where(ActionOutboxRow.idempotency_key == key))
    return convert.action_row(row) if row is not None else None


def list_actions(
    session: Session, statuses: tuple[str, ...] | None, since: datetime | None
) -> list[ActionRow]:
    query = select(ActionOutboxRow)
    if statuses is not None:
        query = query.where(ActionOutboxRow.status.in_(statuses))
    if since is not None:
        query = query.where(ActionOutboxRow.created_at >= since)
    query = query.order_by(ActionOutboxRow.created_at, ActionOutboxRow.id)
    return [convert.action_row(row) for row in session.scalars(query)]


def enqueue_notification(session: Session, notification: PlannedNotification) -> bool:
    """Insert ``notification``, due at once; False when its idempotency key is already there."""
    return _insert_unless_present(
        session,
        NotificationOutboxRow(
            idempotency_key=notification.idempotency_key,
            severity=notification.severity.value,
            title=notification.title,
            body=notification.body,
            rule=notification.rule,
            account=notification.account,
            instance_id=notification.instance_id,
            created_at=notification.created_at,
            attempts=0,
            next_attempt_at=notification.created_at,
        ),
    )


def claim_due_notifications(
    session: Session, *, now: datetime, limit: int, lease: timedelta
) -> list[NotificationRow]:
    """See ``Store.claim_due_notifications``."""
    table = NotificationOutboxRow
    candidates = session.execute(
        select(table.id, table.next_attempt_at)
        .where(table.delivered_at.is_(None), table.next_attempt_at <= now)
        .order_by(table.next_attempt_at, table.id)
        .limit(limit)
    ).all()
    claimed: list[int] = []
    for row_id, due_at in candidates:
        result = session.execute(
            update(table)
            .where(
                table.id == row_id, table.next_attempt_at == due_at, table.delivered_at.is_(None)
            )
            .values(next_attempt_at=now + lease)
            .execution_options(synchronize_session=False)
        )
        if changed_rows(result) == 1:
            claimed.append(row_id)
    if not claimed:
        return []
    rows = session.scalars(
        select(table).where(table.id.in_(claimed)).order_by(table.created_at, table.id)
    )
    return [convert.notification_row(row) for row in rows]


def mark_notification_delivered(session: Session, key: str, now: datetime) -> bool:
    result = session.execute(
        update(NotificationOutboxRow)
        .where(
            NotificationOutboxRow.idempotency_key == key,
            NotificationOutboxRow.delivered_at.is_(None),
        )
        .values(delivered_at=now, last_error=None)
        .execution_options(synchronize_session=False)
    )
    return changed_rows(result) == 1


def mark_notification_failed(
    session: Session, key: str, error: str, next_attempt_at: datetime
) -> bool:
    result = session.execute(
        update(NotificationOutboxRow)
        .where(
            NotificationOutboxRow.idempotency_key == key,
            NotificationOutboxRow.delivered_at.is_(None),
        )
        .values(
            last_error=error[:MAX_ERROR_LENGTH],
            next_attempt_at=next_attempt_at,
            attempts=NotificationOutboxRow.attempts + 1,
        )
        .execution_options(synchronize_session=False)
    )
    return changed_rows(result) == 1


def notification_backlog(session: Session) -> int:
    count = session.scalar(
        select(func.count())
        .select_from(NotificationOutboxRow)
        .where(NotificationOutboxRow.delivered_at.is_(None))
    )
    return int(count or 0)


def get_notification(session: Session, key: str) -> NotificationRow | None:
    row = session.scalar(
        select(NotificationOutboxRow).where(NotificationOutboxRow.idempotency_key == key)
    )
    return convert.notification_row(row) if row is not None else None
