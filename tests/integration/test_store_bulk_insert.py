"""``insert_rows`` (tuples straight to SQLite) against SQLAlchemy's insert of the same rows.

A probe round's samples and outcomes are inserted with ``store.bulk.insert_rows``: on SQLite it
binds the instants, floats and booleans itself. Whatever rows it gets, the table must hold what
``conn.execute(insert(table), rows)`` would have written — the same text, numbers and storage
classes — and a value SQLAlchemy refuses is refused the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, cast
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Connection, Engine, Table, Update, event, insert, select, text
from sqlalchemy.exc import StatementError

from tests.integration.store_builders import instance, observation
from watchdog_gpu.store import Store
from watchdog_gpu.store.bulk import insert_rows, update_rows
from watchdog_gpu.store.observations import _EXTEND_SPANS, _UPDATE_INSTANCES, PROBES, SAMPLES
from watchdog_gpu.store.values import NaiveDatetimeError

T0 = datetime(2026, 3, 2, 20, 0, tzinfo=UTC)
zones = st.sampled_from(
    [UTC, timezone(timedelta(hours=9)), timezone(timedelta(hours=-5, minutes=-30))]
)
instants = st.builds(
    lambda seconds, zone: (T0 + timedelta(seconds=seconds)).astimezone(zone),
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False).map(lambda s: round(s, 6)),
    zones,
)
# Mostly floats and None (bound directly); an int now and then sends the batch to SQLAlchemy.
metrics = st.one_of(st.none(), st.floats(min_value=0, max_value=100), st.just(7))


def sample_row(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "account": draw(st.sampled_from(["vast-00", "runpod-01"])),
        "instance_id": draw(st.sampled_from(["1", "100001"])),
        "at": draw(instants),
        "gpu_index": draw(st.integers(0, 7)),
        "verdict": draw(st.sampled_from(["busy", "idle", "unknown"])),
        "source": "dmon",
        **{name: draw(metrics) for name in ("sm", "mem", "enc", "dec", "jpg", "ofa")},
        "covers_from": draw(st.one_of(st.none(), instants)),
    }


def probe_row(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "account": "vast-00",
        "instance_id": draw(st.sampled_from(["1", "2"])),
        "at": draw(instants),
        "status": draw(st.sampled_from(["ok", "unreachable"])),
        "duration_seconds": draw(st.one_of(st.floats(0, 30), st.floats(0, 30), st.just(3))),
        "detail": draw(st.sampled_from(["", "timed out", "é ✓"])),
        "sample_count": draw(st.integers(0, 4)),
        "interactive_login": draw(st.sampled_from([None, True, False])),
        "mode": draw(st.sampled_from(["stream", "burst"])),
        "first_at": draw(instants),
        "repeats": draw(st.integers(1, 1000)),
    }


@st.composite
def batches(draw: st.DrawFn) -> tuple[Table, list[dict[str, Any]]]:
    table = draw(st.sampled_from([SAMPLES, PROBES]))
    make = sample_row if table is SAMPLES else probe_row
    return table, [make(draw) for _ in range(draw(st.integers(1, 6)))]


def stored(engine: Engine, table: Table) -> list[tuple[Any, ...]]:
    """Every row of ``table`` as SQLite holds it: each value and its storage class (no id)."""
    names = [column.name for column in table.columns if column.name != "id"]
    columns = ", ".join(f"{name}, typeof({name})" for name in names)
    with engine.begin() as conn:
        rows = conn.execute(text(f"SELECT {columns} FROM {table.name} ORDER BY id")).all()
        conn.execute(table.delete())
    return [tuple(row) for row in rows]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batches())
def test_the_rows_are_stored_as_sqlalchemy_stores_them(
    store_engine: Engine, batch: tuple[Table, list[dict[str, Any]]]
) -> None:
    table, rows = batch
    with store_engine.begin() as conn:
        conn.execute(insert(table), rows)
    expected = stored(store_engine, table)
    with store_engine.begin() as conn:
        insert_rows(conn, table, rows)
    assert stored(store_engine, table) == expected


def test_float_rows_go_straight_to_sqlite_and_an_int_for_a_float_goes_through_sqlalchemy(
    store_engine: Engine,
) -> None:
    compiled: list[bool] = []

    def note(*args: Any) -> None:  # before_cursor_execute(conn, cursor, statement, …, context, …)
        statement, context = args[2], args[4]
        if statement.startswith("INSERT"):
            compiled.append(context.compiled is not None)

    row = {"account": "a", "instance_id": "1", "at": T0, "gpu_index": 0, "verdict": "idle"}
    row |= {"source": "dmon", "sm": 1.5, "mem": None, "covers_from": T0}
    event.listen(store_engine, "before_cursor_execute", note)
    with store_engine.begin() as conn:
        insert_rows(conn, SAMPLES, [row, row])
        insert_rows(conn, SAMPLES, [row, {**row, "sm": 2}])  # an int: SQLAlchemy's float()
    event.remove(store_engine, "before_cursor_execute", note)
    on_sqlite = store_engine.dialect.name == "sqlite"
    assert compiled == [not on_sqlite, True]
    sm = 2 * [column.name for column in SAMPLES.columns if column.name != "id"].index("sm")
    assert [(row[sm], row[sm + 1]) for row in stored(store_engine, SAMPLES)] == [
        (1.5, "real"),
        (1.5, "real"),
        (1.5, "real"),
        (2.0, "real"),
    ]


def test_a_naive_instant_is_refused_as_sqlalchemy_refuses_it(store_engine: Engine) -> None:
    row = {"account": "a", "instance_id": "1", "at": datetime(2026, 3, 2), "gpu_index": 0}
    row |= {"verdict": "idle", "source": "dmon"}  # naive ``at``: the point of the test
    with pytest.raises(StatementError) as raised, store_engine.begin() as conn:
        insert_rows(conn, SAMPLES, [row])
    assert isinstance(raised.value.orig, NaiveDatetimeError)
    assert stored(store_engine, SAMPLES) == []


def test_each_instant_is_written_as_its_own_text_when_a_batch_repeats_or_confuses_them(
    store_engine: Engine,
) -> None:
    # insert_rows writes each UTC instant's text once per batch. Instants of another zone that
    # differ only by ``fold`` (the hour a clock goes back, twice) compare equal but are an
    # hour apart: each keeps its own text.
    berlin = ZoneInfo("Europe/Berlin")
    first = datetime(2026, 10, 25, 2, 30, tzinfo=berlin)
    second = first.replace(fold=1)
    assert first == second
    assert first.astimezone(UTC) != second.astimezone(UTC)
    row = {"account": "a", "instance_id": "1", "gpu_index": 0, "verdict": "idle"}
    row |= {"source": "dmon", "sm": 1.5, "mem": None}
    instants = [(first, second), (second, first), (T0, T0), (T0 + timedelta(seconds=1), T0)]
    rows = [{**row, "at": at, "covers_from": covers} for at, covers in instants]
    with store_engine.begin() as conn:
        insert_rows(conn, SAMPLES, rows)
    with store_engine.begin() as conn:
        read = conn.execute(select(SAMPLES.c.at, SAMPLES.c.covers_from).order_by(SAMPLES.c.id))
        assert [tuple(instants) for instants in read] == [
            (at.astimezone(UTC), covers.astimezone(UTC)) for at, covers in instants
        ]
        written = conn.execute(text("SELECT at, covers_from FROM gpu_samples ORDER BY id")).all()
    expected = [
        ("2026-10-25 00:30:00.000000", "2026-10-25 01:30:00.000000"),
        ("2026-10-25 01:30:00.000000", "2026-10-25 00:30:00.000000"),
        ("2026-03-02 20:00:00.000000", "2026-03-02 20:00:00.000000"),
        ("2026-03-02 20:00:01.000000", "2026-03-02 20:00:00.000000"),
    ]
    if store_engine.dialect.name == "sqlite":
        assert [tuple(instants) for instants in written] == expected


@st.composite
def updates(draw: st.DrawFn) -> tuple[Update, list[dict[str, Any]]]:
    """Rows for a poll's two executemany UPDATEs (a few ids that do not exist among them)."""
    statement = draw(st.sampled_from([_UPDATE_INSTANCES, _EXTEND_SPANS]))
    keys = ("observed_at", "last_seen") if statement is _UPDATE_INSTANCES else ("last_seen",)
    rows: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 6))):
        row: dict[str, Any] = {"pk": draw(st.integers(1, 6))}
        row |= {key: draw(instants) for key in keys}
        rows.append(dict(reversed(row.items())) if draw(st.booleans()) else row)
    return statement, rows


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(updates())
def test_the_rows_are_updated_as_sqlalchemy_updates_them(
    store_engine: Engine, update: tuple[Update, list[dict[str, Any]]]
) -> None:
    statement, rows = update
    Store(store_engine).record_observation(
        observation(*(instance(str(number)) for number in range(101, 106))), T0
    )
    table = cast(Table, statement.table)
    names = [column.name for column in table.columns]
    if store_engine.dialect.name == "sqlite":  # and each value's storage class
        names = [f"{name}, typeof({name})" for name in names]
    query = text(f"SELECT {', '.join(names)} FROM {table.name} ORDER BY id")

    def after(apply: Callable[[Connection], object]) -> list[Any]:
        with store_engine.connect() as conn, conn.begin() as transaction:
            apply(conn)
            written = [tuple(row) for row in conn.execute(query)]
            transaction.rollback()
        return written

    expected = after(lambda conn: conn.execute(statement, rows))
    assert after(lambda conn: update_rows(conn, statement, rows)) == expected
