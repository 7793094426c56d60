"""Helpers for the operator command tests: a clean environment, a frozen clock, running a command.

The commands run through ``watchdog_gpu.cli.main`` against real, migrated SQLite files built
with the real ``Store`` (see ``store_builders``); "now" comes from
``watchdog_gpu.commands.common.clock``, which the tests replace with a VirtualClock.
"""

from __future__ import annotations

import os
import textwrap
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.integration.store_builders import T0
from watchdog_gpu.cli import main
from watchdog_gpu.clock import VirtualClock
from watchdog_gpu.commands import common

NOW = T0 + timedelta(hours=2)

_MACHINE_VARIABLES = {
    "CREDENTIALS_DIRECTORY",
    "STATE_DIRECTORY",
    "XDG_STATE_HOME",
    "XDG_CONFIG_HOME",
}


def isolate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No configuration, state directory or override from the machine running the tests."""
    for name in list(os.environ):
        if name.startswith("WATCHDOG_GPU_") or name in _MACHINE_VARIABLES:
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)


def freeze_clock(monkeypatch: pytest.MonkeyPatch, at: datetime = NOW) -> VirtualClock:
    """The commands' clock, fixed at ``at`` (advance it to move "now")."""
    clock = VirtualClock(at)
    monkeypatch.setattr(common, "clock", clock)
    return clock


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> Result:
    """``watchdog-gpu ARGV`` in-process; its exit code and what it printed."""
    capsys.readouterr()  # drop anything printed before
    code = main(list(argv))
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def write_config(directory: Path, database: Path, body: str = "", *, mode: str = "monitor") -> Path:
    """A configuration in ``mode`` using ``database``, with ``body`` (TOML tables other than
    ``[watchdog]``) appended; returns its path."""
    path = directory / "watchdog-gpu.toml"
    head = f'[watchdog]\nmode = "{mode}"\ndatabase_url = "sqlite:///{database}"\n'
    path.write_text(head + textwrap.dedent(body), encoding="utf-8")
    return path
