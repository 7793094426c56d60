"""Helpers the poll recorders share: each row with its current span, rate comparison, id chunks."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, Table, func, select

Values = dict[str, Any]

# Ids per ``IN (...)`` list: well under SQLite's bound-parameter limit.
IN_CHUNK = 500


def same_rate(first: float | None, second: float | None) -> bool:
    """Two rates are the same (both unknown, or equal up to float noise)."""
    if first is None or second is None:
        return first is second
    return math.isclose(first, second, rel_tol=1e-9, abs_tol=1e-12)


def chunks(items: Sequence[str]) -> Iterator[Sequence[str]]:
    """``items`` in slices of at most IN_CHUNK."""
    for start in range(0, len(items), IN_CHUNK):
        yield items[start : start + IN_CHUNK]


def with_current_span(
    owners: Table, columns: Sequence[ColumnElement[Any]], span_table: Table, owner_column: str
) -> Select[*tuple[Any, ...]]:
    """``columns`` of ``owners`` together with each owner's current span — its span row with the
    highest id, NULLs when it has none — as ``span_<column>`` columns: one read instead of two."""
    current = span_table.alias("current_span")
    newer = span_table.alias("newer_span")
    newest_id = (
        select(func.max(newer.c.id)).where(newer.c[owner_column] == owners.c.id).scalar_subquery()
    )
    labelled = [column.label(f"span_{column.name}") for column in current.c]
    return select(*columns, *labelled).select_from(
        owners.outerjoin(current, current.c.id == newest_id)
    )


class CurrentSpan:
    """The current span of a ``with_current_span`` row, read by its span columns' names."""

    __slots__ = ("_row",)

    def __init__(self, row: Any) -> None:
        self._row = row

    def __getattr__(self, name: str) -> Any:
        return getattr(self._row, f"span_{name}")


def current_span(row: Any) -> CurrentSpan | None:
    """The row's current span, or None when the owner has no span yet."""
    return None if row.span_id is None else CurrentSpan(row)


@dataclass
class SpanWrites:
    """A poll's writes to one span table, gathered to be executed in bulk: current spans
    extended to the poll's instant, and new spans opened."""

    extended: list[Values] = field(default_factory=list)
    opened: list[Values] = field(default_factory=list)

    def extend(self, span_id: int, last_seen: datetime, now: datetime) -> None:
        """The listing continues the current span ``span_id``: its ``last_seen`` moves to
        ``now`` (no write when it is there already)."""
        if last_seen < now:
            self.extended.append({"pk": span_id, "last_seen": now})
