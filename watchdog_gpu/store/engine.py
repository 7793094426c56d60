"""The database engine: SQLite tuned for a daemon with a few threads; any other URL as given.

SQLite specifics, and why:
- ``journal_mode=WAL``: readers (status, metrics, the fleet view) never block the writer.
- ``foreign_keys=ON``: SQLite leaves it off by default.
- ``busy_timeout``: a writer waits for another writer's short transaction instead of failing.
- ``cache_size``: 512 KiB a connection instead of SQLite's 2 MiB. Each pooled connection fills
  its own page cache and keeps it for good; the pages come back from the OS page cache for a
  syscall each (bench/README.md, "A cycle over 1,000 instances").
- pysqlite's own transaction handling is switched off and SQLAlchemy emits ``BEGIN`` itself
  (the recipe in SQLAlchemy's pysqlite documentation), so that write transactions can start with
  ``BEGIN IMMEDIATE``: a deferred transaction that reads, then writes, fails at once with
  "database is locked" when another writer committed in between (busy_timeout does not help
  there). Read transactions stay deferred and never block anyone.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.pool import StaticPool

from watchdog_gpu.store import json_text
from watchdog_gpu.store.urls import sqlite_url

__all__ = [
    "DEFAULT_BUSY_TIMEOUT_MS",
    "SQLITE_BEGIN_OPTION",
    "create_engine_for",
    "create_private_file",
    "display_url",
    "sqlite_url",
    "writing",
]

DEFAULT_BUSY_TIMEOUT_MS = 10_000

# Negative: in KiB (SQLite's cache_size pragma). See the module docstring.
PAGE_CACHE_KIB = 512

# Execution option read by the BEGIN hook below: "IMMEDIATE" for write transactions.
SQLITE_BEGIN_OPTION = "watchdog_sqlite_begin"


# libpq's TCP settings on every connection: a silent peer is dropped after about 25 s of
# keepalives, and data unacknowledged for 20 s fails the statement (a blackholed network).
TCP_SETTINGS: dict[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 20_000,
}


def postgres_connect_args(url: URL) -> dict[str, Any]:
    """The TCP settings of :data:`TCP_SETTINGS` a URL does not set itself (libpq drivers)."""
    if url.get_backend_name() != "postgresql" or url.get_driver_name() not in {
        "psycopg",
        "psycopg2",
    }:
        return {}
    return {key: value for key, value in TCP_SETTINGS.items() if key not in url.query}


def create_engine_for(url: str | URL, *, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS) -> Engine:
    """An Engine for ``url`` (any SQLAlchemy URL; ``sqlite:///path`` is the usual one).

    For SQLite files: WAL, foreign keys on, ``busy_timeout_ms`` and a small connection pool that
    several threads share (each call of the repository takes its own connection); a missing
    file is created 0600 and its missing parent directory 0700 (the database holds the fleet's
    history; see :func:`create_private_file`).
    An in-memory SQLite URL gets one shared connection (tests only: it cannot serve several
    threads at once).
    """
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(parsed, pool_pre_ping=True, connect_args=postgres_connect_args(parsed))
    in_memory = parsed.database in (None, "", ":memory:") or "mode=memory" in str(parsed)
    options: dict[str, Any] = {
        "connect_args": {"check_same_thread": False},
        # SQLite returns JSON columns as text: decoded with the repeated texts kept.
        "json_deserializer": json_text.loads,
    }
    if in_memory:
        options["poolclass"] = StaticPool
    else:
        if parsed.database and not parsed.query.get("uri"):
            create_private_file(Path(parsed.database).expanduser())
        options["pool_size"] = 5
        options["max_overflow"] = 10
    engine = create_engine(parsed, **options)
    _install_sqlite_hooks(engine, busy_timeout_ms=busy_timeout_ms, wal=not in_memory)
    return engine


def create_private_file(path: Path) -> None:
    """Create ``path`` empty with mode 0600 (and its missing parent directories 0700) unless it
    exists. An empty file is an empty SQLite database; SQLite creates the ``-wal`` and ``-shm``
    files with the database file's permissions, so the fleet's history stays readable by its
    owner alone whatever the umask (outside systemd's ``UMask=0077`` too). An existing file
    keeps the mode its owner chose."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    os.close(descriptor)


def writing(engine: Engine) -> Engine:
    """``engine`` with write transactions starting as ``BEGIN IMMEDIATE`` on SQLite (same pool)."""
    return engine.execution_options(**{SQLITE_BEGIN_OPTION: "IMMEDIATE"})


def _install_sqlite_hooks(engine: Engine, *, busy_timeout_ms: int, wal: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Stop pysqlite from emitting BEGIN/COMMIT on its own (see the module docstring).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            cursor.execute("PRAGMA foreign_keys = ON")
            cursor.execute(f"PRAGMA cache_size = {-PAGE_CACHE_KIB}")
            if wal:
                cursor.execute("PRAGMA journal_mode = WAL")
                # In WAL mode NORMAL never corrupts the database and survives a killed process
                # (the daemon's crash model); only an OS crash may lose the last commits. FULL
                # would fsync every one of the ~20 transactions of each tick.
                cursor.execute("PRAGMA synchronous = NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        mode = connection.get_execution_options().get(SQLITE_BEGIN_OPTION)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if mode == "IMMEDIATE" else "BEGIN")


def display_url(engine_or_url: Engine | str | URL) -> str:
    """The URL with any password hidden, for logs and messages."""
    url = engine_or_url.url if isinstance(engine_or_url, Engine) else make_url(engine_or_url)
    return url.render_as_string(hide_password=True)
