"""The store: tables, engine, migrations and the repository.

Typical use::

    engine = create_engine_for("sqlite:////var/lib/watchdog-gpu/watchdog-gpu.db")
    upgrade_to_head(engine)
    store = Store(engine)

The names below are loaded on first use (PEP 562): importing a module of this package that needs
no SQLAlchemy (``store.rows``, ``store.urls``: what a command checks before opening a database)
must not import SQLAlchemy through this package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from watchdog_gpu.store.engine import create_engine_for, display_url
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
    from watchdog_gpu.store.urls import sqlite_url
    from watchdog_gpu.store.values import NaiveDatetimeError

# name → the module defining it
_WHERE = {
    "AccountRecord": "rows",
    "ActionRow": "rows",
    "AuditEvent": "rows",
    "FindingRecord": "rows",
    "InstanceRecord": "rows",
    "MigrationResult": "migrate",
    "NaiveDatetimeError": "values",
    "NotificationRow": "rows",
    "Store": "repository",
    "create_engine_for": "engine",
    "display_url": "engine",
    "sqlite_url": "urls",
    "upgrade_to_head": "migrate",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


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
