"""Retention: raw GPU samples older than the raw retention (two hours by default) become hourly
counts; prune takes only the rows it deleted out of the fleet view's cache."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import Engine, event

from tests.integration.store_builders import (
    ACCOUNT,
    T0,
    instance,
    minutes,
    observation,
    probe,
    sample,
)
from watchdog_gpu.store import Store

KEY = f"{ACCOUNT}/101"
DAY = timedelta(days=1)


def _count(database: Path, table: str) -> int:
    with sqlite3.connect(database) as connection:
        return int(connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def _probe_every_minute(store: Store, start: datetime, count: int, sm: float | None) -> None:
    store.record_probes(
        probe("101", at, sample("101", at, 0, sm=sm), sample("101", at, 1, sm=0.0))
        for at in (start + minutes(m) for m in range(count))
    )


def test_samples_older_than_the_raw_retention_become_hourly_counts_per_gpu(
    tmp_path: Path, store: Store
) -> None:
    store.record_observation(observation(instance("101")), T0)
    _probe_every_minute(store, T0, 60, sm=80.0)  # 12:00-12:59, GPU 0 busy
    _probe_every_minute(store, T0 + minutes(60), 30, sm=None)  # 13:00-13:29, GPU 0 blind
    now = T0 + minutes(241)  # 16:01: both hours ended more than two hours ago

    store.prune(now)

    database = tmp_path / "watchdog-gpu.db"
    assert _count(database, "gpu_samples") == 0
    hours = store.gpu_hours(ACCOUNT, "101")
    assert [(h.hour, h.gpu_index, h.samples, h.busy, h.idle, h.unknown) for h in hours] == [
        (T0, 0, 60, 60, 0, 0),
        (T0, 1, 60, 0, 60, 0),
        (T0 + minutes(60), 0, 30, 0, 0, 30),  # blind time is never idle
        (T0 + minutes(60), 1, 30, 0, 30, 0),
    ]
    assert hours[0].sm_max == 80.0
    assert hours[2].sm_max is None
    assert (hours[2].first_at, hours[2].last_at) == (T0 + minutes(60), T0 + minutes(89))
    assert store.gpu_hours(ACCOUNT, "101", since=T0 + minutes(60))[0].hour == T0 + minutes(60)


def test_only_whole_hours_older_than_the_raw_retention_are_rolled_up(
    tmp_path: Path, store: Store
) -> None:
    store.record_observation(observation(instance("101")), T0)
    _probe_every_minute(store, T0, 120, sm=50.0)  # 12:00-13:59
    now = T0 + minutes(210)  # two hours before is 13:30: only 12:00-12:59 is whole and older

    store.prune(now)

    assert _count(tmp_path / "watchdog-gpu.db", "gpu_samples") == 60 * 2
    assert [h.hour for h in store.gpu_hours(ACCOUNT, "101")] == [T0, T0]
    view = store.load_fleet_view(now, 2 * DAY, now - 2 * DAY).instances[KEY]
    assert min(s.at for s in view.samples) == T0 + minutes(60)


def test_a_late_sample_of_a_rolled_up_hour_is_added_to_it(store: Store) -> None:
    store.record_observation(observation(instance("101")), T0)
    _probe_every_minute(store, T0, 30, sm=50.0)
    store.prune(T0 + 2 * DAY)
    store.record_probe(probe("101", T0 + minutes(45), sample("101", T0 + minutes(45), 0)))
    store.prune(T0 + 2 * DAY + minutes(1))

    gpu0 = [h for h in store.gpu_hours(ACCOUNT, "101") if h.gpu_index == 0]
    assert [(h.samples, h.busy, h.idle, h.last_at) for h in gpu0] == [(31, 30, 1, T0 + minutes(45))]


def test_rollups_and_samples_expire_with_the_retention(tmp_path: Path, store: Store) -> None:
    store.record_observation(observation(instance("101")), T0)
    _probe_every_minute(store, T0, 10, sm=50.0)
    store.prune(T0 + 2 * DAY)
    assert store.gpu_hours(ACCOUNT, "101")

    deleted = store.prune(T0 + 8 * DAY)

    assert store.gpu_hours(ACCOUNT, "101") == []
    assert deleted == 2 + 1  # two hourly rows, one probe run
    assert _count(tmp_path / "watchdog-gpu.db", "probe_outcomes") == 0


def test_a_retention_shorter_than_a_day_deletes_without_rolling_up(store: Store) -> None:
    store.record_observation(observation(instance("101")), T0)
    _probe_every_minute(store, T0, 10, sm=50.0)

    store.prune(T0 + DAY + minutes(60), timedelta(hours=12))

    assert store.gpu_hours(ACCOUNT, "101") == []


@contextmanager
def _statements(engine: Engine) -> Iterator[list[str]]:
    """The SQL statements run on ``engine`` inside the block."""
    seen: list[str] = []

    def remember(conn: object, cursor: object, statement: str, *args: object) -> None:
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", remember)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", remember)


def _window_reads(statements: list[str]) -> list[str]:
    """Reads of the whole sample window (a cold cache): neither the rows added since the last
    load (``id >``) nor the (emptied) part of the window before the cache's floor (``at <``)."""
    return [
        s
        for s in statements
        if "FROM gpu_samples" in s
        and "gpu_samples.at >=" in s
        and "gpu_samples.id >" not in s
        and "gpu_samples.at <" not in s
    ]


def test_prune_keeps_the_cache_warm_and_drops_only_what_it_deleted(
    store: Store, store_engine: Engine
) -> None:
    store.record_observation(observation(instance("101")), T0)
    for minute in range(0, 180, 10):
        at = T0 + minutes(minute)
        store.record_probe(probe("101", at, sample("101", at, 0, sm=float(minute))))
    now = T0 + minutes(170)
    lookback = minutes(120)
    store.load_fleet_view(now, lookback, now - lookback)

    store.prune(now, timedelta(minutes=60))  # samples before 13:50 go
    with _statements(store_engine) as statements:
        view = store.load_fleet_view(now, lookback, now - lookback).instances[KEY]

    assert not _window_reads(statements)
    fresh = Store(store_engine, keep_history=False).load_fleet_view(now, lookback, now - lookback)
    assert view.samples == fresh.instances[KEY].samples
    assert [s.at for s in view.samples] == [
        T0 + minutes(m) for m in (110, 120, 130, 140, 150, 160, 170)
    ]


def test_a_prune_that_takes_the_newest_rows_starts_the_cache_over(
    store: Store, store_engine: Engine
) -> None:
    store.record_observation(observation(instance("101")), T0)
    for minute in range(3):
        at = T0 + minutes(minute)
        store.record_probe(probe("101", at, sample("101", at, 0)))
    store.load_fleet_view(T0 + minutes(2), DAY, T0)
    later = T0 + 10 * DAY
    store.prune(later)  # everything: SQLite hands the ids out again

    for minute in range(5):
        at = later + minutes(minute)
        store.record_probe(probe("101", at, sample("101", at, 0, sm=70.0)))
    now = later + minutes(4)
    view = store.load_fleet_view(now, DAY, now - DAY).instances[KEY]

    assert [s.at for s in view.samples] == [later + minutes(m) for m in range(5)]
