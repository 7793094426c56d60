"""Helpers the poll recorders share: the current span of each row, rate comparison, id chunks."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Select, Table, func, select
from sqlalchemy.orm import Session

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


def current_spans(
    session: Session,
    span_table: Table,
    owner_column: str,
    owners: Select[Any] | ColumnElement[Any],
) -> dict[int, Any]:
    """The newest span row (highest id) of each owner whose id ``owners`` selects, by owner id."""
    owner = span_table.c[owner_column]
    latest = select(func.max(span_table.c.id)).where(owner.in_(owners)).group_by(owner)
    rows = session.execute(select(span_table).where(span_table.c.id.in_(latest)))
    return {row._mapping[owner_column]: row for row in rows}
