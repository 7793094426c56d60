"""Migration 0004 (probe runs, sample rollups) on a database a daemon filled before it."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

from alembic import command

from tests.integration.store_builders import ACCOUNT, T0, instance, minutes, observation, probe
from tests.integration.store_builders import sample as gpu_sample
from watchdog_gpu.store import Store, create_engine_for, sqlite_url, upgrade_to_head
from watchdog_gpu.store.migrate import alembic_config, current_revision, head_revision

KEY = f"{ACCOUNT}/101"


def _fill_at_0003(database: Path) -> None:
    """What revision 0003 (the head before this one) stores: one probe outcome row per probe,
    samples with their own per-instance index."""
    engine = create_engine_for(sqlite_url(database))
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0003")
    engine.dispose()
    rows = [
        (ACCOUNT, "101", f"2026-03-01 {12 + m // 60:02d}:{m % 60:02d}:00.000000") for m in range(90)
    ]
    with sqlite3.connect(database) as connection:
        connection.executemany(
            "INSERT INTO probe_outcomes (account, instance_id, at, status, duration_seconds,"
            " detail, sample_count, interactive_login) VALUES (?, ?, ?, 'ok', 1.5, '', 1, 0)",
            rows,
        )
        connection.executemany(
            "INSERT INTO gpu_samples (account, instance_id, at, gpu_index, verdict, source, sm,"
            " mem, enc, dec) VALUES (?, ?, ?, 0, 'idle', 'dmon', 0.0, 1.0, 0.0, 0.0)",
            rows,
        )


def test_a_populated_database_migrates_and_keeps_its_probes_and_samples(tmp_path: Path) -> None:
    database = tmp_path / "old.db"
    _fill_at_0003(database)
    engine = create_engine_for(sqlite_url(database))

    result = upgrade_to_head(engine)

    assert (result.before, result.after) == ("0003", head_revision())
    assert current_revision(engine) == head_revision()
    store = Store(engine)
    store.record_observation(observation(instance("101")), T0 + minutes(89))
    now = T0 + minutes(89)
    view = store.load_fleet_view(now, minutes(30), now - minutes(30)).instances[KEY]
    # Each old row is a run of one probe.
    assert len(view.probes) == 31
    assert all(p.first_at == p.at and p.repeats == 1 for p in view.probes)
    assert len(view.samples) == 31

    # The next identical probe extends the newest old row.
    at = now + minutes(1)
    store.record_probe(probe("101", at, gpu_sample("101", at)))
    later = store.load_fleet_view(at, minutes(30), at - minutes(30)).instances[KEY]
    assert (later.probes[-1].first_at, later.probes[-1].repeats) == (now, 2)

    # Prune rolls the old samples up (12:00-12:59 and 13:00-13:29, more than a day old).
    store.prune(T0 + timedelta(days=1, hours=2))
    hours = store.gpu_hours(ACCOUNT, "101")
    assert [(h.hour, h.samples, h.idle) for h in hours] == [
        (T0, 60, 60),
        (T0 + minutes(60), 31, 31),
    ]


def test_the_migration_downgrades_to_0003_and_back(tmp_path: Path) -> None:
    database = tmp_path / "old.db"
    _fill_at_0003(database)
    engine = create_engine_for(sqlite_url(database))
    upgrade_to_head(engine)
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "0003")
    with sqlite3.connect(database) as connection:
        assert connection.execute("SELECT count(*) FROM probe_outcomes").fetchone() == (90,)

    assert upgrade_to_head(engine).after == head_revision()
