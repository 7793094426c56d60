"""Which database engine the store-backed tests run on, and a fresh database of it per test.

``WATCHDOG_GPU_TEST_DATABASE=postgresql`` runs them on a real PostgreSQL server that this module
starts on 127.0.0.1 the first time a database is asked for (``tests/support/postgres.py``) and
stops when the test process exits; unset (or ``sqlite``) runs them on SQLite files, the default
installation. ``scripts/test`` runs the scenario suite and the store tests a second time on
PostgreSQL.
"""

from __future__ import annotations

import atexit
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine

from tests.support.postgres import PostgresServer, require_postgres
from watchdog_gpu.store import create_engine_for, sqlite_url, upgrade_to_head

BACKEND_VARIABLE = "WATCHDOG_GPU_TEST_DATABASE"

_server: PostgresServer | None = None


def backend() -> str:
    """``sqlite`` or ``postgresql``."""
    chosen = os.environ.get(BACKEND_VARIABLE, "sqlite").strip().lower() or "sqlite"
    if chosen not in {"sqlite", "postgresql"}:
        raise ValueError(f"{BACKEND_VARIABLE} must be sqlite or postgresql, not {chosen!r}")
    return chosen


def postgres_server() -> PostgresServer:
    """The test process's PostgreSQL server, started on first use (skip/fail when missing)."""
    global _server  # noqa: PLW0603 - one server per test process, started lazily
    if _server is None:
        bindir = require_postgres()
        server = PostgresServer(bindir, Path(tempfile.mkdtemp(prefix="watchdog-gpu-pg-")))
        server.start()
        atexit.register(server.stop)
        _server = server
    return _server


def fresh_database_url(directory: Path, stem: str = "watchdog-gpu") -> str:
    """A URL of a new, empty database: a new SQLite file in ``directory``, or a new PostgreSQL
    database when the tests run on PostgreSQL."""
    if backend() == "postgresql":
        return postgres_server().create_database()
    # The first one is ``STEM.db``: the CLI tests open ``tmp_path / "watchdog-gpu.db"`` by path.
    path = directory / f"{stem}.db"
    index = 0
    while path.exists():
        index += 1
        path = directory / f"{stem}-{index}.db"
    return sqlite_url(path)


@contextmanager
def migrated_engines(directory: Path, *stems: str) -> Iterator[list[Engine]]:
    """One engine per stem on a new database migrated to head (see :func:`fresh_database_url`),
    disposed of afterwards: the store's equivalence tests write the same things to two."""
    engines = []
    try:
        for stem in stems:
            engine = create_engine_for(fresh_database_url(directory, stem))
            engines.append(engine)
            upgrade_to_head(engine)
        yield engines
    finally:
        for engine in engines:
            engine.dispose()
