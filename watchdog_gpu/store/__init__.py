"""The store: tables, engine, migrations and the repository.

Typical use::

    engine = create_engine_for("sqlite:////var/lib/watchdog-gpu/watchdog-gpu.db")
    upgrade_to_head(engine)
    store = Store(engine)
"""

from watchdog_gpu.store.engine import create_engine_for, display_url, sqlite_url
from watchdog_gpu.store.migrate import MigrationResult, upgrade_to_head
from watchdog_gpu.store.repository import Store
from watchdog_gpu.store.rows import (
    AccountRecord,
    ActionRow,
    AuditEvent,
    FindingRecord,
    InstanceRecord,
    NotificationRow,
)
from watchdog_gpu.store.types import NaiveDatetimeError

__all__ = [
    "AccountRecord",
    "ActionRow",
    "AuditEvent",
    "FindingRecord",
    "InstanceRecord",
    "MigrationResult",
    "NaiveDatetimeError",
    "NotificationRow",
    "Store",
    "create_engine_for",
    "display_url",
    "sqlite_url",
    "upgrade_to_head",
]
