"""Copy a whole watchdog-gpu database to another one (``watchdog-gpu db copy``).

Every table and row, ids included, in foreign-key order, in one transaction on an empty target
(a copy that fails half-way leaves it empty; copying into a fleet's history would mix two and
break the idempotency keys). The source is only read and must be at this package's schema: it is
the user's file, so this command never migrates it. ``docs/postgresql.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Integer,
    Table,
    cast,
    false,
    func,
    insert,
    literal,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import REGCLASS
from sqlalchemy.exc import SQLAlchemyError

from watchdog_gpu.errors import StoreError
from watchdog_gpu.store.engine import display_url, writing
from watchdog_gpu.store.migrate import current_revision, head_revision, upgrade_to_head
from watchdog_gpu.store.schema import metadata

_BATCH_ROWS = 2_000


@dataclass(frozen=True, slots=True)
class CopyResult:
    """Rows copied per table, in the order they were copied."""

    rows: tuple[tuple[str, int], ...]

    @property
    def total(self) -> int:
        return sum(count for _table, count in self.rows)


def copy_database(source: Engine, target: Engine) -> CopyResult:
    """Copy every row of ``source`` into the empty database ``target``.

    Raises StoreError (with passwords hidden) when the source is not at this package's schema
    revision, the target is not empty, or either database fails.
    """
    _check_source_revision(source)
    try:
        upgrade_to_head(target)
    except StoreError as error:
        raise StoreError(
            f"cannot use the target database {display_url(target)}: {error}"
        ) from error
    try:
        with source.connect() as reader, writing(target).begin() as writer:
            copied = _copy_tables(reader, writer, display_url(target))
    except SQLAlchemyError as error:
        original = getattr(error, "orig", None)
        reason = str(original) if original is not None else type(error).__name__
        raise StoreError(
            f"cannot copy {display_url(source)} to {display_url(target)}: {reason}"
        ) from error
    return CopyResult(copied)


def _check_source_revision(source: Engine) -> None:
    """Raise StoreError unless ``source`` is at this package's schema revision."""
    head = head_revision()
    found = current_revision(source)
    if found != head:
        raise StoreError(
            f"the source database {display_url(source)} is at revision {found or '(empty)'}, "
            f"this watchdog-gpu writes revision {head}: run 'watchdog-gpu db upgrade "
            "--database-url <source>' first (or use the watchdog-gpu version that wrote it)"
        )


def _copy_tables(
    reader: Connection, writer: Connection, target_name: str
) -> tuple[tuple[str, int], ...]:
    """Copy every table into the empty target, parents before children (foreign keys); the
    rows copied per table. Raises StoreError when the target has rows."""
    tables = list(metadata.sorted_tables)
    occupied = [table.name for table in tables if _count(writer, table) > 0]
    if occupied:
        raise StoreError(
            f"the target database {target_name} is not empty "
            f"(rows in {', '.join(occupied)}): copy into a new, empty database"
        )
    copied = tuple((table.name, _copy_table(reader, writer, table)) for table in tables)
    if writer.dialect.name == "postgresql":
        for table in tables:
            _advance_postgres_sequence(writer, table)
    return copied


def _count(connection: Connection, table: Table) -> int:
    return int(connection.execute(select(func.count()).select_from(table)).scalar_one())


def _copy_table(reader: Connection, writer: Connection, table: Table) -> int:
    order = list(table.primary_key.columns) or list(table.columns)
    result = reader.execute(select(table).order_by(*order)).mappings()
    copied = 0
    while True:
        batch: list[dict[str, Any]] = [dict(row) for row in result.fetchmany(_BATCH_ROWS)]
        if not batch:
            return copied
        writer.execute(insert(table), batch)
        copied += len(batch)


def _advance_postgres_sequence(writer: Connection, table: Table) -> None:
    """Rows were inserted with their ids, so the serial sequence did not move: set it past the
    largest id, or the next ordinary insert would collide."""
    integer_keys = [
        column
        for column in table.primary_key.columns
        if isinstance(column.type, Integer) and column.autoincrement in (True, "auto")
    ]
    for column in integer_keys:
        sequence = writer.execute(
            text("SELECT pg_get_serial_sequence(:table, :column)"),
            {"table": table.name, "column": column.name},
        ).scalar_one_or_none()
        if sequence is None:
            continue
        largest = select(func.max(column)).scalar_subquery()
        writer.execute(
            select(
                func.setval(
                    cast(literal(sequence), REGCLASS), func.coalesce(largest, 0) + 1, false()
                )
            )
        )
