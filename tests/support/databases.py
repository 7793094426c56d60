"""Which database engine the store-backed tests run on, and a fresh database of it per test.

``WATCHDOG_GPU_TEST_DATABASE=postgresql`` runs them on a real PostgreSQL server that this module
starts on 127.0.0.1 the first time a database is asked for (``tests/support/postgres.py``) and
stops when the test process exits; unset (or ``sqlite``) runs them on SQLite files, the default
installation. ``scripts/test`` runs the store tests and the scenarios that rest on the store a
second time on PostgreSQL (docs/testing.md, "PostgreSQL").
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine

from tests.support.postgres import PostgresServer, require_postgres
from watchdog_gpu.store import create_engine_for, sqlite_url, upgrade_to_head
from watchdog_gpu.store.urls import sqlite_file

BACKEND_VARIABLE = "WATCHDOG_GPU_TEST_DATABASE"

_server: PostgresServer | None = None
_sqlite_template: Path | None = None
_postgres_template_name: str | None = None


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


def migrated_database_url(directory: Path, stem: str = "watchdog-gpu") -> str:
    """A URL of a new database at the newest schema (named as :func:`fresh_database_url` names
    it): a copy of one database the real migrations built once in this test process. Running
    the migrations for every test cost about 0.2 s each on SQLite and more on PostgreSQL;
    ``test_migrations.py`` and the tests that open an empty database still run them."""
    if backend() == "postgresql":
        return postgres_server().create_database(template=_postgres_template())
    url = fresh_database_url(directory, stem)
    path = sqlite_file(url)
    assert path is not None
    copy_migrated_sqlite(path)
    return url


def copy_migrated_sqlite(path: Path) -> None:
    """Write a SQLite database at the newest schema to ``path`` (see
    :func:`migrated_database_url`)."""
    global _sqlite_template  # noqa: PLW0603 - built once per test process, on first use
    if _sqlite_template is None:
        directory = Path(tempfile.mkdtemp(prefix="watchdog-gpu-template-"))
        atexit.register(shutil.rmtree, directory, True)
        _migrate(sqlite_url(directory / "template.db"))
        _sqlite_template = directory / "template.db"
    shutil.copyfile(_sqlite_template, path)


def _postgres_template() -> str:
    """The name of this process's migrated PostgreSQL database to copy (never connected to
    after it is built: PostgreSQL copies only a database nobody is connected to)."""
    global _postgres_template_name  # noqa: PLW0603 - built once per test process
    if _postgres_template_name is None:
        url = postgres_server().create_database()
        _migrate(url)
        _postgres_template_name = url.rsplit("/", 1)[1]
    return _postgres_template_name


def _migrate(url: str) -> None:
    engine = create_engine_for(url)
    try:
        upgrade_to_head(engine)
    finally:
        engine.dispose()  # closes the last connection: SQLite folds its WAL into the file


@contextmanager
def migrated_engines(directory: Path, *stems: str) -> Iterator[list[Engine]]:
    """One engine per stem on a new database migrated to head (see :func:`fresh_database_url`),
    disposed of afterwards: the store's equivalence tests write the same things to two."""
    engines = []
    try:
        for stem in stems:
            engines.append(create_engine_for(migrated_database_url(directory, stem)))
        yield engines
    finally:
        for engine in engines:
            engine.dispose()
