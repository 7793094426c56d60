"""``status``'s reduced sample load (``Store.load_status_view``): every instance shows the same
GPU activity as from the whole window, at every threshold and wherever the grouped pass splits
the window, and the rest of the view is the fleet view's. On SQLite and on PostgreSQL."""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeVar
from unittest import mock

import pytest
from sqlalchemy import Engine

from tests.integration.store_builders import T0, minutes
from tests.support.databases import fresh_database_url, postgres_server
from watchdog_gpu.commands.gpu_activity import gpu_activity
from watchdog_gpu.fleet import FleetView
from watchdog_gpu.model import (
    AccountObservation,
    AccountSnapshot,
    GpuSample,
    InstanceSnapshot,
    InstanceState,
    SampleSource,
    Verdict,
)
from watchdog_gpu.rules.idle_clock import IdleClockSettings
from watchdog_gpu.store import Store, create_engine_for, fleet_loader, upgrade_to_head

T = TypeVar("T")
LOOKBACKS = (timedelta(minutes=5), timedelta(hours=1, minutes=13), timedelta(days=2))
# Thresholds equal to recorded values (0, 3, 55.5) tell ``>`` from ``>=``; 2 makes the quiet
# instances' 3 % samples busy.
THRESHOLDS = (0.0, 2.0, 3.0, 55.5)
# The recent slice of the grouped pass: none (every sample in the older part), a few sampling
# steps, the default, and longer than any window (no older part).
RECENT_SLICES = (timedelta(0), timedelta(minutes=7), fleet_loader.STATUS_RECENT, timedelta(days=3))
MOODS = ("quiet", "wakes", "sleeps", "mixed", "gpu_stops")


def maybe(rng: random.Random, value: T, none_share: float = 0.3) -> T | None:
    return None if rng.random() < none_share else value


def status_sample(
    rng: random.Random, mood: str, instance_id: str, at: datetime, *, gpu: int, minute: int
) -> GpuSample | None:
    """One GPU's sample of a ``mood``: quiet (idle or recorded busy at 0 or 3 %, never NULL sm),
    wakes (idle, then busy from a minute on), sleeps (busy, then idle), mixed (anything: NULL
    sm, unknown, recorded busy below the thresholds), gpu_stops (GPU 1 stops reporting)."""
    if mood == "gpu_stops" and gpu == 1 and minute > 60:
        return None
    verdict = rng.choice([Verdict.IDLE, Verdict.IDLE, Verdict.BUSY])
    sm: float | None = rng.choice([0.0, 3.0])
    if (mood == "wakes" and minute > 85) or (mood == "sleeps" and minute < 40):
        verdict, sm = Verdict.BUSY, rng.choice([55.5, 100.0])
    elif mood in ("mixed", "gpu_stops") and rng.random() < 0.3:
        verdict, sm = rng.choice(list(Verdict)), maybe(rng, rng.choice([0.0, 3.0, 55.5]))
    return GpuSample(
        account="vast-a",
        instance_id=instance_id,
        at=at,
        gpu_index=gpu,
        verdict=verdict,
        source=SampleSource.DMON,
        sm=sm,
        mem=1.0,
        enc=maybe(rng, rng.choice([0.0, 3.0])),
        dec=maybe(rng, 0.0),
        jpg=None,
        ofa=maybe(rng, 0.0, 0.7),
    )


def running(name: str, at: datetime) -> InstanceSnapshot:
    return InstanceSnapshot(
        provider="vast",
        account="vast-a",
        instance_id=name,
        name=name,
        state=InstanceState.RUNNING,
        raw_state="running",
        observed_at=at,
        compute_usd_per_hour=1.0,
        gpu_count=2,
    )


def write_status_store(store: Store, seed: int) -> None:
    """Running instances of every mood, sampled each minute for 100 minutes (2 GPUs)."""
    rng = random.Random(seed)
    moods = {f"i{n}": MOODS[n % len(MOODS)] for n in range(15)}
    for minute in range(100):
        at = T0 + minutes(minute)
        if minute in (0, 99):
            store.record_observation(
                AccountObservation(
                    account=AccountSnapshot(provider="vast", account="vast-a", observed_at=at),
                    instances=tuple(running(name, at) for name in moods),
                ),
                at,
            )
        samples = [
            status_sample(rng, mood, name, at + jitter, gpu=gpu, minute=minute)
            for name, mood in moods.items()
            for gpu in range(2)
            for jitter in [timedelta(microseconds=rng.randint(0, 9))]
        ]
        store.record_samples(sample for sample in samples if sample is not None)


def without_samples(view: FleetView) -> FleetView:
    instances = {
        key: dataclasses.replace(instance, samples=()) for key, instance in view.instances.items()
    }
    return dataclasses.replace(view, instances=instances)


def assert_same_activity(store: Store, full: FleetView, lookback: timedelta) -> None:
    """Every threshold with the default split, every split at the lowest and a high threshold
    (a split and a threshold meet only in which rows the older part skips)."""
    now = full.now
    combinations = {(threshold, fleet_loader.STATUS_RECENT) for threshold in THRESHOLDS} | set(
        itertools.product((THRESHOLDS[0], THRESHOLDS[-1]), RECENT_SLICES)
    )
    for threshold, recent in sorted(combinations):
        with mock.patch.object(fleet_loader, "STATUS_RECENT", recent):
            reduced = store.load_status_view(now, lookback, now - lookback, threshold)
        assert without_samples(reduced) == without_samples(full)
        settings = IdleClockSettings(threshold_percent=threshold)
        for key, instance in full.instances.items():
            assert gpu_activity(reduced.instances[key], now, settings) == gpu_activity(
                instance, now, settings
            )
            assert len(reduced.instances[key].samples) <= len(instance.samples)


def check_reduced_load(engine: Engine, seed: int) -> None:
    write_status_store(Store(engine), seed)
    end = T0 + minutes(99)
    shown: set[tuple[str, bool]] = set()
    fewer = False
    for moment in (end, end - timedelta(minutes=37), end - timedelta(minutes=80)):
        for lookback in LOOKBACKS:
            store = Store(engine, keep_history=False)
            full = store.load_fleet_view(moment, lookback, moment - lookback)
            assert_same_activity(store, full, lookback)
            reduced = store.load_status_view(moment, lookback, moment - lookback, 55.5)
            fewer |= sum(map(len, (i.samples for i in reduced.instances.values()))) < sum(
                map(len, (i.samples for i in full.instances.values()))
            )
            for threshold in THRESHOLDS:
                settings = IdleClockSettings(threshold_percent=threshold)
                shown |= {
                    (activity.status, activity.idle_at_least)
                    for activity in (
                        gpu_activity(instance, moment, settings)
                        for instance in full.instances.values()
                    )
                }
    assert {("busy", False), ("idle", False), ("idle", True), ("unknown", False)} <= shown
    assert fewer, "the reduced load reads fewer samples than the window"


@pytest.mark.parametrize("seed", range(2))
def test_status_reduced_sample_load_gives_the_same_activity(seed: int, tmp_path: Path) -> None:
    engine = create_engine_for(fresh_database_url(tmp_path))
    upgrade_to_head(engine)
    try:
        check_reduced_load(engine, seed)
    finally:
        engine.dispose()


@pytest.fixture
def pg_engine() -> Iterator[Engine]:
    server = postgres_server()
    url = server.create_database()
    engine = create_engine_for(url)
    upgrade_to_head(engine)
    yield engine
    engine.dispose()
    server.drop_database(url)


@pytest.mark.postgres
def test_status_reduced_sample_load_on_postgresql(pg_engine: Engine) -> None:
    check_reduced_load(pg_engine, 0)
