"""Store.batch: a phase of a tick is one write transaction."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

import pytest
from sqlalchemy import Connection, Engine, event

from tests.integration.store_builders import (
    ACCOUNT,
    T0,
    instance,
    minutes,
    observation,
    planned_notification,
    probe,
    sample,
)
from watchdog_gpu.store import Store
from watchdog_gpu.store.engine import SQLITE_BEGIN_OPTION

KEY = f"{ACCOUNT}/101"


@contextmanager
def _commits(engine: Engine) -> Iterator[list[object]]:
    seen: list[object] = []

    def count(connection: Connection) -> None:
        # Write transactions only: reads (another Store's view) commit their snapshot too.
        if connection.get_execution_options().get(SQLITE_BEGIN_OPTION) == "IMMEDIATE":
            seen.append(connection)

    event.listen(engine, "commit", count)
    try:
        yield seen
    finally:
        event.remove(engine, "commit", count)


def _record_a_phase(store: Store, at: datetime) -> None:
    store.record_observation(observation(instance("101"), instance("102"), at=at), at)
    store.record_poll_failure("runpod-main", "runpod", "timeout", "no answer", at)
    store.record_probe(probe("101", at, sample("101", at)))
    store.record_decision(
        at,
        audit_kind="warning",
        message="idle",
        notification=planned_notification(f"note-{at.isoformat()}", at=at),
    )
    store.list_findings()  # reads inside a batch see its writes (and do not commit)


def test_a_batch_commits_once_and_others_see_nothing_before(
    store: Store, store_engine: Engine
) -> None:
    with _commits(store_engine) as commits, store.batch():
        _record_a_phase(store, T0)
        assert Store(store_engine).latest_instances() == []
        assert store.notification_backlog() == 1  # this thread sees its own writes
        assert len(commits) == 0

    assert len(commits) == 1
    assert [r.snapshot.instance_id for r in Store(store_engine).latest_instances()] == [
        "101",
        "102",
    ]
    assert Store(store_engine).notification_backlog() == 1


def test_a_batch_that_raises_writes_nothing(store: Store, store_engine: Engine) -> None:
    def failing_phase() -> None:
        with store.batch():
            _record_a_phase(store, T0)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        failing_phase()

    assert store.latest_instances() == []
    assert store.notification_backlog() == 0
    assert store.list_audit_events() == []


def test_without_a_batch_every_call_commits_on_its_own(store: Store, store_engine: Engine) -> None:
    with _commits(store_engine) as commits:
        _record_a_phase(store, T0)

    assert len(commits) >= 4


def test_the_fleet_view_cache_holds_only_committed_rows(store: Store, store_engine: Engine) -> None:
    store.record_observation(observation(instance("101")), T0)
    store.record_probe(probe("101", T0, sample("101", T0)))
    inside: list[datetime] = []

    def failing_phase() -> None:
        with store.batch():
            at = T0 + minutes(1)
            store.record_probe(probe("101", at, sample("101", at, sm=90.0)))
            view = store.load_fleet_view(at, minutes(60), at - minutes(60)).instances[KEY]
            inside.extend(s.at for s in view.samples)
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        failing_phase()
    assert inside == [T0]  # the view inside the batch saw only committed rows
    at = T0 + minutes(2)
    store.record_probe(probe("101", at, sample("101", at, sm=50.0)))

    warm = store.load_fleet_view(at, minutes(60), at - minutes(60)).instances[KEY]
    fresh = Store(store_engine, keep_history=False).load_fleet_view(
        at, minutes(60), at - minutes(60)
    )
    assert warm.samples == fresh.instances[KEY].samples
    assert [s.sm for s in warm.samples] == [0.0, 50.0]


def test_batches_nest_into_the_outer_one(store: Store, store_engine: Engine) -> None:
    with _commits(store_engine) as commits, store.batch():
        with store.batch():
            store.record_observation(observation(instance("101")), T0)
        assert Store(store_engine).latest_instances() == []
        store.record_observation(observation(instance("101")), T0 + minutes(1))

    assert len(commits) == 1
