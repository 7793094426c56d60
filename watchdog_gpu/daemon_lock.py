"""Which daemon runs against a database: on SQLite the one that holds its lock
(:func:`hold_database_lock`); on PostgreSQL the leader of the watchdogs sharing it, the others
standing by (:func:`stand_by_until_leading`) and the leader checking its lead
(:func:`watch_leadership`). docs/database.md."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from watchdog_gpu import systemd_notify
from watchdog_gpu.config.sections import MetricsSection
from watchdog_gpu.daemon_metrics import start_standby_metrics
from watchdog_gpu.errors import StoreError
from watchdog_gpu.store.leadership import LEASE_SECONDS, PostgresLeadership
from watchdog_gpu.store.lock import DatabaseLock, LockHeldError, database_lock

log = logging.getLogger(__name__)

# How long a starting daemon waits for a `watchdog-gpu once` that holds the database's lock.
ONCE_WAIT_SECONDS = 120.0


def stand_by_until_leading(
    leadership: PostgresLeadership,
    environ: Mapping[str, str],
    stop: threading.Event,
    *,
    metrics: MetricsSection | None = None,
    lease_seconds: float = LEASE_SECONDS,
) -> bool:
    """Wait (as a standby: no polling, no probing) until this node leads the watchdogs sharing
    the PostgreSQL database; False when ``stop`` (SIGTERM/SIGINT) came first. systemd is told
    the unit is ready (a standby is a healthy state) and kept fed while it waits; with
    ``metrics`` enabled the standby's own ``/metrics`` answers meanwhile
    (``metrics/standby.py``). Raises MetricsAddressError when that endpoint cannot listen."""
    try:
        if leadership.try_acquire():
            return True
    except StoreError as error:  # the database is down: wait for it as a standby does
        log.warning("standing by: the database cannot be reached error=%s", error)
    stop_endpoint = start_standby_metrics(metrics, leadership.node)
    systemd_notify.ready(f"standing by: node {leadership.node}", environ=environ)
    done = threading.Event()
    pinger = threading.Thread(
        target=_ping_systemd_until, args=(done, environ), name="standby-watchdog", daemon=True
    )
    pinger.start()
    try:
        return leadership.wait_for_leadership(stop, lease_seconds=lease_seconds)
    finally:
        done.set()
        if stop_endpoint is not None:
            stop_endpoint()  # the leader's endpoint takes the port next


def _ping_systemd_until(done: threading.Event, environ: Mapping[str, str]) -> None:
    interval = systemd_notify.watchdog_interval(environ)
    if interval is None:
        return
    while not done.wait(interval):  # already half of WatchdogSec
        systemd_notify.watchdog_ping(environ=environ)


def watch_leadership(
    leadership: PostgresLeadership,
    stopped: threading.Event,
    request_stop: Callable[[str], None],
    lost: list[str],
    every_seconds: float,
) -> None:
    """Check the leadership until the daemon has ``stopped``; a lost one stops the daemon at
    once (its store's writes are fenced already: store/leadership.py)."""
    while not stopped.wait(every_seconds):
        try:
            leadership.check()
        except StoreError as error:
            lost.append(str(error))
            log.critical("leadership lost, stopping (a standby takes over) error=%s", error)
            request_stop("leadership lost")
            return


def hold_database_lock(database_url: str) -> DatabaseLock:
    """The database's lock, held by this daemon (see :mod:`watchdog_gpu.store.lock`). A
    ``watchdog-gpu once`` holding it is waited for (up to :data:`ONCE_WAIT_SECONDS`: it ends
    by itself); another daemon is not. Raises DatabaseInUseError or StoreError."""
    lock = database_lock(database_url, role="run")
    try:
        lock.acquire()
    except LockHeldError as error:
        if error.holder.role != "once":
            raise
        log.info("waiting for `watchdog-gpu once` to finish pid=%s", error.holder.pid)
        lock.acquire(wait_seconds=ONCE_WAIT_SECONDS)
    return lock
