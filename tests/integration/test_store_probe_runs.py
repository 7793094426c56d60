"""Probe outcomes are stored as runs: a probe identical to its instance's latest one extends that
run instead of adding a row, and the fleet view sees each run as its latest probe."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from datetime import datetime
from pathlib import Path

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
from watchdog_gpu.model import ProbeOutcome, ProbeStatus
from watchdog_gpu.store import Store

KEY = f"{ACCOUNT}/101"
LOOKBACK = minutes(60)


def _rows(database: Path) -> list[tuple[str, str, str, int, str]]:
    with sqlite3.connect(database) as connection:
        return connection.execute(
            "SELECT instance_id, first_at, at, repeats, status FROM probe_outcomes ORDER BY id"
        ).fetchall()


def _ok(at: datetime, instance_id: str = "101") -> ProbeOutcome:
    return probe(instance_id, at, sample(instance_id, at, 0), sample(instance_id, at, 1))


def _failed(at: datetime, detail: str = "connection refused") -> ProbeOutcome:
    return replace(_ok(at), status=ProbeStatus.UNREACHABLE, samples=(), detail=detail)


def _probes(store: Store, now: datetime) -> tuple[ProbeOutcome, ...]:
    return store.load_fleet_view(now, LOOKBACK, now - LOOKBACK).instances[KEY].probes


def test_identical_probes_are_one_row_with_their_first_and_latest_time(
    tmp_path: Path, store: Store
) -> None:
    store.record_observation(observation(instance("101"), instance("102")), T0)
    for minute in range(5):
        at = T0 + minutes(minute)
        store.record_probes([_ok(at), _ok(at, "102")])

    rows = _rows(tmp_path / "watchdog-gpu.db")
    assert [(row[0], row[3]) for row in rows] == [("101", 5), ("102", 5)]
    assert rows[0][1].startswith("2026-03-01 12:00")
    assert rows[0][2].startswith("2026-03-01 12:04")
    (run,) = _probes(store, T0 + minutes(4))
    assert (run.at, run.first_at, run.repeats) == (T0 + minutes(4), T0, 5)
    # Every probe's samples are kept: runs only compact the outcomes.
    view = store.load_fleet_view(T0 + minutes(4), LOOKBACK, T0).instances[KEY]
    assert len(view.samples) == 10


def test_a_changed_outcome_starts_a_new_run_and_a_return_starts_another(
    tmp_path: Path, store: Store
) -> None:
    store.record_observation(observation(instance("101")), T0)
    outcomes = [_ok(T0), _ok(T0 + minutes(1)), _failed(T0 + minutes(2)), _failed(T0 + minutes(3))]
    outcomes += [_failed(T0 + minutes(4), "timed out"), _ok(T0 + minutes(5))]
    for outcome in outcomes[:3]:
        store.record_probe(outcome)
    store.record_probes(outcomes[3:])  # several of one instance in one batch

    assert [(row[3], row[4]) for row in _rows(tmp_path / "watchdog-gpu.db")] == [
        (2, "ok"),
        (2, "unreachable"),
        (1, "unreachable"),  # another detail: another run
        (1, "ok"),
    ]
    assert [(p.at, p.repeats) for p in _probes(store, T0 + minutes(5))] == [
        (T0 + minutes(1), 2),
        (T0 + minutes(3), 2),
        (T0 + minutes(4), 1),
        (T0 + minutes(5), 1),
    ]


def test_an_interactive_login_is_its_own_run(tmp_path: Path, store: Store) -> None:
    store.record_observation(observation(instance("101")), T0)
    store.record_probe(_ok(T0))
    store.record_probe(replace(_ok(T0 + minutes(1)), interactive_login=True))
    store.record_probe(replace(_ok(T0 + minutes(2)), interactive_login=True))

    logins = [p for p in _probes(store, T0 + minutes(2)) if p.interactive_login]
    assert [(p.at, p.repeats) for p in logins] == [(T0 + minutes(2), 2)]


def test_a_late_probe_does_not_extend_a_newer_run(tmp_path: Path, store: Store) -> None:
    store.record_observation(observation(instance("101")), T0)
    store.record_probe(_ok(T0 + minutes(5)))
    store.record_probe(_ok(T0 + minutes(2)))

    assert [row[3] for row in _rows(tmp_path / "watchdog-gpu.db")] == [1, 1]


def test_a_warm_store_sees_each_extended_run_once(store: Store, store_engine: Engine) -> None:
    store.record_observation(observation(instance("101")), T0)
    seen = []
    for minute in range(6):
        now = T0 + minutes(minute)
        outcome = _ok(now) if minute != 3 else _failed(now)
        # Half of the probes come from another Store, as from another process on the file.
        (store if minute % 2 else Store(store_engine)).record_probe(outcome)
        warm = _probes(store, now)
        assert warm == _probes(Store(store_engine, keep_history=False), now)
        seen.append([(p.status.value, p.repeats) for p in warm])

    assert seen[2] == [("ok", 3)]
    assert seen[-1] == [("ok", 3), ("unreachable", 1), ("ok", 2)]


def test_how_many_samples_a_probe_brought_does_not_split_a_run_whether_it_brought_any_does(
    tmp_path: Path, store: Store
) -> None:
    # A GPU used in bursts folds into a different number of samples every round.
    store.record_observation(observation(instance("101")), T0)
    for minute, gpus in enumerate([(0, 1), (0, 1, 1), (0,), (0, 1, 1, 1)]):
        at = T0 + minutes(minute)
        store.record_probes([probe("101", at, *(sample("101", at, gpu) for gpu in gpus))])
    at = T0 + minutes(4)
    store.record_probes([probe("101", at)])  # OK and the same text, but no sample

    rows = _rows(tmp_path / "watchdog-gpu.db")
    assert [row[3] for row in rows] == [4, 1]
    with sqlite3.connect(tmp_path / "watchdog-gpu.db") as connection:
        counts = connection.execute("SELECT sample_count FROM probe_outcomes ORDER BY id")
        assert [count for (count,) in counts] == [4, 0]  # a run keeps its latest count
