"""Column types the schema shares: aware-UTC datetimes and JSON values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TypeAlias

from sqlalchemy import DateTime, Dialect
from sqlalchemy.types import TypeDecorator

# What a JSON column holds. Evidence mappings (str -> scalar) are a special case of it.
JsonScalar: TypeAlias = str | int | float | bool | None
JsonValue: TypeAlias = JsonScalar | Sequence["JsonValue"] | Mapping[str, "JsonValue"]


class NaiveDatetimeError(ValueError):
    """A naive datetime reached the store: every instant must be timezone-aware."""


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
