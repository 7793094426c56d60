"""The store on a real PostgreSQL server (started by the tests on 127.0.0.1): migrations from a
populated database, compare-and-set claims across two engines, and ``db copy`` from SQLite.

These tests always use PostgreSQL (whatever ``WATCHDOG_GPU_TEST_DATABASE`` says); they skip on a
laptop without the ``postgresql`` package and fail in CI (``tests/support/postgres.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from prometheus_client import CollectorRegistry, generate_latest
from sqlalchemy import Engine, inspect, select

from tests.integration.store_builders import (
    T0,
    instance,
    minutes,
    observation,
    planned_action,
    planned_notification,
    probe,
    sample,
)
from tests.scenarios.helpers import load
from tests.support.databases import postgres_server
from tests.support.http_receiver import free_port
from watchdog_gpu.clock import VirtualClock
from watchdog_gpu.commands.common import Source
from watchdog_gpu.commands.status import status_json, status_lines
from watchdog_gpu.commands.status_collect import collect
from watchdog_gpu.metrics import MetricsConfig
from watchdog_gpu.metrics.collector import StoreCollector
from watchdog_gpu.model import ActionStatus
from watchdog_gpu.sim.simulate import simulation
from watchdog_gpu.store import Store, create_engine_for, sqlite_url, upgrade_to_head
from watchdog_gpu.store.leadership import LeadershipLostError, PostgresLeadership
from watchdog_gpu.store.lock import LockHeldError, database_lock
from watchdog_gpu.store.migrate import alembic_config, current_revision, head_revision
from watchdog_gpu.store.schema import metadata

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg_url() -> Iterator[str]:
    server = postgres_server()
    url = server.create_database()
    yield url
    server.drop_database(url)


@pytest.fixture
def pg_engine(pg_url: str) -> Iterator[Engine]:
    engine = create_engine_for(pg_url)
    yield engine
    engine.dispose()


def _counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as connection:
        return {
            table.name: len(connection.execute(select(table)).all())
            for table in metadata.sorted_tables
        }


def _populate(store: Store) -> None:
    for step in range(3):
        at = T0 + minutes(step)
        store.record_observation(observation(instance("101", at=at), at=at), at)
        store.record_probe(probe("101", at, sample("101", at, 0), sample("101", at, 1)))
        store.add_audit_event("action.executed", at, message=f"event {step}")
        store.enqueue_action(planned_action(f"action-{step}", at=at))
        store.enqueue_notification(planned_notification(f"note-{step}", at=at))


def test_the_migrations_create_the_schema_on_postgresql_and_agree_with_the_models(
    pg_engine: Engine,
) -> None:
    result = upgrade_to_head(pg_engine)

    assert (result.before, result.after) == (None, head_revision())
    assert set(inspect(pg_engine).get_table_names()) == {
        *(table.name for table in metadata.sorted_tables),
        "alembic_version",
    }
    config = alembic_config()
    with pg_engine.connect() as connection:
        config.attributes["connection"] = connection
        command.check(config)  # raises when a model and the migrations disagree on PostgreSQL
    assert upgrade_to_head(pg_engine).changed is False


def test_a_populated_postgresql_database_keeps_its_rows_through_a_downgrade_and_upgrade(
    pg_engine: Engine,
) -> None:
    upgrade_to_head(pg_engine)
    _populate(Store(pg_engine))
    before = _counts(pg_engine)
    config = alembic_config()
    with pg_engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "0001")
    assert current_revision(pg_engine) == "0001"

    upgrade_to_head(pg_engine)

    assert current_revision(pg_engine) == head_revision()
    assert _counts(pg_engine) == before
    assert before["audit_events"] == 3
    assert before["actions"] == 3


def test_two_daemons_engines_claiming_at_once_never_get_the_same_action(
    pg_url: str,
) -> None:
    first_engine = create_engine_for(pg_url)
    second_engine = create_engine_for(pg_url)
    upgrade_to_head(first_engine)
    first, second = Store(first_engine), Store(second_engine)
    for index in range(60):
        first.enqueue_action(planned_action(f"k{index}", at=T0))
    claims: Counter[str] = Counter()
    lock = threading.Lock()

    def claim(store: Store, name: str) -> None:
        while True:
            rows = store.claim_actions(T0 + minutes(1), name, limit=3)
            if not rows:
                return
            with lock:
                claims.update(row.idempotency_key for row in rows)

    threads = [
        threading.Thread(target=claim, args=(store, f"node-{index}"))
        for index, store in enumerate((first, second, first, second))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert len(claims) == 60
    assert set(claims.values()) == {1}
    claimed = first.list_actions(statuses=[ActionStatus.CLAIMED])
    assert len(claimed) == 60
    assert {row.claimed_by for row in claimed} <= {"node-0", "node-1", "node-2", "node-3"}
    first_engine.dispose()
    second_engine.dispose()


def _watchdog_gpu(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "watchdog_gpu", *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_db_copy_moves_a_whole_sqlite_history_to_postgresql(tmp_path: Path, pg_url: str) -> None:
    sqlite_file = tmp_path / "laptop.db"
    with simulation(load("forgotten_idle"), database=sqlite_file) as sim:
        sim.run()
    source = create_engine_for(sqlite_url(sqlite_file))
    expected = _counts(source)
    assert expected["actions"] >= 1  # the forgotten instance was destroyed: a history to move
    assert expected["audit_events"] >= 3
    assert expected["gpu_samples"] > 10

    copied = _watchdog_gpu("db", "copy", "--from", sqlite_url(sqlite_file), "--to", pg_url)

    assert copied.returncode == 0, copied.stderr
    assert f"copied {sum(expected.values())} rows" in copied.stdout
    target = create_engine_for(pg_url)
    assert _counts(target) == expected
    sqlite_store, pg_store = Store(source), Store(target)
    assert pg_store.list_audit_events() == sqlite_store.list_audit_events()
    assert pg_store.list_actions() == sqlite_store.list_actions()
    # The serial sequences moved past the copied ids: the daemon goes on writing on PostgreSQL.
    pg_store.add_audit_event("after.copy", T0 + minutes(600), message="new row")
    assert "after.copy" in {event.kind for event in pg_store.list_audit_events()}

    again = _watchdog_gpu("db", "copy", "--from", sqlite_url(sqlite_file), "--to", pg_url)

    assert again.returncode == 1
    assert "is not empty" in again.stderr
    assert "Traceback" not in again.stderr
    assert _counts(target)["audit_events"] == expected["audit_events"] + 1
    source.dispose()
    target.dispose()


def test_db_copy_hides_the_password_and_refuses_a_missing_source(tmp_path: Path) -> None:
    server = postgres_server()
    url_with_password = server.url("nowhere").replace("postgres@", "postgres:hunter2-canary@")

    missing = _watchdog_gpu(
        "db", "copy", "--from", sqlite_url(tmp_path / "absent.db"), "--to", url_with_password
    )

    assert missing.returncode == 2
    assert "no database file" in missing.stderr
    source = tmp_path / "empty.db"
    empty = create_engine_for(sqlite_url(source))
    upgrade_to_head(empty)
    empty.dispose()
    unreachable = _watchdog_gpu(
        "db", "copy", "--from", sqlite_url(source), "--to", url_with_password
    )
    assert unreachable.returncode == 1
    assert "hunter2-canary" not in unreachable.stderr + unreachable.stdout
    assert "***" in unreachable.stderr  # the URL is named, its password hidden


def test_one_node_leads_the_other_is_refused_and_takes_over_when_the_leader_goes(
    pg_url: str,
) -> None:
    first = PostgresLeadership(pg_url, role="run", node="node-a", database="db")
    second = PostgresLeadership(pg_url, role="run", node="node-b", database="db")
    try:
        assert first.try_acquire() is True
        assert second.try_acquire() is False
        with pytest.raises(LockHeldError, match="node node-a"):
            second.acquire()
        first.check()  # still leads: renews its heartbeat

        first.release()  # the leader goes (a kill closes its connection the same way)

        assert second.try_acquire() is True
        assert (first.epoch, second.epoch) == (None, 2)
        engine = create_engine_for(pg_url)
        leader = Store(engine).leader()
        engine.dispose()
        assert leader is not None
        assert (leader.node, leader.epoch) == ("node-b", 2)
    finally:
        first.release()
        second.release()


def test_a_deposed_leaders_writes_are_fenced_by_the_epoch(pg_url: str) -> None:
    first = PostgresLeadership(pg_url, role="run", node="node-a", database="db")
    second = PostgresLeadership(pg_url, role="run", node="node-b", database="db")
    engine = create_engine_for(pg_url)
    try:
        assert first.try_acquire()
        old_leader = Store(engine)
        old_leader.fence = first.fence
        old_leader.enqueue_action(planned_action("k1", at=T0))
        fence = first.fence
        # The old leader's lock connection dies (host partitioned, process stuck): the lock is
        # gone, a standby takes over, but the old process still runs with its store.
        first.release()
        assert second.try_acquire()
        old_leader.fence = fence

        with pytest.raises(LeadershipLostError):
            old_leader.claim_actions(T0 + minutes(1), "node-a")
        with pytest.raises(LeadershipLostError):
            old_leader.enqueue_action(planned_action("k2", at=T0))
        with pytest.raises(LeadershipLostError):
            first.check()

        new_leader = Store(engine)
        new_leader.fence = second.fence
        assert [row.idempotency_key for row in new_leader.claim_actions(T0, "node-b")] == ["k1"]
        assert [row.idempotency_key for row in new_leader.list_actions()] == ["k1"]
    finally:
        second.release()
        engine.dispose()


def test_status_and_the_metrics_show_who_leads(pg_url: str) -> None:
    leadership = PostgresLeadership(
        pg_url, role="run", node="vps-1", database="db", clock=VirtualClock(T0)
    )
    engine = create_engine_for(pg_url)
    try:
        assert leadership.try_acquire()
        store = Store(engine)
        _populate(store)
        registry = CollectorRegistry()
        registry.register(StoreCollector(store, VirtualClock(T0), MetricsConfig()))
        exposition = generate_latest(registry).decode()

        assert 'watchdog_gpu_leader{node="vps-1"} 1.0' in exposition
        since = [
            line
            for line in exposition.splitlines()
            if line.startswith('watchdog_gpu_leader_since_timestamp_seconds{node="vps-1"}')
        ]
        assert len(since) == 1
        assert float(since[0].split()[-1]) == T0.timestamp()
        status = collect(Source(store=store, settings=None, database="db"), T0 + minutes(5))
        assert status_json(status)["leader"]["node"] == "vps-1"
        assert status_json(status)["leader"]["epoch"] == 1
        assert any(
            line.startswith("leader: node vps-1 since") and "epoch 1" in line
            for line in status_lines(status)
        )
    finally:
        leadership.release()
        engine.dispose()


def test_db_copy_refuses_a_source_a_daemon_holds(tmp_path: Path, pg_url: str) -> None:
    sqlite_file = tmp_path / "held.db"
    empty = create_engine_for(sqlite_url(sqlite_file))
    upgrade_to_head(empty)
    empty.dispose()
    daemon_lock = database_lock(sqlite_url(sqlite_file), role="run")
    daemon_lock.acquire()
    try:
        held = _watchdog_gpu("db", "copy", "--from", sqlite_url(sqlite_file), "--to", pg_url)
    finally:
        daemon_lock.release()
    assert held.returncode == 2, held.stderr
    assert "in use by a watchdog-gpu daemon" in held.stderr
    assert "Traceback" not in held.stderr

    leader = PostgresLeadership(pg_url, role="run", node="node-a", database="db")
    target = tmp_path / "copy.db"
    try:
        assert leader.try_acquire()
        led = _watchdog_gpu("db", "copy", "--from", pg_url, "--to", sqlite_url(target))
    finally:
        leader.release()
    assert led.returncode == 2, led.stderr
    assert "a watchdog-gpu daemon leads" in led.stderr
    free = _watchdog_gpu("db", "copy", "--from", pg_url, "--to", sqlite_url(target))
    assert free.returncode == 0, free.stderr


def test_config_check_connect_reaches_the_database_and_says_who_leads(
    tmp_path: Path, pg_url: str
) -> None:
    server = postgres_server()
    canary = "pg-canary-3f9a"
    config = tmp_path / "team.toml"
    config.write_text(
        f"""
[watchdog]
database_url = "{pg_url}"
database_password = {{ env = "WD_TEST_DB_PASSWORD" }}
node_name = "node-a"

[[accounts]]
name = "vast-main"
provider = "vast"
api_key = "inline-key-for-the-test"
""",
        encoding="utf-8",
    )
    leader = PostgresLeadership(pg_url, role="run", node="node-a", database="db")

    def check(path: Path) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "watchdog_gpu", "config", "check", "--connect"]
        result = subprocess.run(
            [*command, "--config", str(path)],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
            env={**os.environ, "WD_TEST_DB_PASSWORD": canary},
        )
        assert canary not in result.stdout + result.stderr
        assert "Traceback" not in result.stderr
        return result

    try:
        assert leader.try_acquire()
        reached = check(config)
    finally:
        leader.release()
    assert reached.returncode == 0, reached.stderr
    assert "reachable (PostgreSQL" in reached.stdout
    assert "this version's" in reached.stdout
    assert "leader: node node-a, epoch 1" in reached.stdout

    unreachable = tmp_path / "unreachable.toml"
    closed = f"127.0.0.1:{free_port()}"
    unreachable.write_text(
        config.read_text(encoding="utf-8").replace(f"127.0.0.1:{server.port}", closed),
        encoding="utf-8",
    )
    refused = check(unreachable)
    assert refused.returncode == 1
    assert "cannot connect" in refused.stdout
