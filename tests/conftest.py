"""Fixtures shared by every test directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from watchdog_gpu.store import Store, create_engine_for, sqlite_url, upgrade_to_head


@pytest.fixture
def store_engine(tmp_path: Path) -> Iterator[Engine]:
    """An engine on a real SQLite file in ``tmp_path``, migrated with the real migrations."""
    engine = create_engine_for(sqlite_url(tmp_path / "watchdog-gpu.db"))
    upgrade_to_head(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def store(store_engine: Engine) -> Store:
    """A ``Store`` on a real, migrated SQLite file (one per test)."""
    return Store(store_engine)
