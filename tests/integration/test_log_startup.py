"""What a start logs: the migration in one line of our own, not alembic's dozen INFO lines."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from watchdog_gpu.log import configure_logging
from watchdog_gpu.store import create_engine_for, sqlite_url, upgrade_to_head


@pytest.mark.usefixtures("restore_logging")
@pytest.mark.parametrize("level", ["info", "debug"])
def test_migrating_a_new_database_logs_one_line_and_nothing_from_alembic(
    tmp_path: Path, level: str
) -> None:
    stream = io.StringIO()
    configure_logging(level, "text", stream=stream, environ={})
    engine = create_engine_for(sqlite_url(tmp_path / "watchdog-gpu.db"))
    try:
        upgrade_to_head(engine)
        upgrade_to_head(engine)  # a restart: already at head, nothing to say
    finally:
        engine.dispose()

    lines = stream.getvalue().splitlines()
    assert [line for line in lines if "logger=alembic" in line] == []
    migrated = [line for line in lines if "database migrated" in line]
    assert len(migrated) == 1
    assert "from_revision=None" in migrated[0]
