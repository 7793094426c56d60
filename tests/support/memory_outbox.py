"""An in-memory notification outbox with the semantics of ``watchdog_gpu.store.Store``'s (due =
undelivered and ``next_attempt_at <= now``; a claim leases the message; a failure counts),
for tests of delivery logic that do not need SQLite."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from watchdog_gpu.model import PlannedNotification

LEASE = timedelta(minutes=5)


@dataclass(slots=True)
class QueuedNotification:
    notification: PlannedNotification
    attempts: int
    next_attempt_at: datetime
    delivered_at: datetime | None = None
    last_error: str | None = None


class MemoryOutbox:
    def __init__(self) -> None:
        self.rows: dict[str, QueuedNotification] = {}

    def enqueue(self, notification: PlannedNotification) -> None:
        """Idempotent, like the store: a key already queued is not queued twice."""
        self.rows.setdefault(
            notification.idempotency_key,
            QueuedNotification(notification, 0, notification.created_at),
        )

    def claim_due_notifications(self, now: datetime, limit: int) -> list[QueuedNotification]:
        due = [
            row
            for row in self.rows.values()
            if row.delivered_at is None and row.next_attempt_at <= now
        ]
        due.sort(key=lambda row: row.notification.created_at)
        for row in due[:limit]:
            row.next_attempt_at = now + LEASE
        return due[:limit]

    def mark_notification_delivered(self, key: str, now: datetime) -> None:
        self.rows[key].delivered_at = now

    def mark_notification_failed(
        self, key: str, now: datetime, error: str, next_attempt_at: datetime
    ) -> None:
        row = self.rows[key]
        row.attempts += 1
        row.last_error = error
        row.next_attempt_at = next_attempt_at
