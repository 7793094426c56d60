"""Guards around the database: a schema from a newer watchdog-gpu, private files, one active
daemon. Real SQLite files with the real migrations; the lock with real processes."""

from __future__ import annotations

import os
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.integration.cli_support import Result, isolate, run
from tests.integration.test_daemon_run import child_environment as daemon_environment
from watchdog_gpu.daemon_lock import hold_database_lock
from watchdog_gpu.errors import DatabaseInUseError
from watchdog_gpu.store import create_engine_for, sqlite_url, upgrade_to_head
from watchdog_gpu.store.lock import FileLock, LockHeldError, database_lock, lock_path
from watchdog_gpu.store.migrate import current_revision

UNKNOWN_REVISION = "f00dfeed2099"
WAIT_SECONDS = 60.0


def migrated_database(path: Path) -> Path:
    engine = create_engine_for(sqlite_url(path))
    try:
        upgrade_to_head(engine)
    finally:
        engine.dispose()
    return path


def stamp_newer(path: Path) -> None:
    """Mark the database as written by a future release."""
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE alembic_version SET version_num = ?", (UNKNOWN_REVISION,))


def write_config(tmp_path: Path, database: Path) -> Path:
    config = tmp_path / "config.toml"
    config.write_text(
        f"""
[watchdog]
mode = "monitor"
poll_interval = "2s"
database_url = "{sqlite_url(database)}"

[metrics]
enabled = false

[probe]
enabled = false

[[accounts]]
name = "vast-main"
provider = "vast"
api_key = {{ env = "WD_TEST_VAST_KEY" }}
api_url = "http://127.0.0.1:9"
retry_budget = "1s"
""",
        encoding="utf-8",
    )
    return config


# -- a database from a newer schema -----------------------------------------------------------


@pytest.fixture
def newer_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    isolate(monkeypatch, tmp_path)
    monkeypatch.setenv("WD_TEST_VAST_KEY", "key-not-used")
    database = migrated_database(tmp_path / "wd.db")
    stamp_newer(database)
    return database


def assert_newer_schema_refused(result: Result, database: Path) -> None:
    assert result.code == 2, result
    assert "written by a newer watchdog-gpu" in result.err
    assert f"revision {UNKNOWN_REVISION}" in result.err
    assert "upgrade the package" in result.err
    assert "Traceback" not in result.err
    assert str(database) in result.err
    engine = create_engine_for(sqlite_url(database))
    try:
        assert current_revision(engine) == UNKNOWN_REVISION  # left as it was
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "command",
    [
        ["status"],
        ["status", "--json"],
        ["events"],
        ["fuse", "status"],
        ["snooze", "9001", "--for", "1h"],
    ],
)
def test_read_and_operator_commands_refuse_a_newer_schema_with_exit_2(
    newer_database: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    result = run(capsys, *command, "--db", str(newer_database))

    assert_newer_schema_refused(result, newer_database)


def test_db_upgrade_refuses_a_newer_schema_with_exit_2(
    newer_database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "db", "upgrade", "--database-url", sqlite_url(newer_database))

    assert_newer_schema_refused(result, newer_database)


@pytest.mark.parametrize("command", [["once"], ["run"]])
def test_once_and_run_refuse_a_newer_schema_with_exit_2(
    newer_database: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    config = write_config(tmp_path, newer_database)

    result = run(capsys, *command, "--config", str(config))

    assert_newer_schema_refused(result, newer_database)


# -- private files ------------------------------------------------------------------------------


@contextmanager
def umask(value: int) -> Iterator[None]:
    previous = os.umask(value)
    try:
        yield
    finally:
        os.umask(previous)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_database_and_its_wal_and_shm_files_are_readable_by_the_owner_only(
    tmp_path: Path,
) -> None:
    database = tmp_path / "state" / "wd.db"
    with umask(0o022):
        engine = create_engine_for(sqlite_url(database))
        try:
            upgrade_to_head(engine)
            with engine.connect() as connection:  # keeps the WAL and its index open
                connection.exec_driver_sql("SELECT 1 FROM alembic_version").fetchall()
                files = [database, Path(f"{database}-wal"), Path(f"{database}-shm")]
                modes = {path.name: mode_of(path) for path in files}
        finally:
            engine.dispose()

    assert modes == {"wd.db": 0o600, "wd.db-wal": 0o600, "wd.db-shm": 0o600}
    assert mode_of(database.parent) == 0o700


def test_an_existing_database_keeps_the_mode_its_owner_chose(tmp_path: Path) -> None:
    database = tmp_path / "wd.db"
    database.touch()
    database.chmod(0o640)

    migrated_database(database)

    assert mode_of(database) == 0o640


def test_the_lock_file_is_readable_by_the_owner_only(tmp_path: Path) -> None:
    lock = database_lock(sqlite_url(tmp_path / "wd.db"), role="run")
    with umask(0o022):
        lock.acquire()
    try:
        assert mode_of(lock_path(tmp_path / "wd.db")) == 0o600
    finally:
        lock.release()


# -- one active daemon per database ---------------------------------------------------------------


def test_a_second_holder_is_refused_naming_the_first_and_gets_it_once_released(
    tmp_path: Path,
) -> None:
    url = sqlite_url(tmp_path / "wd.db")
    first = database_lock(url, role="run")
    first.acquire()
    second = database_lock(url, role="once")
    with pytest.raises(LockHeldError) as refused:
        second.acquire()
    message = str(refused.value)
    assert f"pid {os.getpid()}" in message
    assert "in use by a watchdog-gpu daemon (pid" in message
    assert "so `watchdog-gpu once` is refused" in message
    assert refused.value.holder.role == "run"

    first.release()
    second.acquire()  # free again
    second.release()


def test_a_starting_daemon_waits_for_once_but_not_for_another_daemon(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "wd.db")
    once = database_lock(url, role="once")
    once.acquire()
    releaser = threading.Timer(0.5, once.release)
    releaser.start()
    try:
        daemon_lock = hold_database_lock(url)  # waits for `once` to finish
    finally:
        releaser.join()
    try:
        with pytest.raises(DatabaseInUseError):
            hold_database_lock(url)  # another daemon is refused at once
    finally:
        daemon_lock.release()


def test_memory_and_server_databases_take_no_file_lock(tmp_path: Path) -> None:
    assert not isinstance(database_lock("sqlite://", role="run"), FileLock)
    assert not isinstance(database_lock("postgresql://u:p@127.0.0.1/wd", role="run"), FileLock)
    assert isinstance(database_lock(sqlite_url(tmp_path / "wd.db"), role="run"), FileLock)


def child_environment(tmp_path: Path) -> dict[str, str]:
    return daemon_environment(tmp_path, WD_TEST_VAST_KEY="key-for-a-closed-port")


def watchdog_gpu(tmp_path: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "watchdog_gpu", *arguments],
        capture_output=True,
        text=True,
        timeout=WAIT_SECONDS,
        check=False,
        env=child_environment(tmp_path),
    )


@contextmanager
def running_daemon(tmp_path: Path, config: Path) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "watchdog_gpu", "run", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=child_environment(tmp_path),
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=WAIT_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if process.stderr is not None:
            process.stderr.close()


def wait_for_holder(path: Path, pid: int, process: subprocess.Popen[str]) -> None:
    pause = threading.Event()
    for _ in range(int(WAIT_SECONDS / 0.1)):
        if path.is_file() and path.read_text(encoding="utf-8").startswith(f"{pid}\n"):
            return
        if process.poll() is not None:
            pytest.fail(f"the daemon exited ({process.returncode}) before taking the lock")
        pause.wait(0.1)
    pytest.fail("the daemon never took the lock")


@pytest.mark.slow
def test_a_second_daemon_and_once_are_refused_while_status_and_events_still_read(
    tmp_path: Path,
) -> None:
    database = tmp_path / "state" / "wd.db"
    config = write_config(tmp_path, database)
    with running_daemon(tmp_path, config) as daemon:
        wait_for_holder(lock_path(database), daemon.pid, daemon)

        second = watchdog_gpu(tmp_path, "run", "--config", str(config))
        once = watchdog_gpu(tmp_path, "once", "--config", str(config))
        upgrade = watchdog_gpu(tmp_path, "db", "upgrade", "--config", str(config))
        status = watchdog_gpu(tmp_path, "status", "--config", str(config))
        events = watchdog_gpu(tmp_path, "events", "--config", str(config))

        assert daemon.poll() is None  # the first one keeps running
    for refused, who in (
        (second, "this second daemon"),
        (once, "`watchdog-gpu once`"),
        (upgrade, "`watchdog-gpu db upgrade`"),
    ):
        assert refused.returncode == 2, refused.stderr
        assert f"in use by a watchdog-gpu daemon (pid {daemon.pid}, since " in refused.stderr
        assert f"so {who} is refused" in refused.stderr
        assert "Traceback" not in refused.stderr
    assert status.returncode == 0, status.stderr
    assert "vast-main" in status.stdout
    assert events.returncode == 0, events.stderr
    assert daemon.returncode == 0  # stopped cleanly by SIGTERM

    # The lock went with the daemon: `once` runs now (the closed port fails its poll: exit 1).
    after = watchdog_gpu(tmp_path, "once", "--config", str(config))
    assert after.returncode == 1, after.stderr
    assert "vast-main: FAILED" in after.stdout


@pytest.mark.slow
def test_a_killed_daemon_leaves_no_stale_lock(tmp_path: Path) -> None:
    database = tmp_path / "state" / "wd.db"
    config = write_config(tmp_path, database)
    with running_daemon(tmp_path, config) as daemon:
        wait_for_holder(lock_path(database), daemon.pid, daemon)
        daemon.kill()
        daemon.wait(timeout=WAIT_SECONDS)

    lock = database_lock(sqlite_url(database), role="run")
    # The kernel releases the dead process's flock with its last descriptor. A child it started
    # just before the kill (the migration's, between its fork and its exec) may hold a copy for
    # a moment: one CI run found the lock held right after the wait. A stale lock would still
    # be held after these seconds.
    lock.acquire(wait_seconds=10.0)
    lock.release()
