"""Alembic writes its messages to the process's current standard output, not to the stream
that was current when Alembic was first imported (which a test run, or a daemon that
redirects its output, may have closed since)."""

from __future__ import annotations

import sys

import alembic.config  # imported here, at collection: before the test's own stdout exists
import pytest

from watchdog_gpu.store.migrate import alembic_config


def test_alembic_messages_go_to_the_current_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert alembic.config.Config is not None
    config = alembic_config()
    assert config.stdout is sys.stdout
    config.print_stdout("upgraded")
    assert capsys.readouterr().out == "upgraded\n"
