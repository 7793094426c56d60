"""Plain types and values the store's records share, with no database library behind them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TypeAlias

# What a JSON column holds. Evidence mappings (str -> scalar) are a special case of it.
JsonScalar: TypeAlias = str | int | float | bool | None
JsonValue: TypeAlias = JsonScalar | Sequence["JsonValue"] | Mapping[str, "JsonValue"]


class NaiveDatetimeError(ValueError):
    """A naive datetime reached the store: every instant must be timezone-aware."""


def bind_time(moment: datetime) -> str:
    """``moment`` as SQLAlchemy's SQLite dialect stores a UtcDateTime: naive UTC text,
    ``YYYY-MM-DD HH:MM:SS.ffffff`` (its default DATETIME storage format)."""
    if moment.tzinfo is UTC and type(moment) is datetime:
        # Already UTC (nearly every instant the daemon writes): its text but the "+00:00",
        # one call instead of three (a probe round binds thousands).
        return moment.isoformat(" ", "microseconds")[:26]
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise NaiveDatetimeError(f"naive datetime refused by the store: {moment.isoformat()}")
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "microseconds")


# Audit event kinds the fleet view's readers look for (the fuse, deferred waves).
FUSE_TRIPPED = "fuse_tripped"
FUSE_RESET = "fuse_reset"
ACTIONS_DEFERRED = "actions_deferred"

# The fleet view holds the actions of this long ago, and the open ones whatever their age
# (``model.OPEN_ACTION_STATUSES``).
RECENT_ACTIONS = timedelta(hours=24)

# How far back the fleet view reads the notification keys (warnings standing for an episode).
DEFAULT_NOTIFICATION_LOOKBACK = timedelta(days=30)
