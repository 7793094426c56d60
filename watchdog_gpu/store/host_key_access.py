"""The Store's pinned SSH host keys (accept-new: the first key seen for an instance wins)."""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy import and_, select
from sqlalchemy.orm import Session

from watchdog_gpu.store.schema import PinnedHostKey
from watchdog_gpu.store.transactions import StoreBase

logger = logging.getLogger(__name__)


class HostKeyAccess(StoreBase):
    """The SSH host key pinned for each instance the prober reached."""

    def get_pinned_host_key(self, account: str, instance_id: str) -> tuple[str, str] | None:
        """``(key_type, key_base64)`` pinned for the instance, or None."""
        with self._transaction(write=False) as session:
            row = _find_host_key(session, account, instance_id)
            return (row.key_type, row.key_base64) if row is not None else None

    def pinned_host_keys(self) -> dict[tuple[str, str], tuple[str, str]]:
        """Every pinned key: ``(account, instance_id)`` → ``(key_type, key_base64)``."""
        with self._transaction(write=False) as session:
            rows = session.scalars(select(PinnedHostKey))
            return {(r.account, r.instance_id): (r.key_type, r.key_base64) for r in rows}

    def pin_host_key(
        self, account: str, instance_id: str, key_type: str, key_base64: str, now: datetime
    ) -> None:
        """Pin the key first seen for the instance (accept-new). When a key is pinned already
        nothing changes (the first key wins): replacing one takes ``forget_host_key`` first."""
        with self._transaction(write=True) as session:
            pinned = _find_host_key(session, account, instance_id)
            if pinned is not None:
                if (pinned.key_type, pinned.key_base64) != (key_type, key_base64):
                    logger.warning(
                        "host key already pinned, not replaced account=%s instance=%s",
                        account,
                        instance_id,
                    )
                return
            session.add(
                PinnedHostKey(
                    account=account,
                    instance_id=instance_id,
                    key_type=key_type,
                    key_base64=key_base64,
                    first_seen=now,
                )
            )

    def forget_host_key(self, account: str, instance_id: str) -> None:
        """Drop the instance's pinned key, if any (``record_observation`` does it by itself
        when an instance is gone)."""
        with self._transaction(write=True) as session:
            row = _find_host_key(session, account, instance_id)
            if row is not None:
                session.delete(row)


def _find_host_key(session: Session, account: str, instance_id: str) -> PinnedHostKey | None:
    return session.scalar(
        select(PinnedHostKey).where(
            and_(PinnedHostKey.account == account, PinnedHostKey.instance_id == instance_id)
        )
    )
