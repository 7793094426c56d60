"""Column types the schema shares: aware-UTC datetimes and JSON values."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import DateTime, Dialect
from sqlalchemy.types import TypeDecorator

from watchdog_gpu.store.values import JsonScalar, JsonValue, NaiveDatetimeError

__all__ = ["JsonScalar", "JsonValue", "NaiveDatetimeError", "UtcDateTime"]


class UtcDateTime(TypeDecorator[datetime]):
    """An instant stored as naive UTC and returned as aware UTC.

    Writing a naive datetime raises :class:`NaiveDatetimeError`: a naive value is ambiguous (local
    time? UTC?) and a silent guess would shift idle windows and budgets by hours. Storing naive
    UTC text keeps SQLite's comparisons and ordering correct (fixed-width ISO text compares as
    time) and works the same on every other database.
    """

    impl = DateTime(timezone=False)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise TypeError(f"expected a datetime, got {type(value).__name__}")
        if value.tzinfo is None or value.utcoffset() is None:
            raise NaiveDatetimeError(f"naive datetime refused by the store: {value.isoformat()}")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)
