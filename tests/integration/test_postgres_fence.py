"""The fence of a team's leader on a real PostgreSQL server: no window between a lost lock and a
raised epoch, a standby that never waits for ever on a frozen leader's transaction, a silent
leader deposed after its lease, and TCP settings on every connection (store/leadership.py)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from tests.integration.store_builders import T0, minutes, planned_action
from tests.support.databases import postgres_server
from tests.support.http_receiver import HttpReceiver
from watchdog_gpu.clock import SystemClock
from watchdog_gpu.config import AccountConfig, SecretReference, Settings
from watchdog_gpu.errors import ProviderError, StoreError
from watchdog_gpu.store import Store, create_engine_for, upgrade_to_head
from watchdog_gpu.store.engine import TCP_SETTINGS
from watchdog_gpu.store.leadership import LeadershipLostError, PostgresLeadership
from watchdog_gpu.wiring import assemble

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def pg_url() -> Iterator[str]:
    server = postgres_server()
    url = server.create_database()
    engine = create_engine_for(url)
    upgrade_to_head(engine)
    engine.dispose()
    yield url
    server.drop_database(url)


def _terminate(engine: Engine, pid: int) -> None:
    with engine.connect() as connection:
        connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        connection.commit()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with engine.connect() as connection:
            alive = connection.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}
            ).scalar_one()
        if not alive:
            return
        threading.Event().wait(0.02)
    raise AssertionError(f"backend {pid} still runs")


def test_a_leader_whose_lock_session_ended_is_fenced_before_any_standby_raises_the_epoch(
    pg_url: str,
) -> None:
    leader = PostgresLeadership(pg_url, role="run", node="node-a", database="db")
    engine = create_engine_for(pg_url)
    try:
        assert leader.try_acquire()
        store = Store(engine)
        store.fence = leader.fence
        store.enqueue_action(planned_action("k1", at=T0))
        assert leader.lock_session is not None
        # The lock session dies (a cut connection, an administrator): nobody has taken over
        # yet, the epoch is unchanged — and still the old leader can claim nothing.
        _terminate(engine, leader.lock_session)
        with pytest.raises(LeadershipLostError, match="lock session ended"):
            store.claim_actions(T0 + minutes(1), "node-a")
    finally:
        leader.release()
        engine.dispose()


def test_a_takeover_ends_a_frozen_leaders_open_transaction_instead_of_waiting_for_it(
    pg_url: str,
) -> None:
    first = PostgresLeadership(pg_url, role="run", node="node-a", database="db")
    second = PostgresLeadership(pg_url, role="run", node="node-b", database="db")
    engine = create_engine_for(pg_url)
    try:
        assert first.try_acquire()
        old = Store(engine)
        old.fence = first.fence
        old.enqueue_action(planned_action("k1", at=T0))
        took: list[bool] = []

        def frozen_then_thawed() -> None:
            lock_session = first.lock_session
            assert lock_session is not None
            with old.batch():
                # The old leader is inside a fenced transaction (it passed the fence) when it
                # freezes; meanwhile its lock session is cut and a standby takes the lock.
                old.enqueue_action(planned_action("k2", at=T0))
                _terminate(engine, lock_session)
                taking = threading.Thread(target=lambda: took.append(second.try_acquire()))
                taking.start()
                taking.join(timeout=30)
                assert not taking.is_alive(), "the takeover waited on the frozen transaction"
                # The old leader thaws and claims inside the transaction it had open: its
                # session was ended, so nothing it writes there commits.
                old.claim_actions(T0 + minutes(1), "node-a")

        with pytest.raises(StoreError):
            frozen_then_thawed()
        assert took == [True]
        assert second.epoch == 2
        new = Store(engine)
        new.fence = second.fence
        keys = [row.idempotency_key for row in new.claim_actions(T0 + minutes(1), "node-b")]
        assert keys == ["k1"]  # k2 never committed, and k1 was claimed by nobody before
    finally:
        first.release()
        second.release()
        engine.dispose()


_HOLDER = """
import sys, threading
from watchdog_gpu.store.leadership import PostgresLeadership
leadership = PostgresLeadership(sys.argv[1], role="run", node="frozen", database="db")
assert leadership.try_acquire()
print("LEADING", leadership.lock_session, flush=True)
while True:
    try:
        leadership.check()
    except Exception as error:
        print("LOST", error, flush=True)
        sys.exit(0)
    threading.Event().wait(0.2)
"""


def test_a_frozen_leader_is_deposed_after_its_lease_and_learns_it_when_it_thaws(
    pg_url: str, tmp_path: Path
) -> None:
    script = tmp_path / "holder.py"
    script.write_text(_HOLDER, encoding="utf-8")
    holder = subprocess.Popen(
        [sys.executable, str(script), pg_url],
        stdout=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    standby = PostgresLeadership(pg_url, role="run", node="standby", database="db")
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().startswith("LEADING")
        assert not standby.try_acquire()
        holder.send_signal(19)  # SIGSTOP: the process is frozen, its TCP connections alive
        started = time.monotonic()
        stop = threading.Event()
        timer = threading.Timer(30, stop.set)
        timer.start()
        try:
            assert standby.wait_for_leadership(stop, retry_seconds=0.1, lease_seconds=2.0)
        finally:
            timer.cancel()
        took = time.monotonic() - started
        assert took < 10, f"takeover took {took:.1f} s with a 2 s lease"
        assert standby.epoch == 2
        holder.send_signal(18)  # SIGCONT
        line = holder.stdout.readline()
        assert line.startswith("LOST"), line
        assert holder.wait(timeout=30) == 0
    finally:
        holder.kill()
        holder.wait(timeout=30)
        if holder.stdout is not None:
            holder.stdout.close()
        standby.release()


def test_a_live_leader_is_never_deposed_by_its_lease(pg_url: str) -> None:
    leader = PostgresLeadership(pg_url, role="run", node="node-a", database="db")
    standby = PostgresLeadership(pg_url, role="run", node="node-b", database="db")
    stop = threading.Event()
    try:
        assert leader.try_acquire()

        def renew() -> None:
            while not stop.wait(0.1):
                leader.check()

        renewing = threading.Thread(target=renew)
        renewing.start()
        timer = threading.Timer(3, stop.set)
        timer.start()
        assert not standby.wait_for_leadership(stop, retry_seconds=0.1, lease_seconds=1.0)
        renewing.join(timeout=10)
        leader.check()  # still leads
    finally:
        stop.set()
        leader.release()
        standby.release()


def test_every_connection_has_tcp_keepalives_and_a_user_timeout(pg_url: str) -> None:
    engine = create_engine_for(pg_url)
    leadership = PostgresLeadership(pg_url, role="run", node="node-a", database="db")
    try:
        assert leadership.try_acquire()
        with engine.connect() as connection:
            dsn = connection.connection.dbapi_connection.info.dsn  # type: ignore[union-attr]
        lock_connection = leadership._lock_connection()
        lock_dsn = lock_connection.connection.dbapi_connection.info.dsn  # type: ignore[union-attr]
        for shown in (dsn, lock_dsn):
            for key, value in TCP_SETTINGS.items():
                assert f"{key}={value}" in shown
        timeout = lock_connection.execute(text("SHOW lock_timeout")).scalar_one()
        assert timeout == "5s"
    finally:
        leadership.release()
        engine.dispose()


def test_a_leader_sends_no_provider_request_once_its_lock_session_ended(pg_url: str) -> None:
    leader = PostgresLeadership(pg_url, role="run", node="node-a", database="db")
    engine = create_engine_for(pg_url)
    with HttpReceiver() as provider:
        settings = Settings(
            accounts=[
                AccountConfig(
                    name="vast-main",
                    provider="vast",
                    api_key=SecretReference.plain("key-for-the-receiver"),
                    api_url=f"http://127.0.0.1:{provider.port}",
                    retry_budget=timedelta(seconds=1),
                )
            ]
        )
        assembly = assemble(settings, SystemClock(), {}, store=Store(engine))
        try:
            assert leader.try_acquire()
            assembly.store.fence = leader.fence
            assembly.fence_provider_calls()
            vast = assembly.providers["vast-main"]
            now = SystemClock().now()
            with contextlib.suppress(ProviderError):  # the receiver's answer is not Vast's
                vast.list_instances(now)  # leading: the request goes out
            sent = len(provider.received())
            assert sent >= 1
            assert leader.lock_session is not None
            _terminate(engine, leader.lock_session)
            with pytest.raises(LeadershipLostError):
                vast.list_instances(now)
            assert len(provider.received()) == sent  # nothing reached the provider
        finally:
            assembly.close()
            leader.release()
            engine.dispose()
