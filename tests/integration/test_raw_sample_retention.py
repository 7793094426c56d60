"""How long the daemon keeps raw GPU samples before rolling them up into hourly counts:
``watchdog.raw_sample_retention`` (two hours by default), never less than the rules' lookback."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import cast

import pytest

from tests.integration import store_builders as build
from watchdog_gpu.config import load_settings
from watchdog_gpu.executor import Executor
from watchdog_gpu.store import Store
from watchdog_gpu.store.rollup import RAW_SAMPLES_FOR
from watchdog_gpu.tick import Watchdog
from watchdog_gpu.wiring import tick_settings

EXAMPLE = Path(__file__).parents[2] / "config.example.toml"
HOURS = 6


def _raw_sample_times(database: Path) -> list[str]:
    with sqlite3.connect(database) as connection:
        rows = connection.execute("SELECT DISTINCT at FROM gpu_samples ORDER BY at").fetchall()
    return [row[0] for row in rows]


def test_the_default_is_two_hours_in_the_store_and_in_the_configuration() -> None:
    settings = load_settings(EXAMPLE, {})

    assert timedelta(hours=2) == RAW_SAMPLES_FOR
    assert settings.watchdog.raw_sample_retention == RAW_SAMPLES_FOR
    assert tick_settings(settings).raw_sample_retention == RAW_SAMPLES_FOR


@pytest.mark.parametrize(
    ("configured", "first_raw_hour"),
    [
        (None, 4),  # the default, 2 h before 18:00: 16:00 on stays raw
        (timedelta(hours=3), 3),  # 15:00 on
        # Shorter than the rules' lookback (73 minutes with the example's rules): the lookback
        # wins, 16:47 rounded down to its hour.
        (timedelta(minutes=30), 4),
        (timedelta(days=1), 0),  # longer than the history: nothing is rolled up
    ],
)
def test_the_tick_rolls_up_what_is_older_than_the_configured_time_and_the_lookback(
    tmp_path: Path, store: Store, configured: timedelta | None, first_raw_hour: int
) -> None:
    settings = load_settings(EXAMPLE, {})
    if configured is not None:
        watchdog_section = settings.watchdog.model_copy(update={"raw_sample_retention": configured})
        settings = settings.model_copy(update={"watchdog": watchdog_section})
    # The tick's prune reads only the store and its settings.
    watchdog = Watchdog(store, {}, cast(Executor, None), tick_settings(settings))
    store.record_observation(build.observation(build.instance("101")), build.T0)
    store.record_probes(
        build.probe("101", at, build.sample("101", at, 0, sm=90.0))
        for at in (build.T0 + build.minutes(m) for m in range(HOURS * 60))
    )

    watchdog.prune(build.T0 + timedelta(hours=HOURS))

    raw = _raw_sample_times(tmp_path / "watchdog-gpu.db")
    assert raw[0].startswith(f"2026-03-01 {12 + first_raw_hour}:00:00")
    assert len(raw) == (HOURS - first_raw_hour) * 60
    rolled = {hour.hour for hour in store.gpu_hours(build.ACCOUNT, "101")}
    assert rolled == {build.T0 + timedelta(hours=h) for h in range(first_raw_hour)}
    assert (
        sum(hour.samples for hour in store.gpu_hours(build.ACCOUNT, "101")) == first_raw_hour * 60
    )
