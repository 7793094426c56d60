"""The daemon's migrations in a child process (store/migrate_process.py), on real SQLite files."""

from __future__ import annotations

import logging
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from alembic import command
from alembic.script import ScriptDirectory

from tests.support.interpreter import run_fresh
from watchdog_gpu.errors import SchemaTooNewError, StoreError
from watchdog_gpu.store import create_engine_for, sqlite_url, upgrade_to_head
from watchdog_gpu.store.migrate import alembic_config, head_revision, revision_if_at_head
from watchdog_gpu.store.migrate_process import upgrade_in_child_process
from watchdog_gpu.store.schema import metadata


def _tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as connection:
        rows = connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        return {name for (name,) in rows}


def test_an_empty_file_is_migrated_by_a_child_and_alembic_never_loads_here(
    tmp_path: Path,
) -> None:
    database = tmp_path / "fresh.db"
    script = (
        "import sys\n"
        "from watchdog_gpu.wiring import open_store\n"
        f"open_store({sqlite_url(database)!r}, migrate_in_child=True)\n"
        "print(sorted(m for m in ('alembic', 'mako', 'pygments') if m in sys.modules))\n"
    )
    done = run_fresh(script)

    assert done.stdout.strip() == "[]"
    assert _tables(database) == set(metadata.tables) | {"alembic_version"}
    assert revision_if_at_head(create_engine_for(sqlite_url(database))) == head_revision()


def test_the_result_and_the_log_line_are_the_parents(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = sqlite_url(tmp_path / "fresh.db")
    caplog.set_level(logging.INFO, logger="watchdog_gpu.store.migrate_process")

    result = upgrade_in_child_process(create_engine_for(url), url)

    assert (result.before, result.after) == (None, head_revision())
    assert f"database migrated from_revision=None to_revision={head_revision()}" in caplog.text


def test_a_database_at_head_starts_no_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = sqlite_url(tmp_path / "at-head.db")
    engine = create_engine_for(url)
    upgrade_to_head(engine)

    def no_child(*args: object, **kwargs: object) -> None:
        raise AssertionError("a child process was started for a database at head")

    monkeypatch.setattr(subprocess, "run", no_child)
    result = upgrade_in_child_process(engine, url)

    assert (result.before, result.after, result.changed) == (head_revision(),) * 2 + (False,)


def test_a_database_one_behind_is_brought_to_head(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "behind.db")
    engine = create_engine_for(url)
    upgrade_to_head(engine)
    config = alembic_config()
    scripts = ScriptDirectory.from_config(config)
    head = scripts.get_revision(scripts.get_current_head() or "")
    assert head is not None
    assert isinstance(head.down_revision, str)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, head.down_revision)

    result = upgrade_in_child_process(engine, url)

    assert (result.before, result.after) == (head.down_revision, head_revision())
    assert revision_if_at_head(engine) == head_revision()


def test_a_newer_schema_comes_back_as_the_same_refusal(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "newer.db")
    engine = create_engine_for(url)
    upgrade_to_head(engine)
    with engine.begin() as connection:
        connection.exec_driver_sql("UPDATE alembic_version SET version_num = 'f00dfeed2099'")
    with pytest.raises(SchemaTooNewError) as in_process:
        upgrade_to_head(engine)

    with pytest.raises(SchemaTooNewError) as in_child:
        upgrade_in_child_process(engine, url)

    assert str(in_child.value) == str(in_process.value)
    assert in_child.value.revision == "f00dfeed2099"
    with engine.connect() as connection:  # nothing was touched
        version = connection.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    assert version == "f00dfeed2099"


def test_a_file_that_is_not_a_database_is_the_same_store_error(tmp_path: Path) -> None:
    database = tmp_path / "garbage.db"
    database.write_bytes(b"this is not an SQLite file, it is a shopping list\n" * 100)
    url = sqlite_url(database)
    with pytest.raises(StoreError) as in_process:
        upgrade_to_head(create_engine_for(url))

    with pytest.raises(StoreError) as in_child:
        upgrade_in_child_process(create_engine_for(url), url)

    assert type(in_child.value) is StoreError
    assert str(in_child.value) == str(in_process.value)
    assert "file is not a database" in str(in_child.value)

    assert database.read_bytes().startswith(b"this is not an SQLite file")


def test_a_child_that_dies_is_a_store_error_without_the_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stand-in interpreter that dies the way a crashing child would: a traceback on stderr
    # naming the URL it was given (what a driver's error could do), no answer on stdout.
    impostor = tmp_path / "python"
    impostor.write_text(
        "#!/bin/sh\nread url\necho 'Traceback (most recent call last):' >&2\n"
        'echo "RuntimeError: cannot reach $url" >&2\nexit 3\n'
    )
    impostor.chmod(impostor.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(sys, "executable", str(impostor))
    url = "postgresql://watchdog:Hunter2-SECRET@127.0.0.1:1/watchdog"
    engine = create_engine_for(sqlite_url(tmp_path / "empty.db"))  # not at head: a child runs

    with pytest.raises(StoreError) as failed:
        upgrade_in_child_process(engine, url)

    message = str(failed.value)
    assert "exited with status 3" in message
    assert "cannot reach postgresql://watchdog:***@127.0.0.1:1/watchdog" in message
    assert "Hunter2-SECRET" not in message
