"""Helpers the poll recorders share: the current span of each row, rate comparison, id chunks."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import Connection, Select, Table, func, select

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


def latest_spans_query(
    span_table: Table, owner_column: str, owners: Select[Any]
) -> Select[*tuple[Any, ...]]:
    """The newest span row (highest id) of each owner whose id ``owners`` selects."""
    owner = span_table.c[owner_column]
    latest = select(func.max(span_table.c.id)).where(owner.in_(owners)).group_by(owner)
    return select(span_table).where(span_table.c.id.in_(latest))


def current_spans(
    conn: Connection, query: Select[*tuple[Any, ...]], params: dict[str, Any], owner_column: str
) -> dict[int, Any]:
    """The rows of a ``latest_spans_query`` by owner id."""
    return {row._mapping[owner_column]: row for row in conn.execute(query, params)}
