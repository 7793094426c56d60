"""What the read-only commands read from the store: a protocol with two implementations.

:class:`~watchdog_gpu.store.repository.Store` (SQLAlchemy: any database, the daemon's own) and
:class:`~watchdog_gpu.store.sqlite_reader.SqliteReader` (the standard library's ``sqlite3`` on a
SQLite file at head, read-only: what ``status`` opens a SQLite database with, so that it starts
without importing SQLAlchemy: bench/README.md, "Command-line start-up"). Both return the
very same values for the same database (``tests/integration/test_sqlite_reader.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from watchdog_gpu.fleet import FleetView
from watchdog_gpu.store.rows import (
    AccountRecord,
    ActionRow,
    AuditEvent,
    FindingRecord,
    InstanceRecord,
    Leader,
)
from watchdog_gpu.store.values import DEFAULT_NOTIFICATION_LOOKBACK


class StoreReader(Protocol):
    """The reads ``status`` and ``events`` make; each method is documented on ``Store``."""

    def latest_accounts(self) -> list[AccountRecord]: ...

    def latest_instances(self, *, include_gone: bool = False) -> list[InstanceRecord]: ...

    def latest_seen(self) -> datetime | None: ...

    def load_fleet_view(
        self,
        now: datetime,
        lookback: timedelta,
        spend_since: datetime,
        accounts: Mapping[str, str] | None = None,
        *,
        notification_lookback: timedelta = DEFAULT_NOTIFICATION_LOOKBACK,
    ) -> FleetView: ...

    def load_status_view(
        self, now: datetime, lookback: timedelta, spend_since: datetime, threshold_percent: float
    ) -> FleetView:
        """``load_fleet_view`` for ``status``: its samples may be only those ``gpu_activity``
        reads with ``threshold_percent`` (the SQLite reader loads only those; ``Store``, the
        whole window)."""
        ...

    def list_findings(self, seen_since: datetime | None = None) -> list[FindingRecord]: ...

    def list_actions(
        self, statuses: Sequence[str] | None = None, since: datetime | None = None
    ) -> list[ActionRow]: ...

    def list_audit_events(
        self,
        since: datetime | None = None,
        limit: int | None = None,
        *,
        account: str | None = None,
        instance_id: str | None = None,
    ) -> list[AuditEvent]: ...

    def fuse_latched(self) -> bool: ...

    def leader(self) -> Leader | None: ...
