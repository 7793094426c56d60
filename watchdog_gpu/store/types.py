"""Column types the schema shares: aware-UTC datetimes and JSON values."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime, Dialect
from sqlalchemy.types import TypeDecorator

from watchdog_gpu.store.values import JsonScalar, JsonValue, NaiveDatetimeError, bind_time

# SQLAlchemy's SQLite DATETIME text, which ``bind_time`` writes directly.
_SQLITE_DATETIME_FORMAT = (
    "%(year)04d-%(month)02d-%(day)02d %(hour)02d:%(minute)02d:%(second)02d.%(microsecond)06d"
)

__all__ = ["JsonScalar", "JsonValue", "NaiveDatetimeError", "UtcDateTime"]

# The instants read from SQLite's canonical texts, by text (see ``UtcDateTime.result_processor``;
# datetimes are immutable, so readers may share one): all forgotten when full.
_READ_INSTANTS: dict[str, datetime] = {}
_MAX_READ_INSTANTS = 8192


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

    # On SQLite, one function per value each way instead of the decorator's two steps (the
    # method above, then the dialect's own formatting or parsing): a tick binds and reads tens
    # of thousands of instants. Same text, same values.

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        impl = self.impl_instance
        if dialect.name != "sqlite" or getattr(impl, "_storage_format", None) != (
            _SQLITE_DATETIME_FORMAT
        ):
            return super().bind_processor(dialect)

        def process(value: Any) -> str | None:
            if value is None:
                return None
            if not isinstance(value, datetime):
                raise TypeError(f"expected a datetime, got {type(value).__name__}")
            return bind_time(value)

        return process

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        parse = self.impl_instance.result_processor(dialect, coltype)
        if dialect.name != "sqlite" or parse is None:
            return super().result_processor(dialect, coltype)
        from_iso = datetime.fromisoformat
        kept = _READ_INSTANTS

        def process(value: Any) -> datetime | None:
            # The text ``bind_time`` writes (``YYYY-MM-DD HH:MM:SS.ffffff``, naive UTC) parsed
            # with its UTC offset in one call: ``parse`` is ``datetime.fromisoformat``, so a
            # naive text with "+00:00" appended reads as the same instant, and one with an
            # offset of its own fails that way and takes the long one (a tick reads tens of
            # thousands of instants). And once read, kept by its text: a tick reads the same
            # instants again and again
            # (the listing's instants, each instance's creation and start, its state's start).
            if type(value) is str and len(value) == 26 and value[10] == " " and value[19] == ".":
                known = kept.get(value)
                if known is not None:
                    return known
                try:
                    known = from_iso(value + "+00:00")
                except ValueError:
                    pass
                else:
                    if len(kept) >= _MAX_READ_INSTANTS:
                        kept.clear()
                    kept[value] = known
                    return known
            instant: datetime | None = parse(value)
            if instant is None:
                return None
            if instant.tzinfo is None:
                return instant.replace(tzinfo=UTC)
            return instant.astimezone(UTC)

        return process
