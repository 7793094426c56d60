"""Inserting many rows on SQLite without SQLAlchemy's per-row parameter processing.

A tick inserts thousands of rows (a probe round's GPU samples and probe outcomes): through
``conn.execute(insert(table), rows)`` SQLAlchemy runs each column's bind processing for each row
in Python, which cost more than SQLite's own insert. :func:`insert_rows` hands SQLite tuples
instead, binding the instants itself with :func:`~watchdog_gpu.store.values.bind_time` (the text
SQLAlchemy writes), and floats and booleans as they are (what SQLAlchemy binds for a float, a
bool or ``None``), when every other column needs no bind processing and no column left out has
a Python-side default. Any other value (an ``int`` for a float, a naive or non-``datetime``
instant…), other column types and other databases: SQLAlchemy's insert, with its errors.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Boolean, Connection, Dialect, Float, Table, Update, insert
from sqlalchemy.types import TypeEngine

from watchdog_gpu.store.types import UtcDateTime
from watchdog_gpu.store.values import bind_time

Values = dict[str, Any]


class _Plan:
    __slots__ = ("checked", "keys", "sql", "times")

    def __init__(
        self, sql: str, keys: tuple[str, ...], times: tuple[int, ...], checked: dict[int, type]
    ) -> None:
        self.sql = sql
        self.keys = keys  # the parameters' keys in the statement's positional order
        self.times = times  # positions of the instants (UtcDateTime columns)
        self.checked = checked  # positions bound as they are when of this type (or None)


_plans: dict[tuple[str, tuple[str, ...]], _Plan | None] = {}
_plans_lock = threading.Lock()


def insert_rows(conn: Connection, table: Table, rows: Sequence[Values]) -> None:
    """Insert ``rows`` (each with the keys of the first) into ``table``, as
    ``conn.execute(insert(table), rows)`` does."""
    if not rows:
        return
    keys = tuple(rows[0])
    plan = _plan(conn.dialect, table, keys) if conn.dialect.name == "sqlite" else None
    if not _executed(conn, plan, rows, keys):
        conn.execute(insert(table), list(rows))


def update_rows(conn: Connection, statement: Update, rows: Sequence[Values]) -> None:
    """``conn.execute(statement, rows)`` for an UPDATE whose values are all bound by name
    (``update(table).where(table.c.id == bindparam("pk"))``, each row with the keys of the
    first): on SQLite as :func:`insert_rows` inserts. A poll updates every listed instance's
    two instants and its span's ``last_seen``: the same SQL with these tuples costs about a
    third less than SQLAlchemy's executemany."""
    if not rows:
        return
    keys = tuple(rows[0])
    plan = _update_plan(conn.dialect, statement, keys) if conn.dialect.name == "sqlite" else None
    if not _executed(conn, plan, rows, keys):
        conn.execute(statement, list(rows))


def _executed(
    conn: Connection, plan: _Plan | None, rows: Sequence[Values], keys: tuple[str, ...]
) -> bool:
    """Run ``plan``'s SQL with ``rows`` as its parameter tuples. False, nothing run, without a
    plan, for a row with other keys or a value that needs SQLAlchemy's binding: the caller's
    statement through SQLAlchemy sorts those out."""
    if plan is None:
        return False
    try:
        params = _tuples(plan, rows, len(keys))
    except KeyError:
        return False
    if params is None:
        return False
    conn.exec_driver_sql(plan.sql, params)
    return True


_update_plans: dict[tuple[int, tuple[str, ...]], tuple[Update, _Plan | None]] = {}


def _update_plan(dialect: Dialect, statement: Update, keys: tuple[str, ...]) -> _Plan | None:
    with _plans_lock:
        key = (id(statement), keys)
        kept = _update_plans.get(key)
        if kept is None or kept[0] is not statement:  # the statement keeps its id while kept
            kept = _update_plans[key] = (statement, _make_update_plan(dialect, statement, keys))
        return kept[1]


def _make_update_plan(dialect: Dialect, statement: Update, keys: tuple[str, ...]) -> _Plan | None:
    table = statement.table
    if not isinstance(table, Table) or any(column.onupdate for column in table.columns):
        return None  # SQLAlchemy fills those in
    compiled = statement.compile(dialect=dialect, column_keys=list(keys))
    order = tuple(compiled.positiontup or ())
    if sorted(order) != sorted(keys) or len(set(order)) != len(order):
        return None
    return _typed_plan(dialect, str(compiled), order, [compiled.binds[name].type for name in order])


def _tuples(plan: _Plan, rows: Sequence[Values], width: int) -> list[tuple[Any, ...]] | None:
    """The rows as parameter tuples; ``None`` when a value needs SQLAlchemy's binding.

    Column by column (each column's values checked and bound in one pass over it, then zipped
    into rows): a round's thousands of rows cost a third of what they did row by row."""
    if any(len(row) != width for row in rows):
        return None
    columns: list[Sequence[Any]] = [[row[key] for row in rows] for key in plan.keys]
    for index, kind in plan.checked.items():
        if not _only(columns[index], kind):
            return None
    for index in plan.times:
        texts = _texts(columns[index])
        if texts is None:
            return None  # SQLAlchemy raises its TypeError or NaiveDatetimeError
        columns[index] = texts
    return list(zip(*columns, strict=True))


_NONE = type(None)


def _only(values: Sequence[Any], kind: type) -> bool:
    """Whether every value is of exactly ``kind`` or None."""
    kinds = set(map(type, values))
    kinds.discard(_NONE)
    return not kinds or kinds == {kind}


def _texts(instants: Sequence[Any]) -> list[str | None] | None:
    """The instants' texts (:func:`bind_time`); None unless each is an aware ``datetime`` or
    None. Each UTC instant's text is made once: a round's rows share a few (its probes' time,
    their runs' starts, the samples of one host second), and a datetime keeps its hash. Only
    UTC ones: two instants of another zone that differ only by ``fold`` compare equal."""
    if not _only(instants, datetime):
        return None
    kept: dict[datetime, str] = {}
    texts: list[str | None] = []
    append = texts.append
    for instant in instants:
        if instant is None:
            append(None)
        elif instant.tzinfo is UTC:
            text = kept.get(instant)
            if text is None:
                text = kept[instant] = bind_time(instant)
            append(text)
        elif instant.utcoffset() is None:
            return None
        else:
            append(bind_time(instant))
    return texts


def _plan(dialect: Dialect, table: Table, keys: tuple[str, ...]) -> _Plan | None:
    with _plans_lock:
        key = (table.name, keys)
        if key not in _plans:
            _plans[key] = _make_plan(dialect, table, keys)
        return _plans[key]


def _make_plan(dialect: Dialect, table: Table, keys: tuple[str, ...]) -> _Plan | None:
    if any(name not in table.c for name in keys):
        return None
    for column in table.columns:
        if column.name not in keys and (column.default is not None or column.onupdate):
            return None  # SQLAlchemy fills that default in
    # SQLAlchemy's own statement for these columns; its parameters in its positional order.
    compiled = insert(table).compile(dialect=dialect, column_keys=list(keys))
    order = tuple(compiled.positiontup or ())
    if sorted(order) != sorted(keys):
        return None
    return _typed_plan(dialect, str(compiled), order, [table.c[name].type for name in order])


def _typed_plan(
    dialect: Dialect, sql: str, order: tuple[str, ...], types: list[TypeEngine[Any]]
) -> _Plan | None:
    """The plan binding ``sql``'s parameters ``order`` of these types; None when one of them
    needs SQLAlchemy's binding."""
    times: list[int] = []
    checked: dict[int, type] = {}
    for index, column_type in enumerate(types):
        if isinstance(column_type, UtcDateTime):
            times.append(index)
        elif type(column_type) in _AS_THEY_ARE:
            checked[index] = _AS_THEY_ARE[type(column_type)]
        elif column_type.dialect_impl(dialect).bind_processor(dialect) is not None:
            return None  # JSON, … : SQLAlchemy binds those
    return _Plan(sql, order, tuple(times), checked)


# Column types whose values of one Python type SQLAlchemy binds unchanged on SQLite (its float
# processor is ``float(value)``, its boolean one checks the value and gives 1 or 0, as sqlite3
# binds a bool).
_AS_THEY_ARE: dict[type, type] = {Float: float, Boolean: bool}
