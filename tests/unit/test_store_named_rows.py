"""Result rows copied into named tuples (``store/named_rows.py``) read as SQLAlchemy's rows do."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

from sqlalchemy import Table, create_engine, insert, select

from watchdog_gpu.store import convert
from watchdog_gpu.store.named_rows import named, record_type
from watchdog_gpu.store.schema import Instance, metadata

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_named_rows_hold_the_same_values_under_the_same_names() -> None:
    engine = create_engine("sqlite://")
    metadata.create_all(engine)
    table = cast(Table, Instance.__table__)
    with engine.begin() as conn:
        conn.execute(
            insert(table),
            [
                {
                    "account": "vast-main",
                    "instance_id": str(100 + index),
                    "provider": "vast",
                    "name": f"job-{index}",
                    "state": "running",
                    "raw_state": "running",
                    "observed_at": T0,
                    "interruptible": bool(index % 2),
                    "compute_usd_per_hour": 0.5 if index else None,
                    "storage_usd_per_hour": 0.02,
                    "provider_gpu_util_percent": [12.5, None] if index else None,
                    "public_ports": [22, 8080][:index],
                    "labels": {"team": "a"} if index else {},
                    "created_at": T0,
                    "first_seen": T0,
                    "last_seen": T0,
                    "state_since": T0,
                }
                for index in range(3)
            ],
        )
        query = select(*table.columns).order_by(table.c.id)
        originals = list(conn.execute(query))
        copies = named(conn.execute(query))
    assert len(copies) == len(originals) == 3
    for copy, original in zip(copies, originals, strict=True):
        assert tuple(copy) == tuple(original)
        for column in table.columns:
            assert getattr(copy, column.name) == getattr(original, column.name)
        assert convert.instance_record(copy) == convert.instance_record(original)


def test_one_type_per_set_of_columns() -> None:
    assert record_type(("id", "name")) is record_type(("id", "name"))
    assert record_type(("id", "name")) is not record_type(("id", "state"))
    assert record_type(("id", "name"))([1, "x"]).name == "x"
