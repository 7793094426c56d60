"""The samples, probes and account snapshots a Store keeps between fleet-view loads: a warm
Store's view is always the view a Store that keeps nothing reads from the database."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine

from tests.integration.store_builders import (
    ACCOUNT,
    T0,
    instance,
    minutes,
    observation,
    probe,
    sample,
)
from watchdog_gpu.fleet import FleetView
from watchdog_gpu.model import ProbeStatus
from watchdog_gpu.store import Store
from watchdog_gpu.store.history import FleetHistory, RecentRows
from watchdog_gpu.store.history_queries import PROBES_QUERY, SAMPLES_QUERY

LOOKBACK = timedelta(hours=1)
KEY = f"{ACCOUNT}/101"


def _view(store: Store, now: datetime, lookback: timedelta = LOOKBACK) -> FleetView:
    return store.load_fleet_view(now, lookback, now - lookback)


def _history(view: FleetView) -> tuple[object, ...]:
    """What the Store keeps between loads: samples, probes, each account's latest snapshot."""
    instances = {key: (item.samples, item.probes) for key, item in view.instances.items()}
    return instances, view.accounts


def _assert_same_as_fresh(
    store: Store, engine: Engine, now: datetime, lookback: timedelta = LOOKBACK
) -> FleetView:
    warm = _view(store, now, lookback)
    assert _history(warm) == _history(_view(Store(engine, keep_history=False), now, lookback))
    return warm


def _record(store: Store, at: datetime, sm: float = 0.0, instance_id: str = "101") -> None:
    store.record_probe(probe(instance_id, at, sample(instance_id, at, 0, sm=sm)))


def test_samples_recorded_after_a_load_are_in_the_next_view(
    store: Store, store_engine: Engine
) -> None:
    store.record_observation(observation(instance("101")), T0)
    _record(store, T0)
    assert len(_view(store, T0).instances[KEY].samples) == 1

    _record(store, T0 + minutes(1), sm=80.0)
    view = _assert_same_as_fresh(store, store_engine, T0 + minutes(1))

    assert [(s.at, s.sm) for s in view.instances[KEY].samples] == [
        (T0, 0.0),
        (T0 + minutes(1), 80.0),
    ]


def test_a_sample_recorded_late_with_an_earlier_time_takes_its_place_in_order(
    store: Store, store_engine: Engine
) -> None:
    store.record_observation(observation(instance("101")), T0)
    _record(store, T0)
    _record(store, T0 + minutes(2))
    _view(store, T0 + minutes(2))

    # A slow probe round records a sample taken before the last one recorded.
    _record(store, T0 + minutes(1), sm=50.0)
    view = _assert_same_as_fresh(store, store_engine, T0 + minutes(2))

    assert [s.at for s in view.instances[KEY].samples] == [T0 + minutes(m) for m in (0, 1, 2)]


def test_samples_leave_the_view_as_the_window_moves_on(store: Store, store_engine: Engine) -> None:
    store.record_observation(observation(instance("101")), T0)
    for minute in range(0, 120, 10):
        _record(store, T0 + minutes(minute))
    _view(store, T0 + minutes(60))

    view = _assert_same_as_fresh(store, store_engine, T0 + minutes(110))

    assert view.instances[KEY].samples[0].at == T0 + minutes(50)


def test_a_longer_lookback_than_the_one_kept_still_sees_the_older_samples(
    store: Store, store_engine: Engine
) -> None:
    store.record_observation(observation(instance("101")), T0)
    for minute in range(0, 240, 15):
        _record(store, T0 + minutes(minute))
    _view(store, T0 + minutes(225))  # keeps the last hour only

    view = _assert_same_as_fresh(store, store_engine, T0 + minutes(225), timedelta(hours=3))

    assert view.instances[KEY].samples[0].at == T0 + minutes(45)
    # ... and the shorter window is still right afterwards.
    _assert_same_as_fresh(store, store_engine, T0 + minutes(225))


def test_samples_recorded_after_everything_was_pruned_are_seen(
    store: Store, store_engine: Engine
) -> None:
    # Pruning every row lets SQLite hand out the same ids again: what was kept must go.
    store.record_observation(observation(instance("101")), T0)
    for minute in range(5):
        _record(store, T0 + minutes(minute))
    _view(store, T0 + minutes(4))
    store.prune(T0 + timedelta(days=30), sample_retention=timedelta(days=1))

    # More new rows than there were before: the new ids pass the old highest one.
    later = T0 + timedelta(days=30)
    for minute in range(6):
        _record(store, later + minutes(minute), sm=70.0)
    view = _assert_same_as_fresh(store, store_engine, later + minutes(5))

    assert [s.at for s in view.instances[KEY].samples] == [later + minutes(m) for m in range(6)]


def test_the_latest_account_snapshot_follows_every_poll(store: Store, store_engine: Engine) -> None:
    store.record_observation(observation(instance("101"), balance=25.0), T0)
    _view(store, T0)
    Store(store_engine).record_observation(
        observation(instance("101"), at=T0 + minutes(1), balance=24.0), T0 + minutes(1)
    )
    # A poll whose account query failed records no snapshot: the last known balance stays.
    store.record_observation(
        observation(instance("101"), at=T0 + minutes(2), balance=None, problems={"account": "x"}),
        T0 + minutes(2),
    )

    view = _assert_same_as_fresh(store, store_engine, T0 + minutes(2))

    latest = view.accounts[ACCOUNT].latest
    assert latest is not None
    assert latest.balance_usd == 24.0


def test_samples_another_store_on_the_same_database_records_are_seen(
    store: Store, store_engine: Engine
) -> None:
    store.record_observation(observation(instance("101")), T0)
    _record(store, T0)
    _view(store, T0)

    # Another Store (another process, e.g. `watchdog-gpu once`) writes to the same file.
    _record(Store(store_engine), T0 + minutes(1), sm=90.0)
    view = _assert_same_as_fresh(store, store_engine, T0 + minutes(1))

    assert [s.sm for s in view.instances[KEY].samples] == [0.0, 90.0]


@pytest.mark.parametrize("seed", range(5))
def test_random_recording_and_loading_always_give_the_fresh_view(
    store: Store, store_engine: Engine, seed: int
) -> None:
    rng = random.Random(seed)
    ids = ("101", "102", "103")
    store.record_observation(observation(*(instance(i) for i in ids)), T0)
    now = T0
    for _ in range(60):
        now += minutes(rng.choice((0, 1, 1, 2, 7, 30)))
        for _ in range(rng.randrange(4)):
            # Mostly now, sometimes late (earlier than recorded ones) or ahead of the clock.
            at = now + minutes(rng.choice((0, 0, 0, -1, -5, -45, -200, 3)))
            target = rng.choice(ids)
            gpus = [sample(target, at, gpu, sm=rng.choice((0.0, 50.0, None))) for gpu in (0, 1)]
            store.record_probe(probe(target, at, *gpus))
        if rng.random() < 0.3:
            # Sometimes from another Store, as another process on the same file would.
            writer = store if rng.random() < 0.7 else Store(store_engine)
            balance = rng.choice((None, 10.0, 25.0))
            writer.record_observation(
                observation(*(instance(i) for i in ids), at=now, balance=balance), now
            )
        if rng.random() < 0.05:
            store.prune(now, sample_retention=timedelta(hours=rng.choice((1, 2, 4))))
        lookback = timedelta(minutes=rng.choice((30, 60, 60, 60, 180)))
        _assert_same_as_fresh(store, store_engine, now, lookback)


def test_a_loaded_view_keeps_its_samples_while_the_cache_slides_and_sorts(
    store: Store, store_engine: Engine
) -> None:
    # A view shares the cache's sample columns (no copy per tick). Later loads append to them,
    # drop old rows (past 64 dropped rows the cache copies the rest into new arrays) and sort
    # a late row in: none of it may change what an earlier view holds.
    store.record_observation(observation(instance("101")), T0)
    for minute in range(100):
        _record(store, T0 + minutes(minute), sm=float(minute % 7))
    early = _view(store, T0 + minutes(99))
    before = list(early.instances[KEY].samples)
    assert len(before) == 61  # the hour up to minute 99
    for minute in range(100, 200):
        _record(store, T0 + minutes(minute), sm=33.3)  # widens the metric columns to double
        _view(store, T0 + minutes(minute))
    _record(store, T0 + minutes(150) + timedelta(seconds=30), sm=5.5)  # late: sorted in
    late = _assert_same_as_fresh(store, store_engine, T0 + minutes(199))
    assert list(early.instances[KEY].samples) == before
    assert [s.sm for s in late.instances[KEY].samples][-1] == 33.3
    assert 5.5 in [s.sm for s in late.instances[KEY].samples]


def _noting(build: Callable[[Any], Any], reads: list[list[Any]]) -> Callable[[Any], Any]:
    """``build`` that first notes the rows it was given, in their order, into ``reads``."""

    def noted(rows: Any) -> Any:
        reads.append(list(rows))
        return build(reads[-1])

    return noted


# One probe round: (instance, minutes from T0, GPU, status) per row, recorded in this order.
_ROUND = st.lists(
    st.tuples(
        st.sampled_from(("101", "102")),
        st.integers(-20, 20),
        st.integers(0, 2),
        st.sampled_from((ProbeStatus.OK, ProbeStatus.UNREACHABLE)),
    ),
    max_size=8,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rounds=st.lists(_ROUND, min_size=1, max_size=4))
def test_the_rows_added_since_a_load_come_in_the_order_of_the_whole_query(
    store: Store, store_engine: Engine, rounds: list[list[tuple[str, int, int, ProbeStatus]]]
) -> None:
    # A load reads the rows added since the last one by id (not through the ``at`` index) and
    # sorts them: the cache must get them in the order the query with its ORDER BY gives.
    history = FleetHistory()
    read: dict[str, list[list[Any]]] = {"samples": [], "probes": []}
    caches: list[tuple[str, RecentRows[Any], Any]] = [
        ("samples", history.samples, SAMPLES_QUERY),
        ("probes", history.probes, PROBES_QUERY),
    ]
    for name, cache, _query in caches:
        cache._build = _noting(cache._build, read[name])
    since, now = T0 - minutes(60), T0 + minutes(60)
    newest = None
    for rows in [[], *rounds]:
        # Rows with earlier instants and lower GPUs recorded after later ones: their ids and
        # the query's order disagree.
        store.record_samples(sample(i, T0 + minutes(m), gpu) for i, m, gpu, _ in rows)
        store.record_probes(
            replace(probe(i, T0 + minutes(m)), status=status) for i, m, _, status in rows
        )
        with store_engine.connect() as conn:
            before, newest = newest, history.newest_ids(conn)
            for name, cache, _query in caches:
                cache.load(conn, since, now, getattr(newest, name))
            if before is None:
                continue  # the first load reads the window (ordered in SQL)
            for name, _cache, query in caches:
                table = query.get_final_froms()[0]
                expected = conn.execute(
                    query.where(table.c.id > getattr(before, name), table.c.at >= since)
                ).all()
                added = read[name][-1] if getattr(newest, name) > getattr(before, name) else []
                assert [tuple(row) for row in added] == [tuple(row) for row in expected]
