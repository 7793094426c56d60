"""Fixtures shared by every test directory."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from tests.support.databases import migrated_database_url
from watchdog_gpu.log import QUIET_LOGGERS
from watchdog_gpu.store import Store, create_engine_for


@pytest.fixture
def store_engine(tmp_path: Path) -> Iterator[Engine]:
    """An engine on a real SQLite file in ``tmp_path`` (a new PostgreSQL database when the tests
    run on PostgreSQL: ``tests/support/databases.py``), at the schema the real migrations build."""
    engine = create_engine_for(migrated_database_url(tmp_path))
    yield engine
    engine.dispose()


@pytest.fixture
def store(store_engine: Engine) -> Store:
    """A ``Store`` on a real, migrated SQLite file (one per test)."""
    return Store(store_engine)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """``configure_logging`` changes the root logger and the quiet libraries' levels: put them
    back after the test."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    quiet = {name: logging.getLogger(name).level for name in QUIET_LOGGERS}
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)
    for name, previous in quiet.items():
        logging.getLogger(name).setLevel(previous)


@pytest.fixture(autouse=True)
def _no_ambient_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    # Commands fit their text to $COLUMNS (commands/common.output_width): a width left in the
    # environment by the shell that started pytest, or by an earlier test in the same worker,
    # must not wrap the lines a test reads. Tests about widths set it themselves.
    monkeypatch.delenv("COLUMNS", raising=False)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the modules with ``slow`` tests first (each module kept whole, so its module fixtures
    start once; order otherwise unchanged): the parallel workers then end on short tests
    together instead of one waiting while the other runs a long test it drew last."""
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow)
