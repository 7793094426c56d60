"""The Store's protections and snoozes: what keeps the watchdog's hands off an instance."""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from watchdog_gpu.fleet import Protection, ProtectionKind, Snooze
from watchdog_gpu.store import convert
from watchdog_gpu.store.schema import ProtectionRow, SnoozeRow
from watchdog_gpu.store.transactions import StoreBase

logger = logging.getLogger(__name__)


class ProtectionAccess(StoreBase):
    """Protections (by label, id, ...) and time-bound snoozes of destructive actions."""

    def add_protection(
        self,
        kind: ProtectionKind,
        value: str,
        now: datetime,
        *,
        account: str | None = None,
        reason: str = "",
    ) -> bool:
        """Protect instances matching ``kind``/``value`` (narrowed to ``account`` if given).
        False when the same protection exists already."""
        with self._transaction(write=True) as session:
            if _find_protection(session, kind, value, account) is not None:
                return False
            session.add(
                ProtectionRow(
                    kind=kind.value, value=value, account=account, reason=reason, created_at=now
                )
            )
            return True

    def remove_protection(
        self, kind: ProtectionKind, value: str, *, account: str | None = None
    ) -> bool:
        """Remove a protection; False when there was none."""
        with self._transaction(write=True) as session:
            row = _find_protection(session, kind, value, account)
            if row is None:
                return False
            session.delete(row)
            return True

    def list_protections(self) -> list[Protection]:
        with self._transaction(write=False) as session:
            rows = session.scalars(select(ProtectionRow).order_by(ProtectionRow.id))
            return [convert.protection(row) for row in rows]

    def add_snooze(
        self, account: str, instance_id: str, until: datetime, now: datetime, reason: str = ""
    ) -> Snooze:
        """Postpone destructive actions for the instance until ``until`` (the caller bounds it
        by the configured maximum). Raises ValueError when ``until`` is not after ``now``."""
        if until <= now:
            raise ValueError("a snooze must end after now")
        with self._transaction(write=True) as session:
            row = SnoozeRow(
                account=account, instance_id=instance_id, until=until, created_at=now, reason=reason
            )
            session.add(row)
            return convert.snooze(row)

    def list_snoozes(self, now: datetime) -> list[Snooze]:
        """The snoozes still active at ``now``."""
        with self._transaction(write=False) as session:
            rows = session.scalars(
                select(SnoozeRow).where(SnoozeRow.until > now).order_by(SnoozeRow.id)
            )
            return [convert.snooze(row) for row in rows]


def _find_protection(
    session: Session, kind: ProtectionKind, value: str, account: str | None
) -> ProtectionRow | None:
    account_matches = (
        ProtectionRow.account.is_(None) if account is None else ProtectionRow.account == account
    )
    return session.scalar(
        select(ProtectionRow).where(
            ProtectionRow.kind == kind.value, ProtectionRow.value == value, account_matches
        )
    )
