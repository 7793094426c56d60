"""A poll rewrites only the instances that changed (``store/written_instances.py``).

The property: whatever the polls list (values changed, kept, or the same in another type or time
zone; instances absent, gone, back), whichever polls fail half-way and roll back, the database
ends up holding exactly what a store that writes every instance in full holds — every table,
value for value, as the driver returns them. On SQLite and, in the PostgreSQL pass, PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, event, text

from tests.integration.store_builders import ACCOUNT, T0, instance, minutes, observation
from tests.support.databases import migrated_engines
from watchdog_gpu.model import AccountObservation, InstanceSnapshot, InstanceState
from watchdog_gpu.store import Store, observations
from watchdog_gpu.store.schema import metadata
from watchdog_gpu.store.written_instances import Fingerprint, WrittenInstances

OTHER_ACCOUNT = "vast-other"
IDS = ("101", "102", "103")
EAST = timezone(timedelta(hours=9))


class WritesEverything(WrittenInstances):
    """The reference: never finds a row unchanged, so every listed instance is written in full
    (what every poll did before)."""

    def holds(self, pk: int, written: Fingerprint | None) -> bool:
        return False


class Boom(Exception):
    """A failure after a poll was recorded in a batch: the batch rolls back."""


def listed(draw: st.DrawFn, account: str, instance_id: str, minute: int) -> InstanceSnapshot:
    at = T0 + minutes(minute)
    base = instance(
        instance_id,
        draw(st.sampled_from([InstanceState.RUNNING] * 3 + list(InstanceState))),
        at=at,
        account=account,
        compute=draw(st.sampled_from([0.5, 0.5, 0.75, None])),
        name=draw(st.sampled_from([None, "renamed"])),
    )
    # The same value in another type or time zone is another value to write.
    created = base.created_at
    assert created is not None
    return replace(
        base,
        interruptible=draw(st.sampled_from([True, True, False])),
        created_at=draw(st.sampled_from([created, created, created.astimezone(EAST)])),
        provider_gpu_util_percent=draw(st.sampled_from([(12.0, None), (12.0, None), (12, None)])),
        public_ports=draw(st.sampled_from([(22, 8888), (22, 8888), (22,)])),
        labels=draw(st.sampled_from([{"team": "vision"}] * 2 + [{"team": "nlp"}, {}])),
        storage_usd_per_hour=draw(st.sampled_from([0.02, 0.02, 1])),
    )


@st.composite
def polls(draw: st.DrawFn) -> list[tuple[list[AccountObservation], bool]]:
    """Rounds of polls (one batch each): the accounts' listings, and whether the batch fails
    after recording them."""
    rounds = []
    for minute in range(draw(st.integers(1, 8))):
        round_ = []
        for account in draw(st.sampled_from([(ACCOUNT,), (ACCOUNT, OTHER_ACCOUNT)])):
            ids = draw(st.lists(st.sampled_from(IDS), unique=True, max_size=len(IDS)))
            snapshots = [listed(draw, account, f"{account}-{i}", minute) for i in ids]
            round_.append(observation(*snapshots, at=T0 + minutes(minute), account=account))
        rounds.append((round_, draw(st.booleans()) and draw(st.booleans())))
    return rounds


def record(store: Store, rounds: list[tuple[list[AccountObservation], bool]], start: int) -> None:
    for minute, (round_, fails) in enumerate(rounds, start=start):
        try:
            with store.batch():
                for listing in round_:
                    store.record_observation(listing, T0 + minutes(minute))
                if fails:
                    raise Boom
        except Boom:
            pass


def contents(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's rows as the driver returns them, in primary-key order."""
    tables: dict[str, list[tuple[Any, ...]]] = {}
    with engine.connect() as connection:
        for table in metadata.sorted_tables:
            order = ", ".join(column.name for column in table.primary_key.columns)
            query = f"SELECT * FROM {table.name} ORDER BY {order}"
            tables[table.name] = [tuple(row) for row in connection.exec_driver_sql(query)]
    return tables


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[tuple[Engine, Engine]]:
    with migrated_engines(tmp_path, "changed-only", "in-full") as (first, second):
        yield first, second


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rounds=polls())
def test_the_database_holds_what_writing_every_instance_in_full_writes(
    engines: tuple[Engine, Engine], rounds: list[tuple[list[AccountObservation], bool]]
) -> None:
    changed_only, in_full = Store(engines[0]), Store(engines[1])
    in_full._written = WritesEverything()
    # Each example continues the same two databases, later in time (ids go on growing).
    start = 10 * len(contents(engines[0])["account_snapshots"])

    record(changed_only, rounds, start)
    record(in_full, rounds, start)

    assert contents(engines[0]) == contents(engines[1])


def test_an_unchanged_instance_gets_only_the_listing_instants(store: Store) -> None:
    updates: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.startswith("UPDATE instances"):
            updates.append(" ".join(statement.split()))

    event.listen(store.engine, "before_cursor_execute", seen)
    store.record_observation(observation(instance("101")), T0)
    store.record_observation(observation(instance("101", at=T0 + minutes(1))), T0 + minutes(1))
    renamed = instance("101", at=T0 + minutes(2), name="renamed")
    store.record_observation(observation(renamed), T0 + minutes(2))

    assert len(updates) == 2
    assert updates[0].startswith("UPDATE instances SET observed_at=")
    assert "name=" not in updates[0]
    assert "last_seen=" in updates[0]
    assert "name=" in updates[1]  # a changed instance is written in full
    with store.engine.connect() as connection:
        row = connection.execute(text("SELECT name, last_seen FROM instances")).one()
    assert row[0] == "renamed"


def test_a_batch_that_rolls_back_leaves_nothing_believed_written(store: Store) -> None:
    store.record_observation(observation(instance("101")), T0)
    renamed = instance("101", at=T0 + minutes(1), name="renamed")
    record(store, [([observation(renamed)], True)], start=1)
    # The rename was rolled back: listing it again must write it.
    store.record_observation(observation(renamed), T0 + minutes(2))

    with store.engine.connect() as connection:
        assert connection.execute(text("SELECT name FROM instances")).scalar_one() == "renamed"


def test_a_poll_that_fails_in_a_batch_that_commits_forgets_what_was_believed_written(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The instances of a poll are written, then recording its volumes fails; the caller goes
    on and the batch commits the instance rows. What the process believed written before is
    forgotten (``WrittenInstances.forget_all``): when the listing goes back to the old values,
    the row gets them again."""
    store.record_observation(observation(instance("101", name="train")), T0)

    def volumes_fail(*_: object) -> None:
        raise Boom("recording the volumes failed")

    with store.batch():
        monkeypatch.setattr(observations, "record_volumes", volumes_fail)
        renamed = instance("101", at=T0 + minutes(1), name="renamed")
        with pytest.raises(Boom):
            store.record_observation(observation(renamed), T0 + minutes(1))
        monkeypatch.undo()
    with store.engine.connect() as connection:  # the rename was committed with the batch
        assert connection.execute(text("SELECT name FROM instances")).scalar_one() == "renamed"

    back = instance("101", at=T0 + minutes(2), name="train")  # what was written at T0
    store.record_observation(observation(back), T0 + minutes(2))

    with store.engine.connect() as connection:
        assert connection.execute(text("SELECT name FROM instances")).scalar_one() == "train"
