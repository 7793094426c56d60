"""Retention, audit, findings, protections, snoozes, host keys and the store's guard rails."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, event

from tests.integration.store_builders import (
    ACCOUNT,
    T0,
    instance,
    minutes,
    observation,
    planned_action,
    planned_notification,
    probe,
    sample,
)
from watchdog_gpu.errors import StoreError
from watchdog_gpu.fleet import ProtectionKind
from watchdog_gpu.model import ActionKind, Finding, Severity
from watchdog_gpu.store import (
    NaiveDatetimeError,
    Store,
    create_engine_for,
    sqlite_url,
    upgrade_to_head,
)


def _count(engine: Engine, table: str) -> int:
    with engine.connect() as connection:
        return int(connection.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar_one())


def test_prune_deletes_old_samples_probes_and_snapshots_and_keeps_all_history(
    store_engine: Engine, store: Store
) -> None:
    database = store_engine
    old, recent = T0, T0 + timedelta(days=8)
    for at in (old, recent):
        store.record_observation(observation(instance("101", at=at), at=at), at)
        # Distinct details: identical outcomes would be one run, kept while its latest is.
        outcome = probe("101", at, sample("101", at, 0), sample("101", at, 1))
        store.record_probe(replace(outcome, detail=f"probe at {at.isoformat()}"))
        store.add_audit_event("action.executed", at, account=ACCOUNT, message="destroyed")
        store.enqueue_action(planned_action(f"action-{at.isoformat()}", at=at))
        store.enqueue_notification(planned_notification(f"note-{at.isoformat()}", at=at))
    store.record_observation(observation(at=recent + minutes(1)), recent + minutes(1))

    deleted = store.prune(recent + minutes(1), timedelta(days=7))

    assert deleted == 2 + 1 + 1  # two old samples, one old probe, one old account snapshot
    assert _count(database, "gpu_samples") == 2
    assert _count(database, "probe_outcomes") == 1
    assert _count(database, "account_snapshots") == 2
    assert _count(database, "instance_spans") == 2  # running since the old day, then gone
    assert _count(database, "audit_events") == 2
    assert _count(database, "actions") == 2
    assert _count(database, "notifications") == 2


def test_prune_keeps_the_newest_account_snapshot_however_old(store: Store) -> None:
    store.record_observation(observation(balance=12.5), T0)

    store.prune(T0 + timedelta(days=30), timedelta(days=7))

    (record,) = store.latest_accounts()
    assert record.view.latest is not None
    assert record.view.latest.balance_usd == 12.5


def test_audit_events_come_back_oldest_first_and_a_limit_keeps_the_most_recent(
    store: Store,
) -> None:
    for number in range(5):
        store.add_audit_event(
            "finding",
            T0 + minutes(number),
            account=ACCOUNT,
            instance_id="101",
            rule="idle_gpu",
            message=f"event {number}",
            data={"number": number, "nested": {"dollars": 0.52, "states": ["running"]}},
        )
    store.add_audit_event("poll.failed", T0 + minutes(10), account="other")

    latest = store.list_audit_events(limit=2)
    mine = store.list_audit_events(since=T0 + minutes(3), account=ACCOUNT)

    assert [event.message for event in latest] == ["event 4", ""]
    assert [event.message for event in mine] == ["event 3", "event 4"]
    assert mine[0].data == {"number": 3, "nested": {"dollars": 0.52, "states": ["running"]}}
    assert (mine[0].kind, mine[0].rule, mine[0].instance_id) == ("finding", "idle_gpu", "101")


def _finding(summary: str, *, due_in: int = 30) -> Finding:
    return Finding(
        rule="idle_gpu",
        account=ACCOUNT,
        instance_id="101",
        severity=Severity.WARNING,
        action=ActionKind.DESTROY,
        summary=summary,
        episode_started_at=T0,
        due_at=T0 + minutes(due_in),
        evidence={"idle_minutes": due_in},
        usd_per_hour_at_stake=0.52,
    )


def test_a_finding_seen_on_several_ticks_is_one_episode_with_its_first_and_last_sighting(
    store: Store,
) -> None:
    store.record_findings([_finding("idle 10 min")], T0 + minutes(10))
    store.record_findings([_finding("idle 20 min", due_in=31)], T0 + minutes(20))

    (record,) = store.list_findings()

    assert record.episode_key == _finding("x").episode_key
    assert (record.first_seen, record.last_seen) == (T0 + minutes(10), T0 + minutes(20))
    assert record.summary == "idle 20 min"
    assert record.due_at == T0 + minutes(31)
    assert record.evidence == {"idle_minutes": 31}
    assert store.list_findings(seen_since=T0 + minutes(21)) == []


def test_a_protection_is_added_once_and_removed_by_the_same_kind_value_and_account(
    store: Store,
) -> None:
    assert store.add_protection(ProtectionKind.INSTANCE_ID, "101", T0, account=ACCOUNT)
    assert not store.add_protection(ProtectionKind.INSTANCE_ID, "101", T0, account=ACCOUNT)
    assert store.add_protection(ProtectionKind.INSTANCE_ID, "101", T0)  # any account: another one

    assert not store.remove_protection(ProtectionKind.INSTANCE_ID, "101", account="other")
    assert store.remove_protection(ProtectionKind.INSTANCE_ID, "101", account=ACCOUNT)

    assert [(p.value, p.account) for p in store.list_protections()] == [("101", None)]


def test_snoozes_expire_and_must_end_in_the_future(store: Store) -> None:
    snooze = store.add_snooze(ACCOUNT, "101", T0 + timedelta(hours=2), T0, "one more epoch")

    assert snooze.until == T0 + timedelta(hours=2)
    assert store.list_snoozes(T0 + minutes(119)) == [snooze]
    assert store.list_snoozes(T0 + timedelta(hours=2)) == []
    with pytest.raises(ValueError, match="after now"):
        store.add_snooze(ACCOUNT, "101", T0, T0)


def test_the_first_host_key_of_an_instance_stays_pinned_until_forgotten(store: Store) -> None:
    assert store.get_pinned_host_key(ACCOUNT, "101") is None

    store.pin_host_key(ACCOUNT, "101", "ssh-ed25519", "AAAAfirst", T0)
    store.pin_host_key(ACCOUNT, "101", "ssh-rsa", "AAAAsecond", T0 + minutes(1))
    assert store.get_pinned_host_key(ACCOUNT, "101") == ("ssh-ed25519", "AAAAfirst")
    assert store.get_pinned_host_key("other", "101") is None

    store.forget_host_key(ACCOUNT, "101")
    store.forget_host_key(ACCOUNT, "101")  # forgetting twice is fine
    store.pin_host_key(ACCOUNT, "101", "ssh-rsa", "AAAAsecond", T0 + minutes(2))
    assert store.get_pinned_host_key(ACCOUNT, "101") == ("ssh-rsa", "AAAAsecond")


def test_a_naive_datetime_is_refused_and_nothing_is_written(store: Store) -> None:
    naive = datetime(2026, 3, 1, 12, 0)  # naive: the point of the test

    with pytest.raises(NaiveDatetimeError):
        store.add_audit_event("x", naive)
    with pytest.raises(NaiveDatetimeError):
        store.record_observation(observation(instance("101")), naive)

    assert store.list_audit_events() == []
    assert store.latest_instances() == []


def test_datetimes_in_other_time_zones_are_stored_and_returned_as_utc(store: Store) -> None:
    from datetime import timezone

    tokyo = T0.astimezone(timezone(timedelta(hours=9)))
    store.add_audit_event("x", tokyo)

    (event_,) = store.list_audit_events()

    assert event_.at == T0
    assert event_.at.utcoffset() == timedelta(0)


def test_a_database_without_tables_raises_a_store_error(tmp_path: Path) -> None:
    store = Store(create_engine_for(sqlite_url(tmp_path / "never-migrated.db")))

    with pytest.raises(StoreError, match="no such table"):
        store.notification_backlog()


def test_writes_begin_immediate_and_reads_begin_deferred(tmp_path: Path) -> None:
    # SQLite only (whatever engine the other store tests run on): BEGIN IMMEDIATE is its way
    # of taking the write lock up front; PostgreSQL's row locks need no such statement.
    store_engine = create_engine_for(sqlite_url(tmp_path / "begin.db"))
    upgrade_to_head(store_engine)
    statements: list[str] = []

    @event.listens_for(store_engine, "before_cursor_execute")
    def _capture(*args: object) -> None:
        statement = str(args[2])  # (conn, cursor, statement, parameters, context, executemany)
        if statement.startswith("BEGIN"):
            statements.append(statement)

    store = Store(store_engine)
    store.add_audit_event("x", T0)
    store.list_audit_events()

    assert statements == ["BEGIN IMMEDIATE", "BEGIN"]
