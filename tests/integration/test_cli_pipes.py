"""Reading a command's output through a pipe that closes early (``… | head -1``): the command
ends quietly (no ``BrokenPipeError`` traceback) with the status of a program stopped by SIGPIPE,
as ``cat`` would. Real subprocesses, a real pipe and ``head``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import Engine

from tests.integration.store_builders import ACCOUNT, T0, instance, minutes, observation
from watchdog_gpu.cli import EXIT_BROKEN_PIPE
from watchdog_gpu.store import Store

# Far more than a pipe buffer (64 KiB), so the command is still writing when head has gone.
INSTANCES = 1500
EVENTS = 1500


@pytest.fixture
def db(store: Store, store_engine: Engine) -> str:
    snapshots = [instance(str(1000 + n), at=T0) for n in range(INSTANCES)]
    store.record_observation(observation(*snapshots, at=T0), T0)
    for n in range(EVENTS):
        store.add_audit_event(
            "protection_added",
            T0 + minutes(n),
            account=ACCOUNT,
            instance_id=str(1000 + n % INSTANCES),
            message=f"instance {ACCOUNT}/{1000 + n % INSTANCES} protected by ops ({n})",
        )
    return store_engine.url.render_as_string(hide_password=False)


def through_head(tmp_path: Path, *argv: str) -> tuple[int, str, bytes]:
    """``watchdog-gpu ARGV | head -1``: the command's exit status and stderr, head's output."""
    environment = {**os.environ, "HOME": str(tmp_path), "PYTHONUNBUFFERED": ""}
    environment.pop("WATCHDOG_GPU_CONFIG", None)
    command = subprocess.Popen(
        [sys.executable, "-m", "watchdog_gpu", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=environment,
    )
    assert command.stdout is not None
    assert command.stderr is not None
    head = subprocess.run(
        ["head", "-1"], stdin=command.stdout, capture_output=True, timeout=60, check=False
    )
    command.stdout.close()  # only head holds the reading end now; it has exited
    error = command.stderr.read().decode()
    command.stderr.close()
    return command.wait(timeout=60), error, head.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ("events", "--json", "--limit", "0"),
        ("events", "--limit", "0"),
        ("status", "--json"),
        ("status",),
    ],
)
def test_a_reader_that_stops_early_gets_no_traceback(
    db: str, tmp_path: Path, argv: tuple[str, ...]
) -> None:
    code, error, first = through_head(tmp_path, *argv, "--db", db)
    assert first.strip(), error
    assert "BrokenPipeError" not in error
    assert error == ""
    assert code == EXIT_BROKEN_PIPE


def test_a_reader_that_reads_everything_sees_success(db: str, tmp_path: Path) -> None:
    environment = {**os.environ, "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "watchdog_gpu", "events", "--json", "--db", db],
        capture_output=True,
        cwd=tmp_path,
        env=environment,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(b"\n") >= 50
